//! The `threads` launcher: the whole `dp x tp` world as threads of this process.

use super::job::Job;
use super::orchestrate::run_rank;
use super::outcome::{RankOutcome, Reporter};
use anyhow::{anyhow, Result};
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use tp_harness::comm::{Comm, CountedComm, Mesh, Tally, ThreadWorld};
use tp_harness::device::DeviceKind;
use tp_harness::train::context::RankContext;
use tp_harness::util::turns;

/// Threads each rank's math may use so that `ranks` ranks share the machine's cores
/// without oversubscribing them (candle's gemm and the fused kernels read
/// `RAYON_NUM_THREADS` at every call; spinning pools on busy cores cost 6x, see
/// conventions.md). A value the user set in the environment before the first call wins.
/// candle's own element-wise ops get one thread (`CANDLE_NUM_THREADS`, unless the user set
/// it): its barrier pool spins beside the rayon workers that run the matmuls and fused
/// kernels, and those small ops are not worth a second pool on the same cores.
pub fn configure_threads(ranks: usize) -> usize {
    static USER_SET: OnceLock<Option<usize>> = OnceLock::new();
    let user = *USER_SET.get_or_init(|| {
        std::env::var("RAYON_NUM_THREADS")
            .ok()
            .and_then(|s| s.parse().ok())
            .filter(|n| *n > 0)
    });
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let per_rank = user.unwrap_or((cores / ranks.max(1)).max(1));
    static CANDLE_USER_SET: OnceLock<bool> = OnceLock::new();
    let candle_user =
        *CANDLE_USER_SET.get_or_init(|| std::env::var_os("CANDLE_NUM_THREADS").is_some());
    std::env::set_var("RAYON_NUM_THREADS", per_rank.to_string());
    if !candle_user {
        std::env::set_var("CANDLE_NUM_THREADS", "1");
    }
    // After RAYON_NUM_THREADS: this starts the global pool, at that size.
    tp_harness::util::subnormals::flush_here_and_in_the_global_pool();
    per_rank
}

/// Stack of a rank's thread: candle's backward pass and the drop of a graph recurse once
/// per node, so a deep model needs more than a thread's default 2 MiB (a pattern's
/// `MAX_LAYERS` is sized against this). Reserved, not committed: untouched pages cost
/// nothing.
pub const RANK_STACK_BYTES: usize = 64 << 20;

/// Runs `f` as one rank's program: with more than one math thread, inside a rayon pool of
/// its own of which the rank's thread is a worker, so that its matmuls and kernels fan
/// out over exactly its share of the cores (and ranks in one process never queue behind
/// each other in a shared pool).
pub fn as_rank<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let threads = candle_core::utils::get_num_threads();
    if threads <= 1 {
        return f();
    }
    tp_harness::util::subnormals::flush_on_this_thread();
    match rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .stack_size(RANK_STACK_BYTES)
        .start_handler(|_| tp_harness::util::subnormals::flush_on_this_thread())
        .build()
    {
        Ok(pool) => pool.install(f),
        Err(_) => f(),
    }
}

/// Each rank's TP and DP group communicators, in rank order.
type RankComms = (Vec<Arc<dyn Comm>>, Vec<Arc<dyn Comm>>);

fn thread_groups(world: &ThreadWorld, tp: usize, dp: usize) -> Result<RankComms> {
    let world_size = tp * dp;
    let mut tp_comms: Vec<Option<Arc<dyn Comm>>> = (0..world_size).map(|_| None).collect();
    let mut dp_comms: Vec<Option<Arc<dyn Comm>>> = (0..world_size).map(|_| None).collect();
    let probe = Mesh::new(tp, dp, 0)?;
    for d in 0..dp {
        for (c, r) in world.group(tp).into_iter().zip(probe.tp_group(d)) {
            tp_comms[r] = Some(Arc::new(c));
        }
    }
    for t in 0..tp {
        for (c, r) in world.group(dp).into_iter().zip(probe.dp_group(t)) {
            dp_comms[r] = Some(Arc::new(c));
        }
    }
    let all =
        |v: Vec<Option<Arc<dyn Comm>>>| v.into_iter().map(|c| c.expect("every rank is in a group"));
    Ok((all(tp_comms).collect(), all(dp_comms).collect()))
}

