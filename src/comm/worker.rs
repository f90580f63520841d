//! A member's communication thread: runs the member's collectives one after another, in
//! the order they were issued, while the member computes. What makes an all-reduce
//! proceed in the background on backends whose collectives block the calling thread.

use super::collectives::{Comm, Started};
use anyhow::{bail, Result};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};

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
            // It sums tensors: the same arithmetic as its rank's threads.
            crate::util::subnormals::flush_on_this_thread();
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

/// A member's collectives in one order: started ones on the member's communication
/// thread, blocking ones by the caller when nothing is in flight there, else queued
/// behind what was started before them.
pub struct Lane {
    member: Arc<dyn Comm>,
    /// Started on the first collective run in the background (None if the thread could
    /// not be made: collectives then block as before).
    worker: OnceLock<Option<Worker>>,
    /// Collectives queued on or running on the communication thread.
    in_flight: Arc<AtomicUsize>,
}

impl Lane {
    pub fn new(member: Arc<dyn Comm>) -> Self {
        Self {
            member,
            worker: OnceLock::new(),
            in_flight: Arc::new(AtomicUsize::new(0)),
        }
    }

    pub fn member(&self) -> &dyn Comm {
        &*self.member
    }

    /// Whether the member's collectives run on its communication thread now.
    pub fn threaded(&self) -> bool {
        self.worker.get().and_then(Option::as_ref).is_some()
    }

    /// Whether nothing is queued on or running on the communication thread: a blocking
    /// collective may then run on the caller (one caller issues a member's collectives,
    /// so the member's order is kept) without a hop through the thread.
    pub fn idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
    }

    /// `f` on the member, in the member's one order: on its communication thread (started
    /// on first use) when `background` and the member allows it, the caller going on
    /// meanwhile; otherwise waited for, behind the started collectives once the thread
    /// runs, else here and now.
    pub fn run<R: Send + 'static>(
        &self,
        background: bool,
        f: impl FnOnce(&dyn Comm) -> Result<R> + Send + 'static,
    ) -> Started<R> {
        let worker = if background && self.member.threads_allowed() {
            let name = format!("comm-{}", self.member.rank());
            self.worker.get_or_init(|| Worker::spawn(name).ok())
        } else {
            self.worker.get().unwrap_or(&None)
        };
        let Some(worker) = worker else {
            return Started::ready(f(&*self.member));
        };
        let (m, in_flight) = (self.member.clone(), self.in_flight.clone());
        in_flight.fetch_add(1, Ordering::AcqRel);
        let rx = worker.submit(move || {
            let result = f(&*m);
            in_flight.fetch_sub(1, Ordering::AcqRel);
            result
        });
        let result = move || {
            rx.recv()
                .unwrap_or_else(|_| bail!("the communication thread stopped"))
        };
        if background {
            Started::later(result)
        } else {
            Started::ready(result())
        }
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

    /// It sums its member's tensors: with the same subnormal handling as the ranks.
    #[test]
    fn the_communication_thread_flushes_subnormals_as_the_ranks_do() {
        let w = Worker::spawn("test-comm".into()).unwrap();
        let flushes = w
            .submit(crate::util::subnormals::this_thread_flushes)
            .recv()
            .unwrap();
        assert_eq!(flushes, crate::util::subnormals::flushed());
    }
}
