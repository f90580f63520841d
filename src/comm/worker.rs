//! A member's communication thread: runs the member's collectives one after another, in
//! the order they were issued, while the member computes. What makes an all-reduce
//! proceed in the background on backends whose collectives block the calling thread.

use std::sync::mpsc;
use std::sync::Mutex;

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
