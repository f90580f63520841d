//! The `threads` backend: every rank is a thread of this process and collectives meet in
//! shared memory.
//!
//! Each all-reduce is one generation of a barrier: members deposit their buffer, the last
//! to arrive sums all deposits in rank order and publishes the result, everyone copies it
//! out. A rank that fails calls [`ThreadWorld::abort`]; every member blocked in (or later
//! entering) a collective of that world then returns an error instead of waiting forever.
//!
//! A started all-reduce meets the others on the member's communication thread
//! ([`super::worker::Lane`]), so the rank computes meanwhile.

use super::collectives::{stage_through_host, Comm};
use anyhow::{bail, Result};
use candle_core::{DType, Tensor};
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

/// What one member brings to a collective: a host buffer, or a tensor on the device the
/// group shares.
enum Deposit {
    Host(Vec<f32>),
    Device(Tensor),
    /// One byte string per receiving member (an exchange); the combined result holds
    /// every member's deposit, each taking its own column.
    Bytes(Vec<Vec<u8>>),
    Exchanged(Vec<Vec<Vec<u8>>>),
}

struct GroupState {
    deposits: Vec<Option<Deposit>>,
    arrived: usize,
    generation: u64,
    result: Arc<Deposit>,
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
                result: Arc::new(Deposit::Host(Vec::new())),
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
        let result = self.meet(Deposit::Host(buf.to_vec()))?;
        let Deposit::Host(sum) = &*result else {
            bail!("all-reduce mixes host buffers and device tensors across ranks");
        };
        if sum.len() != buf.len() {
            bail!(
                "all-reduce size mismatch: sent {}, got {}",
                buf.len(),
                sum.len()
            );
        }
        buf.copy_from_slice(sum);
        Ok(())
    }

    /// Every member's `parts[me]`, in rank order, checked against the sizes expected.
    fn exchange(&self, parts: Vec<Vec<u8>>, sizes: &[usize]) -> Result<Vec<Vec<u8>>> {
        let n = self.shared.size;
        if parts.len() != n || sizes.len() != n {
            bail!("exchange over {n} members with {} parts", parts.len());
        }
        let result = self.meet(Deposit::Bytes(parts))?;
        let Deposit::Exchanged(all) = &*result else {
            bail!("an exchange met another collective across ranks");
        };
        let mine: Vec<Vec<u8>> = all.iter().map(|p| p[self.rank].clone()).collect();
        for (r, (got, want)) in mine.iter().zip(sizes).enumerate() {
            if got.len() != *want {
                bail!(
                    "exchange size mismatch: rank {r} sent {} bytes, expected {want}",
                    got.len()
                );
            }
        }
        Ok(mine)
    }

    /// f32 CPU tensors go through the host path above (bit for bit what the MPI backend
    /// computes); anything else (GPU tensors, bf16) is summed where it lies.
    fn all_reduce(&self, t: &Tensor) -> Result<Tensor> {
        if t.device().is_cpu() && t.dtype() == DType::F32 {
            stage_through_host(t, |buf| self.all_reduce_sum(buf))
        } else {
            self.all_reduce_on_device(t)
        }
    }
}

impl ThreadComm {
    /// The sum of `t` over the group computed on rank 0's device: rank 0's tensor plus
    /// rank 1's, and so on in rank order, in f32 (a bf16 tensor is widened, summed and
    /// rounded once, as host staging does). Members on one device (every rank thread on
    /// one GPU) add each other's tensors where they lie; a member on another GPU has its
    /// tensor copied over (through the host: candle's copy between GPUs) and the sum
    /// copied back. Each member gets its own copy of the result.
    pub fn all_reduce_on_device(&self, t: &Tensor) -> Result<Tensor> {
        let result = self.meet(Deposit::Device(t.detach()))?;
        let Deposit::Device(sum) = &*result else {
            bail!("all-reduce mixes host buffers and device tensors across ranks");
        };
        if sum.shape() != t.shape() {
            bail!(
                "all-reduce shape mismatch: sent {:?}, got {:?}",
                t.shape(),
                sum.shape()
            );
        }
        let sum = match sum.device().same_device(t.device()) {
            true => sum.clone(),
            false => sum.to_device(t.device())?,
        };
        Ok(sum.to_dtype(t.dtype())?.copy()?)
    }

    /// One generation of the group's barrier: deposit `mine`, and whoever arrives last
    /// combines all deposits in rank order and publishes the result to everyone.
    fn meet(&self, mine: Deposit) -> Result<Arc<Deposit>> {
        let g = &self.shared;
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
        st.deposits[self.rank] = Some(mine);
        st.arrived += 1;
        let my_generation = st.generation;
        if st.arrived == g.size {
            let deposits: Vec<Deposit> = st
                .deposits
                .iter_mut()
                .map(|d| d.take().expect("every member deposited"))
                .collect();
            st.result = Arc::new(sum_in_rank_order(deposits)?);
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
        Ok(st.result.clone())
    }
}

/// `((d0 + d1) + d2) + ...` element by element (device tensors in f32); the deposits of
/// an exchange, all of them.
fn sum_in_rank_order(deposits: Vec<Deposit>) -> Result<Deposit> {
    let mut it = deposits.into_iter().enumerate();
    let (_, first) = it.next().expect("a group has members");
    match first {
        Deposit::Host(mut sum) => {
            for (r, d) in it {
                let Deposit::Host(d) = d else {
                    bail!("all-reduce mixes host buffers and device tensors across ranks");
                };
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
            Ok(Deposit::Host(sum))
        }
        Deposit::Bytes(p) => {
            let mut all = vec![p];
            for (_, d) in it {
                let Deposit::Bytes(p) = d else {
                    bail!("an exchange met another collective across ranks");
                };
                all.push(p);
            }
            Ok(Deposit::Exchanged(all))
        }
        Deposit::Exchanged(_) => bail!("a member deposited an exchange's result"),
        Deposit::Device(t) => {
            let mut sum = t.to_dtype(DType::F32)?;
            for (r, d) in it {
                let Deposit::Device(d) = d else {
                    bail!("all-reduce mixes host buffers and device tensors across ranks");
                };
                if d.shape() != sum.shape() {
                    bail!(
                        "all-reduce shape mismatch: rank 0 sent {:?}, rank {r} sent {:?}",
                        sum.shape(),
                        d.shape()
                    );
                }
                let d = match d.device().same_device(sum.device()) {
                    true => d.clone(),
                    false => d.to_device(sum.device())?,
                };
                sum = (sum + d.to_dtype(DType::F32)?)?;
            }
            Ok(Deposit::Device(sum))
        }
    }
}
