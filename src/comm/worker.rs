//! A member's communication thread: runs the member's collectives one after another, in
//! the order they were issued, while the member computes. What makes an all-reduce
//! proceed in the background on backends whose collectives block the calling thread.

use super::collectives::{Comm, Pending};
use super::quantise::CommDtype;
use anyhow::Result;
use candle_core::Tensor;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

type Job = Box<dyn FnOnce() + Send>;

pub struct Worker {
    jobs: Mutex<mpsc::Sender<Job>>,
}

impl Worker {
    /// Starts the thread (named `name`); it ends when the worker is dropped and its queue
    /// has run out.
    pub fn spawn(name: String) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new().name(name).spawn(move || {
            while let Ok(job) = rx.recv() {
                job();
            }
        })?;
        Ok(Self {
            jobs: Mutex::new(tx),
        })
    }

    /// Queues `f` behind every job submitted before it; its result arrives on the
    /// receiver (which reports a disconnect if the thread died).
    pub fn submit<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> mpsc::Receiver<R> {
        let (tx, rx) = mpsc::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        // A send fails only once the thread is gone; the receiver then reports it.
        let _ = self
            .jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(job);
        rx
    }
}

/// A member's collectives in one order: run by the caller until the member's first
/// started collective, then all of them on the member's communication thread (blocking
/// ones queue there too, behind what was started before them). `M` is the member alone
/// (its collectives block the calling thread); `Ordered<M>` is the member as ranks use it.
/// A backend that must not call its member from another thread (`threads: false`)
/// completes started collectives at once.
pub struct Ordered<M> {
    member: Arc<M>,
    name: String,
    threads: bool,
    /// Started on the first [`Ordered::start`] (None if the thread could not be made:
    /// collectives then block as before).
    worker: OnceLock<Option<Worker>>,
}

impl<M: Send + Sync + 'static> Ordered<M> {
    /// `name` names the communication thread, when it starts; `threads: false` never
    /// starts one.
    pub fn new(member: M, name: String, threads: bool) -> Self {
        Self {
            member: Arc::new(member),
            name,
            threads,
            worker: OnceLock::new(),
        }
    }

    pub fn member(&self) -> &M {
        &self.member
    }

    /// Whether the member's collectives run on its communication thread now.
    pub fn threaded(&self) -> bool {
        self.running().is_some()
    }

    fn running(&self) -> Option<&Worker> {
        self.worker.get().and_then(Option::as_ref)
    }

    /// `f` on the member, waited for: behind the started collectives on the communication
    /// thread once it runs, else here.
    pub fn in_order<R: Send + 'static>(
        &self,
        f: impl FnOnce(&M) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        let Some(worker) = self.running() else {
            return f(&self.member);
        };
        let m = self.member.clone();
        worker
            .submit(move || f(&m))
            .recv()
            .map_err(|_| anyhow::anyhow!("the communication thread stopped"))?
    }

    /// `f` on the member's communication thread (started on first use), the caller going
    /// on meanwhile, the thread kept busy for at least `hold` from when `f` begins (an
    /// emulated link's time); here and now if the thread could not be made.
    pub fn start(
        &self,
        hold: Duration,
        f: impl FnOnce(&M) -> Result<Tensor> + Send + 'static,
    ) -> Pending {
        if !self.threads {
            return Pending::ready(f(&self.member));
        }
        let worker = self
            .worker
            .get_or_init(|| Worker::spawn(self.name.clone()).ok());
        let Some(worker) = worker else {
            return Pending::ready(f(&self.member));
        };
        let m = self.member.clone();
        Pending::in_flight(worker.submit(move || {
            let began = std::time::Instant::now();
            let sum = f(&m);
            if let Some(rest) = hold.checked_sub(began.elapsed()) {
                std::thread::sleep(rest);
            }
            sum
        }))
    }
}

/// The member's collectives, each in the member's one order (see [`Ordered`]).
impl<M: Comm + 'static> Comm for Ordered<M> {
    fn rank(&self) -> usize {
        self.member.rank()
    }

    fn size(&self) -> usize {
        self.member.size()
    }

    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<()> {
        if !self.threaded() {
            // No copy on the path every blocking-only run takes.
            return self.member.all_reduce_sum(buf);
        }
        let mut v = buf.to_vec();
        let sum = self.in_order(move |m| m.all_reduce_sum(&mut v).map(|()| v))?;
        buf.copy_from_slice(&sum);
        Ok(())
    }

    fn all_reduce(&self, t: &Tensor) -> Result<Tensor> {
        let t = t.detach();
        self.in_order(move |m| m.all_reduce(&t))
    }

    fn start_all_reduce(&self, t: &Tensor, hold: Duration) -> Result<Pending> {
        let t = t.detach();
        Ok(self.start(hold, move |m| m.all_reduce(&t)))
    }

    fn exchange(&self, parts: Vec<Vec<u8>>, sizes: &[usize]) -> Result<Vec<Vec<u8>>> {
        let sizes = sizes.to_vec();
        self.in_order(move |m| m.exchange(parts, &sizes))
    }

    fn all_reduce_sum_compressed(&self, buf: &mut [f32], width: usize, q: CommDtype) -> Result<()> {
        let mut v = buf.to_vec();
        let sum =
            self.in_order(move |m| m.all_reduce_sum_compressed(&mut v, width, q).map(|()| v))?;
        buf.copy_from_slice(&sum);
        Ok(())
    }

    fn all_reduce_compressed(&self, t: &Tensor, q: CommDtype) -> Result<Tensor> {
        let t = t.detach();
        self.in_order(move |m| m.all_reduce_compressed(&t, q))
    }

    fn start_all_reduce_compressed(
        &self,
        t: &Tensor,
        q: CommDtype,
        hold: Duration,
    ) -> Result<Pending> {
        let t = t.detach();
        Ok(self.start(hold, move |m| m.all_reduce_compressed(&t, q)))
    }

    fn all_reduce_max(&self, t: &Tensor) -> Result<Tensor> {
        let t = t.detach();
        self.in_order(move |m| m.all_reduce_max(&t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_in_submission_order_off_the_calling_thread() {
        let w = Worker::spawn("test-comm".into()).unwrap();
        let caller = std::thread::current().id();
        let log = std::sync::Arc::new(Mutex::new(Vec::new()));
        let rxs: Vec<_> = (0..20)
            .map(|i| {
                let log = log.clone();
                w.submit(move || {
                    std::thread::sleep(std::time::Duration::from_micros(50 * (20 - i)));
                    log.lock().unwrap().push(i);
                    std::thread::current().id()
                })
            })
            .collect();
        for rx in rxs {
            assert_ne!(rx.recv().unwrap(), caller);
        }
        assert_eq!(*log.lock().unwrap(), (0..20).collect::<Vec<u64>>());
    }
}