/// The message of a panic's payload.
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic".into())
}

/// One rank's program on its thread: a failure (error or panic) aborts the world, so the
/// other ranks leave their next collective instead of waiting.
fn run_one_rank(
    job: &Job,
    ctx: &RankContext,
    mut reporter: Option<&mut (dyn Reporter + Send)>,
    run_dir: Option<&Path>,
    world: &ThreadWorld,
) -> Result<RankOutcome> {
    let run = std::panic::catch_unwind(AssertUnwindSafe(|| {
        as_rank(|| {
            let mut run = || {
                run_rank(
                    job,
                    ctx,
                    reporter.as_deref_mut().map(|r| r as &mut dyn Reporter),
                    run_dir,
                )
            };
            if turns::one_at_a_time_requested() {
                turns::one_at_a_time(run)
            } else {
                run()
            }
        })
    }));
    let res = run.unwrap_or_else(|p| Err(anyhow!("panicked: {}", panic_message(&*p))));
    if let Err(e) = &res {
        world.abort(&format!("rank {} failed: {e:#}", ctx.mesh.rank));
    }
    res
}

/// The ranks' outcomes in rank order, or the failure that started it all: not the ranks
/// that were released by the abort.
fn outcomes_or_first_failure(results: Vec<Result<RankOutcome>>) -> Result<Vec<RankOutcome>> {
    let mut first_err = None;
    let mut outcomes = Vec::with_capacity(results.len());
    for (rank, r) in results.into_iter().enumerate() {
        match r {
            Ok(o) => outcomes.push(o),
            Err(e) => {
                let secondary = format!("{e:#}").contains("collective abandoned");
                if first_err.is_none()
                    || (!secondary && first_err.as_ref().is_some_and(|(s, _, _)| *s))
                {
                    first_err = Some((secondary, rank, e));
                }
            }
        }
    }
    match first_err {
        None => Ok(outcomes),
        Some((_, _, e)) if tp_harness::error::is_user_error(&e) => {
            Err(tp_harness::error::user(format!("{e:#}")))
        }
        Some((_, rank, e)) => Err(e.context(format!("rank {rank} failed"))),
    }
}

/// Runs every rank of the job on its own thread and returns their outcomes in rank order.
/// A rank that fails (error or panic) aborts the world: the others leave their next
/// collective with an error instead of waiting, and the first failure is returned.
/// Rank 0 gets the reporter and `run_dir`.
pub fn run_threads(
    job: &Job,
    reporter: Option<&mut (dyn Reporter + Send)>,
    run_dir: Option<&Path>,
) -> Result<Vec<RankOutcome>> {
    let cfg = &job.cfg;
    let (tp, dp) = (cfg.parallel.tp, cfg.parallel.dp);
    let world = ThreadWorld::new();
    let (tp_comms, dp_comms) = thread_groups(&world, tp, dp)?;
    // Also where no configure_threads ran (tests): the ranks' kernels fan out over it.
    tp_harness::util::subnormals::flush_here_and_in_the_global_pool();
    // Rank r computes on GPU r % (the machine's GPUs): ranks on one GPU share one candle
    // device, whose one explicit stream every rank and communication thread launches on,
    // in host order (device.rs), so their collectives sum each other's tensors where they
    // lie; ranks on other GPUs have theirs copied to rank 0's and the sum back
    // (ThreadComm::all_reduce_on_device). On the CPU every rank is the one device.
    let devices = rank_devices(cfg.parallel.device, tp * dp)?;
    tp_harness::device::set_tf32(cfg.parallel.tf32);
    let mut reporter = reporter;
    let results: Vec<Result<RankOutcome>> = std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(tp * dp);
        for (rank, (tp_comm, dp_comm)) in tp_comms.into_iter().zip(dp_comms).enumerate() {
            let ctx = RankContext::new(
                Mesh::new(tp, dp, rank).expect("rank inside the world"),
                tp_comm,
                dp_comm,
                cfg.link(),
                cfg.parallel.comm_dtype,
                devices[rank].clone(),
            );
            let rep = if rank == 0 { reporter.take() } else { None };
            let dir = if rank == 0 { run_dir } else { None };
            let world = &world;
            let handle = std::thread::Builder::new()
                .name(format!("rank-{rank}"))
                .stack_size(RANK_STACK_BYTES)
                .spawn_scoped(s, move || run_one_rank(job, &ctx, rep, dir, world));
            if let Err(e) = &handle {
                // The ranks already started must not wait for this one.
                world.abort(&format!("rank {rank} could not start: {e}"));
            }
            handles.push(handle);
        }
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|_| Err(anyhow!("rank thread could not be joined"))),
                Err(e) => Err(anyhow!("cannot start a rank thread: {e}")),
            })
            .collect()
    });
    outcomes_or_first_failure(results)
}

