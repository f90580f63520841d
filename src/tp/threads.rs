//! The `threads` backend: every rank is a thread of this process and collectives meet in
//! shared memory.
//!
//! Each all-reduce is one generation of a barrier: members deposit their buffer, the last
//! to arrive sums all deposits in rank order and publishes the result, everyone copies it
//! out. A rank that fails calls [`ThreadWorld::abort`]; every member blocked in (or later
//! entering) a collective of that world then returns an error instead of waiting forever.

use super::comm::Comm;
use anyhow::{bail, Result};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Shared failure state of all groups created by one [`ThreadWorld`].
#[derive(Default)]
struct AbortState {
    reason: Mutex<Option<String>>,
}

impl AbortState {
    fn reason(&self) -> Option<String> {
        self.reason
            .lock()
            .map(|r| r.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }
}

struct GroupState {
    deposits: Vec<Option<Vec<f32>>>,
    arrived: usize,
    generation: u64,
    result: Arc<Vec<f32>>,
}

struct SharedGroup {
    size: usize,
    state: Mutex<GroupState>,
    turned: Condvar,
    abort: Arc<AbortState>,
}

/// Factory for the groups of one in-process world; owns the abort switch.
#[derive(Clone, Default)]
pub struct ThreadWorld {
    abort: Arc<AbortState>,
    groups: Arc<Mutex<Vec<Arc<SharedGroup>>>>,
}

impl ThreadWorld {
    pub fn new() -> Self {
        Self::default()
    }

    /// Creates one group of `size` members and returns a handle per member, in rank order.
    pub fn group(&self, size: usize) -> Vec<ThreadComm> {
        let shared = Arc::new(SharedGroup {
            size,
            state: Mutex::new(GroupState {
                deposits: (0..size).map(|_| None).collect(),
                arrived: 0,
                generation: 0,
                result: Arc::new(Vec::new()),
            }),
            turned: Condvar::new(),
            abort: self.abort.clone(),
        });
        self.groups
            .lock()
            .expect("thread world poisoned")
            .push(shared.clone());
        (0..size)
            .map(|rank| ThreadComm {
                rank,
                shared: shared.clone(),
            })
            .collect()
    }

    /// Marks the world failed and wakes every waiting member. The first reason wins.
    pub fn abort(&self, reason: &str) {
        {
            let mut r = self.abort.reason.lock().unwrap_or_else(|p| p.into_inner());
            if r.is_none() {
                *r = Some(reason.to_string());
            }
        }
        for g in self.groups.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _guard = g.state.lock().unwrap_or_else(|p| p.into_inner());
            g.turned.notify_all();
        }
    }

    pub fn aborted(&self) -> Option<String> {
        self.abort.reason()
    }
}

/// One member's handle on a shared-memory group.
pub struct ThreadComm {
    rank: usize,
    shared: Arc<SharedGroup>,
}

impl Comm for ThreadComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.shared.size
    }

    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<()> {
        let g = &self.shared;
        if g.size == 1 {
            return Ok(());
        }
        let check_abort = || -> Result<()> {
            if let Some(reason) = g.abort.reason() {
                bail!("collective abandoned: {reason}");
            }
            Ok(())
        };
        check_abort()?;
        let mut st = g
            .state
            .lock()
            .map_err(|_| anyhow::anyhow!("group lock poisoned"))?;
        st.deposits[self.rank] = Some(buf.to_vec());
        st.arrived += 1;
        let my_generation = st.generation;
        if st.arrived == g.size {
            let mut sum = st.deposits[0].take().unwrap_or_default();
            for r in 1..g.size {
                let d = st.deposits[r].take().unwrap_or_default();
                if d.len() != sum.len() {
                    bail!(
                        "all-reduce size mismatch: rank 0 sent {} values, rank {r} sent {}",
                        sum.len(),
                        d.len()
                    );
                }
                for (s, x) in sum.iter_mut().zip(&d) {
                    *s += *x;
                }
            }
            st.result = Arc::new(sum);
            st.arrived = 0;
            st.generation += 1;
            g.turned.notify_all();
        } else {
            while st.generation == my_generation {
                drop(st);
                check_abort()?;
                st = g
                    .state
                    .lock()
                    .map_err(|_| anyhow::anyhow!("group lock poisoned"))?;
                if st.generation != my_generation {
                    break;
                }
                st = g
                    .turned
                    .wait_timeout(st, Duration::from_millis(200))
                    .map_err(|_| anyhow::anyhow!("group lock poisoned"))?
                    .0;
            }
        }
        // Safe to read: the result of this generation is only replaced once every member,
        // including this one, has entered the next collective.
        let result = st.result.clone();
        drop(st);
        if result.len() != buf.len() {
            bail!(
                "all-reduce size mismatch: sent {}, got {}",
                buf.len(),
                result.len()
            );
        }
        buf.copy_from_slice(&result);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_reduce_sums_in_rank_order_and_every_member_gets_identical_bits() {
        let world = ThreadWorld::new();
        let comms = world.group(4);
        let handles: Vec<_> = comms
            .into_iter()
            .map(|c| {
                std::thread::spawn(move || {
                    let mut out = Vec::new();
                    for round in 0..50 {
                        let mut buf: Vec<f32> = (0..7)
                            .map(|i| (c.rank() as f32 + 1.0) * 0.1 + i as f32 * 1e-7 + round as f32)
                            .collect();
                        c.all_reduce_sum(&mut buf).unwrap();
                        out.push(buf);
                    }
                    out
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        for r in &results[1..] {
            for (a, b) in r.iter().zip(&results[0]) {
                let a: Vec<u32> = a.iter().map(|x| x.to_bits()).collect();
                let b: Vec<u32> = b.iter().map(|x| x.to_bits()).collect();
                assert_eq!(a, b);
            }
        }
        let expect = ((0.1f32 + 0.2) + 0.3) + 0.4;
        assert_eq!(results[0][0][0], expect);
    }

    #[test]
    fn abort_releases_members_blocked_in_a_collective() {
        let world = ThreadWorld::new();
        let mut comms = world.group(2);
        let c1 = comms.pop().unwrap();
        let waiter = std::thread::spawn(move || c1.all_reduce_sum(&mut [1.0]));
        std::thread::sleep(Duration::from_millis(50));
        world.abort("rank 0 failed: injected");
        let err = waiter.join().unwrap().unwrap_err().to_string();
        assert!(err.contains("rank 0 failed"), "{err}");
    }
}
