//! The `threads` backend: every rank is a thread of this process and collectives meet in
//! shared memory.
//!
//! Each all-reduce is one generation of a barrier: members deposit their buffer, the last
//! to arrive sums all deposits in rank order and publishes the result, everyone copies it
//! out. A rank that fails calls [`ThreadWorld::abort`]; every member blocked in (or later
//! entering) a collective of that world then returns an error instead of waiting forever.
//!
//! A started all-reduce ([`Comm::start_all_reduce`]) meets the others on the member's
//! communication thread ([`Worker`]), so the rank computes meanwhile; from the first one
//! on, the member's blocking collectives queue there too, which keeps every member's
//! collectives in one order.

use super::collectives::{stage_through_host, Comm, Pending};
use super::worker::Worker;
use anyhow::{bail, Result};
use candle_core::{DType, Tensor};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
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
                member: Arc::new(Member {
                    rank,
                    shared: shared.clone(),
                }),
                worker: OnceLock::new(),
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
    member: Arc<Member>,
    /// Started on the first [`Comm::start_all_reduce`] (None if the thread could not be
    /// made: collectives then block as before).
    worker: OnceLock<Option<Worker>>,
}

/// What the member's collectives need, shared with its communication thread.
struct Member {
    rank: usize,
    shared: Arc<SharedGroup>,
}

impl ThreadComm {
    /// The member's communication thread, if one runs.
    fn running_worker(&self) -> Option<&Worker> {
        self.worker.get().and_then(Option::as_ref)
    }

    /// `f` on the member: behind the started collectives on the communication thread once
    /// it runs (one order per member), else here.
    fn in_order<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Member) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        let Some(worker) = self.running_worker() else {
            return f(&self.member);
        };
        let m = self.member.clone();
        worker
            .submit(move || f(&m))
            .recv()
            .map_err(|_| anyhow::anyhow!("the communication thread stopped"))?
    }
}

impl Comm for ThreadComm {
    fn rank(&self) -> usize {
        self.member.rank
    }

    fn size(&self) -> usize {
        self.member.shared.size
    }

    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<()> {
        if self.running_worker().is_none() {
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

    fn start_all_reduce(&self, t: &Tensor) -> Result<Pending> {
        if self.size() == 1 {
            return Ok(Pending::ready(Ok(t.clone())));
        }
        let worker = self
            .worker
            .get_or_init(|| Worker::spawn(format!("comm-{}", self.member.rank)).ok());
        let Some(worker) = worker else {
            return Ok(Pending::ready(self.member.all_reduce(t)));
        };
        let (m, t) = (self.member.clone(), t.detach());
        Ok(Pending::in_flight(worker.submit(move || m.all_reduce(&t))))
    }
}

impl Member {
    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<()> {
        if self.shared.size == 1 {
            return Ok(());
        }
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
    /// [`Member::all_reduce_on_device`], in order with the started collectives.
    pub fn all_reduce_on_device(&self, t: &Tensor) -> Result<Tensor> {
        let t = t.detach();
        self.in_order(move |m| m.all_reduce_on_device(&t))
    }
}

impl Member {
    /// The sum of `t` over the group computed on `t`'s device, which every member shares
    /// (one candle device): rank 0's tensor plus rank 1's, and so on in rank order, in f32
    /// (a bf16 tensor is widened, summed and rounded once, as host staging does). Each
    /// member gets its own copy of the result.
    pub fn all_reduce_on_device(&self, t: &Tensor) -> Result<Tensor> {
        if self.shared.size == 1 {
            return Ok(t.clone());
        }
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

/// `((d0 + d1) + d2) + ...` element by element; device tensors in f32.
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
                sum = (sum + d.to_dtype(DType::F32)?)?;
            }
            Ok(Deposit::Device(sum))
        }
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

    /// The device path computes the host path's sums, bit for bit (here on the CPU, where
    /// both run; on a GPU the same candle adds run there).
    #[test]
    fn device_sums_equal_host_sums_bit_for_bit() {
        let world = ThreadWorld::new();
        let handles: Vec<_> = world
            .group(3)
            .into_iter()
            .map(|c| {
                std::thread::spawn(move || {
                    let v: Vec<f32> = (0..11)
                        .map(|i| ((c.rank() * 11 + i) as f32 * 0.37).sin() * 1e3)
                        .collect();
                    let t = Tensor::from_vec(v.clone(), (11,), &candle_core::Device::Cpu).unwrap();
                    let on_device = c.all_reduce_on_device(&t).unwrap();
                    let mut host = v;
                    c.all_reduce_sum(&mut host).unwrap();
                    let t16 = t.to_dtype(DType::BF16).unwrap();
                    let bf = c.all_reduce(&t16).unwrap();
                    let mut widened = t16.to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap();
                    c.all_reduce_sum(&mut widened).unwrap();
                    (on_device.to_vec1::<f32>().unwrap(), host, bf, widened)
                })
            })
            .collect();
        for h in handles {
            let (dev, host, bf, widened) = h.join().unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&dev), bits(&host));
            // bf16: widened, summed in f32 in rank order, rounded once.
            assert_eq!(bf.dtype(), DType::BF16);
            let rounded = Tensor::new(widened.as_slice(), &candle_core::Device::Cpu)
                .and_then(|w| w.to_dtype(DType::BF16))
                .and_then(|w| w.to_dtype(DType::F32))
                .and_then(|w| w.to_vec1::<f32>())
                .unwrap();
            let bf = bf.to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap();
            assert_eq!(bits(&bf), bits(&rounded));
        }
    }

    /// Started all-reduces, several in flight at once and blocking ones issued between
    /// them, give every member the blocking path's sums bit for bit, each to its own call.
    #[test]
    fn started_all_reduces_equal_blocking_ones_and_keep_their_order() {
        let run = |started: bool| {
            let handles: Vec<_> = ThreadWorld::new()
                .group(3)
                .into_iter()
                .map(|c| {
                    std::thread::spawn(move || {
                        let vals = |k: usize| -> Vec<f32> {
                            (0..5)
                                .map(|i| ((c.rank() * 31 + k * 7 + i) as f32 * 0.37).sin())
                                .collect()
                        };
                        let tensor =
                            |k| Tensor::new(vals(k).as_slice(), &candle_core::Device::Cpu).unwrap();
                        let mut out = Vec::new();
                        for round in 0..4 {
                            let k = round * 3;
                            if started {
                                let a = c.start_all_reduce(&tensor(k)).unwrap();
                                let b = c.start_all_reduce(&tensor(k + 1)).unwrap();
                                let mut host = vals(k + 2);
                                c.all_reduce_sum(&mut host).unwrap();
                                out.push(a.wait().unwrap().to_vec1::<f32>().unwrap());
                                out.push(b.wait().unwrap().to_vec1::<f32>().unwrap());
                                out.push(host);
                            } else {
                                for j in 0..3 {
                                    out.push(
                                        c.all_reduce(&tensor(k + j)).unwrap().to_vec1().unwrap(),
                                    );
                                }
                            }
                        }
                        out
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        };
        let bits = |r: Vec<Vec<Vec<f32>>>| -> Vec<Vec<Vec<u32>>> {
            r.into_iter()
                .map(|m| {
                    m.into_iter()
                        .map(|v| v.iter().map(|x| x.to_bits()).collect())
                        .collect()
                })
                .collect()
        };
        assert_eq!(bits(run(true)), bits(run(false)));
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