/// Each of `ranks` rank threads' device: the CPU, or GPU `r % gpus` for rank r, each GPU
/// opened once and shared by the ranks on it.
fn rank_devices(kind: DeviceKind, ranks: usize) -> Result<Vec<candle_core::Device>> {
    let gpus = match kind {
        DeviceKind::Cpu => 1,
        DeviceKind::Cuda => tp_harness::device::gpu_count()?.max(1),
    };
    let opened = (0..gpus.min(ranks))
        .map(|g| kind.open(g))
        .collect::<Result<Vec<_>>>()?;
    Ok((0..ranks)
        .map(|r| opened[r % opened.len()].clone())
        .collect())
}

/// Runs `f` on the `tp` ranks of one tensor-parallel group, as threads, and returns the
/// results in rank order (sampling and evaluating checkpoints at any tp). A failing rank
/// releases the others, as in training.
pub fn on_tp_threads<R: Send>(
    tp: usize,
    f: impl Fn(CountedComm) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    let world = ThreadWorld::new();
    let comms = world.group(tp);
    let results: Vec<Result<R>> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(rank, c)| {
                let (f, world) = (&f, world.clone());
                std::thread::Builder::new()
                    .stack_size(RANK_STACK_BYTES)
                    .spawn_scoped(s, move || {
                        tp_harness::util::subnormals::flush_on_this_thread();
                        let res = f(CountedComm::new(Arc::new(c), Arc::new(Tally::new())));
                        if let Err(e) = &res {
                            world.abort(&format!("rank {rank} failed: {e:#}"));
                        }
                        res
                    })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|_| Err(anyhow!("a rank thread panicked"))),
                Err(e) => Err(anyhow!("cannot start a rank thread: {e}")),
            })
            .collect()
    });
    results.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tp_harness::util::subnormals::{flushed, this_thread_flushes};

    /// A run's arithmetic happens on its rank threads and on the rayon pools their kernels
    /// fan out over (the global one, or a rank's own): all of them flush subnormals, so a
    /// rank's sums do not depend on which thread ran them.
    #[test]
    fn rank_threads_and_the_pools_their_kernels_use_flush_subnormals() {
        if !flushed() {
            return; // TP_SUBNORMALS=keep: nothing is flushed
        }
        configure_threads(2);
        let per_rank = on_tp_threads(2, |_| {
            let rank_thread = this_thread_flushes();
            let pool = as_rank(|| rayon::broadcast(|_| this_thread_flushes()));
            Ok((rank_thread, pool))
        })
        .unwrap();
        for (rank_thread, pool) in per_rank {
            assert!(rank_thread);
            assert!(!pool.is_empty() && pool.iter().all(|&f| f), "{pool:?}");
        }
        assert!(rayon::broadcast(|_| this_thread_flushes())
            .iter()
            .all(|&f| f));
    }
}
