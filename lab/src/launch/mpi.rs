//! The MPI launcher: this process is one rank of a job started by `mpirun`.
//!
//! Checks that depend only on input (config, world size, data) run on every rank alike;
//! rank 0 alone prints their error, and every rank exits with the same code. A failure
//! during training is printed by the failing rank and ends the job with MPI_Abort, so
//! no rank is left waiting in a collective.

use super::backend::Backend;
use super::console::ConsoleReporter;
use super::job::{prepare_job, Job, RankOptions, Target};
use super::launcher_env::{local_rank, local_ranks};
use super::lifecycle::{run_job, Ranks, RunResult};
use super::orchestrate::run_rank;
use super::outcome::{RankOutcome, Reporter};
use super::outputs::open_outputs;
use super::report::rank_compute_ms;
use super::threads::configure_threads;
use crate::config::RunConfig;
use crate::run_dir::RunDir;
use anyhow::{anyhow, Result};
use std::cell::RefCell;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;
use tp_harness::comm::mpi::{MpiComm, MpiGroups, MpiWorld};
use tp_harness::comm::Comm;
use tp_harness::device::{gpu_count, DeviceKind};
use tp_harness::error::{exit_code, user, AlreadyReported};
use tp_harness::train::context::RankContext;
use tp_harness::util::trace::Span;

/// A rank's device, its TP and DP groups, the groups' world communicator, and the NCCL
/// library's version where the groups reduce through NCCL.
type Collectives = (
    candle_core::Device,
    Arc<dyn Comm>,
    Arc<dyn Comm>,
    MpiComm,
    Option<String>,
);

/// This rank's device and groups. On GPUs, ranks on one machine take its GPUs in turn;
/// with a GPU each, the groups reduce through NCCL in device memory. NCCL refuses two
/// ranks on one GPU, so with more ranks than GPUs the MPI groups stage through host
/// memory instead.
fn rank_collectives(kind: DeviceKind, groups: MpiGroups) -> Result<Collectives> {
    let MpiGroups { tp, dp, world, .. } = groups;
    if kind == DeviceKind::Cpu {
        return Ok((kind.open(0)?, Arc::new(tp), Arc::new(dp), world, None));
    }
    let gpus = gpu_count()?;
    if gpus == 0 {
        return Err(user(
            "device: cuda but this machine has no GPU: use device: cpu".to_string(),
        ));
    }
    let local = local_rank().unwrap_or(0);
    let device = kind.open(local % gpus)?;
    if local_ranks().unwrap_or(1) > gpus {
        return Ok((device, Arc::new(tp), Arc::new(dp), world, None));
    }
    #[cfg(feature = "cuda")]
    {
        // One NCCL stream for both groups: their collectives run in the order issued.
        let stream = tp_harness::comm::nccl::comm_stream(&device)?;
        let (tp, dp) = (tp.nccl(&device, &stream)?, dp.nccl(&device, &stream)?);
        let version = tp_harness::comm::nccl::version()?;
        Ok((device, Arc::new(tp), Arc::new(dp), world, Some(version)))
    }
    #[cfg(not(feature = "cuda"))]
    unreachable!("device.open refuses cuda in a CPU build")
}

/// All ranks learn whether every rank succeeded. On failure the error is printed once:
/// by rank 0 if it failed (every rank usually fails alike), else by each failing rank;
/// then all ranks meet once more, so nobody exits (and makes mpirun kill the others)
/// before the message is out, and all exit with the same code.
fn agree<T>(world: &MpiComm, rank: usize, local: Result<T>) -> Result<T> {
    let user_error = local.as_ref().err().is_some_and(|e| exit_code(e) == 2);
    let mut flags = [
        f32::from(u8::from(local.is_err())),
        f32::from(u8::from(rank == 0 && local.is_err())),
        f32::from(u8::from(user_error)),
    ];
    world.all_reduce_sum(&mut flags)?;
    let (any_failed, root_failed) = (flags[0] > 0.0, flags[1] > 0.0);
    if !any_failed {
        return local;
    }
    if let Err(e) = &local {
        let message = tp_harness::error::one_line(e);
        if rank == 0 {
            tp_harness::util::say::error_line(&format!("tp-train: error: {message}"));
        } else if !root_failed {
            tp_harness::util::say::error_line(&format!("tp-train: rank {rank}: error: {message}"));
        }
    }
    world.all_reduce_sum(&mut [0.0])?;
    let code = if flags[2] > 0.0 { 2 } else { 1 };
    Err(anyhow::Error::new(AlreadyReported(code)))
}

/// `cfg` for the ranks mpirun started: they must divide into TP groups, and the DP
/// size is what is left over.
fn fit_to_world(mut cfg: RunConfig, world_size: usize) -> Result<RunConfig> {
    let tp = cfg.parallel.tp;
    if tp == 0 || !world_size.is_multiple_of(tp) {
        // One rank where tp asks for more is often no mpirun at all: a launcher's
        // variable left in the shell.
        let stray = match (world_size, super::launcher_env::launcher_var()) {
            (1, Some(var)) => format!(
                " — if no mpirun started this, {var} in the environment says one did: unset it, or give --backend threads"
            ),
            _ => String::new(),
        };
        return Err(user(format!(
            "mpirun started {world_size} rank(s), which do not divide into tensor-parallel groups of tp {}: launch a multiple of {} ranks (mpirun -n {}) or change --tp{stray}",
            tp,
            tp,
            2 * tp.max(1)
        )));
    }
    let dp = world_size / tp;
    if cfg.parallel.dp != 1 && cfg.parallel.dp != dp {
        return Err(user(format!(
            "dp {} does not match the {world_size} launched ranks at tp {tp} (dp = {dp}): drop --dp or launch {} ranks",
            cfg.parallel.dp,
            cfg.parallel.dp * tp
        )));
    }
    cfg.parallel.dp = dp;
    Ok(cfg)
}

/// Every rank's resolved config, gathered: an error naming the first rank whose config
/// is not rank 0's and the keys that differ (every rank reaches the same verdict).
fn same_as_rank_0(mpi: &MpiWorld, cfg: &RunConfig) -> Result<()> {
    let mine = cfg.to_yaml()?;
    let all = mpi.all_gather_bytes(mine.as_bytes());
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    let root = RunConfig::from_yaml(&text(&all[0]), "rank 0's config")?;
    for (r, bytes) in all.iter().enumerate().skip(1) {
        if bytes == &all[0] {
            continue;
        }
        let theirs = RunConfig::from_yaml(&text(bytes), &format!("rank {r}'s config"))?;
        let keys: Vec<String> = theirs
            .differences(&root)
            .iter()
            .map(|(k, a, b)| format!("{k} {a} (rank {r}) vs {b} (rank 0)"))
            .collect();
        return Err(user(format!(
            "the ranks were started with different arguments: {}; give every rank the same ones (nothing was written)",
            keys.join(", ")
        )));
    }
    Ok(())
}

/// What a rank computes with beyond its config: (its data's fingerprint, the `TP_*`
/// switches set in its environment, its machine: CPU and kernels).
fn inputs(job: &Job) -> [String; 3] {
    let switches = super::switches::set_switches(|k| std::env::var(k).ok()).join(" ");
    let machine = format!(
        "{}, {} kernels, subnormals {}",
        tp_harness::util::host::cpu(),
        tp_harness::ops::cpu::simd::level().label(),
        if tp_harness::util::subnormals::flushed() {
            "flushed"
        } else {
            "kept"
        }
    );
    [job.data.fingerprint(), switches, machine]
}

/// Every rank's data and switches are rank 0's (refused by name where not: they change
/// what the rank computes, and the records would claim rank 0's for all); its machine
/// may differ (another CPU rounds the same computation differently): each rank's then,
/// for the summary. Every rank reaches the same verdict.
fn same_inputs_as_rank_0(mpi: &MpiWorld, job: &Job) -> Result<Vec<String>> {
    let mine = serde_json::to_vec(&inputs(job))?;
    let all: Vec<[String; 3]> = mpi
        .all_gather_bytes(&mine)
        .iter()
        .map(|b| serde_json::from_slice(b))
        .collect::<std::result::Result<_, _>>()?;
    let root = &all[0];
    for (r, theirs) in all.iter().enumerate().skip(1) {
        if theirs[0] != root[0] {
            return Err(user(format!(
                "rank {r} read other data than rank 0 (sha256 {} vs {}): give every rank the same prepared data (TP_DATA_DIR, the dataset's files) (nothing was written)",
                &theirs[0][..12.min(theirs[0].len())],
                &root[0][..12.min(root[0].len())]
            )));
        }
        if theirs[1] != root[1] {
            let show = |s: &str| {
                if s.is_empty() {
                    "none".to_string()
                } else {
                    s.to_string()
                }
            };
            return Err(user(format!(
                "rank {r} has other TP_* switches set than rank 0 ({} vs {}): they change what a rank computes; set the same ones for every rank (mpirun -x NAME) or none (nothing was written)",
                show(&theirs[1]),
                show(&root[1])
            )));
        }
    }
    let machines: Vec<String> = all.iter().map(|i| i[2].clone()).collect();
    Ok(if machines.iter().all(|m| *m == machines[0]) {
        Vec::new()
    } else {
        machines
            .iter()
            .enumerate()
            .map(|(r, m)| format!("rank {r}: {m}"))
            .collect()
    })
}

/// This rank failed where the others may be waiting on it: says so and ends the whole
/// job (MPI_Abort) with `code`.
fn fail_job(mpi: &MpiWorld, rank: usize, e: &anyhow::Error, code: i32) -> ! {
    tp_harness::util::say::error_line(&format!(
        "tp-train: rank {rank}: error: {}",
        tp_harness::error::one_line(e)
    ));
    mpi.abort(code)
}

/// The job every rank agrees on: rank 0's config, fitted to the world, on the same data
/// and switches everywhere; every rank reaches the same verdict before anything depends
/// on it (an MPMD launch, or a wrapper that varies the arguments or the environment,
/// would otherwise train the TP ranks on different batches under records that claim
/// rank 0's values).
fn agreed_job(
    mpi: &MpiWorld,
    world: &MpiComm,
    resolve: &dyn Fn() -> Result<RunConfig>,
    target: &Target,
) -> Result<Job> {
    let rank = mpi.rank();
    let fitted = resolve().and_then(|cfg| fit_to_world(cfg, mpi.size()));
    let cfg = agree(world, rank, fitted)?;
    let same = same_as_rank_0(mpi, &cfg);
    agree(world, rank, same)?;
    let mut job = agree(world, rank, prepare_job(&cfg, target))?;
    let inputs = same_inputs_as_rank_0(mpi, &job);
    job.rank_machines = agree(world, rank, inputs)?;
    Ok(job)
}

/// This process as one rank of an MPI job. Fields drop in order: the groups' world
/// communicator, then the world's, then MPI itself.
struct MpiRanks {
    /// The groups' world communicator, kept until the job is closed.
    groups_world: RefCell<Option<MpiComm>>,
    world: MpiComm,
    mpi: MpiWorld,
}

impl Ranks for MpiRanks {
    fn backend(&self) -> Backend {
        Backend::Mpi
    }

    fn job(&self, resolve: &dyn Fn() -> Result<RunConfig>, target: &Target) -> Result<Job> {
        agreed_job(&self.mpi, &self.world, resolve, target)
    }

    fn outputs(&self, job: &Job, target: &Target) -> Result<Option<RunDir>> {
        let rank = self.mpi.rank();
        let mine = match rank {
            0 => open_outputs(job, target).map(Some),
            _ => Ok(None),
        };
        agree(&self.world, rank, mine)
    }

    fn threads(&self, _cfg: &RunConfig) -> usize {
        configure_threads(local_ranks().unwrap_or(1))
    }

    fn train(
        &self,
        job: &Job,
        reporter: Option<&mut ConsoleReporter>,
        run_dir: Option<&Path>,
    ) -> Result<Vec<RankOutcome>> {
        let (cfg, mpi, rank) = (&job.cfg, &self.mpi, self.mpi.rank());
        let groups = mpi.groups(cfg.parallel.tp)?;
        let mesh = groups.mesh;
        let (device, tp_comm, dp_comm, world_comm, nccl) =
            match rank_collectives(cfg.parallel.device, groups) {
                Ok(c) => c,
                // Forming groups is collective: a rank that cannot must end the job, not
                // leave the others waiting in it.
                Err(e) => fail_job(mpi, rank, &e, 1),
            };
        *self.groups_world.borrow_mut() = Some(world_comm);
        tp_harness::device::set_tf32(cfg.parallel.tf32);
        let (link, comm_dtype) = (cfg.link(), cfg.parallel.comm_dtype);
        let ctx = RankContext::new(mesh, tp_comm, dp_comm, link, comm_dtype, device);
        let reporter = reporter.map(|r| r as &mut dyn Reporter);
        let trained =
            std::panic::catch_unwind(AssertUnwindSafe(|| run_rank(job, &ctx, reporter, run_dir)))
                .unwrap_or_else(|_| Err(anyhow!("panicked (see the message above)")));
        let mut outcome = trained.unwrap_or_else(|e| fail_job(mpi, rank, &e, exit_code(&e)));
        outcome.nccl = nccl;
        Ok(vec![outcome])
    }

    /// Collective: every rank reaches it (a failed rank aborted the job).
    fn hosts(&self, _outcomes: &[RankOutcome]) -> Vec<String> {
        self.mpi.hosts()
    }

    fn compute(&self, outcomes: &[RankOutcome]) -> Vec<Option<(f64, f64)>> {
        let mine = rank_compute_ms(&outcomes[0]);
        let cpu = self.mpi.all_gather_f64(mine.map(|m| m.0));
        let wall = self.mpi.all_gather_f64(mine.map(|m| m.1));
        cpu.into_iter().zip(wall).map(|(c, w)| c.zip(w)).collect()
    }

    /// Collective: every rank's timeline to rank 0, which writes the one file.
    fn timelines(&self, outcomes: &[RankOutcome]) -> Result<Vec<Vec<Span>>> {
        let all = self
            .mpi
            .all_gather_bytes(&serde_json::to_vec(&outcomes[0].trace)?);
        if self.mpi.rank() != 0 {
            return Ok(Vec::new());
        }
        (all.iter())
            .map(|bytes| Ok(serde_json::from_slice(bytes)?))
            .collect()
    }
}

/// Trains the job `resolve` makes as this process's rank of an `mpirun` job.
pub fn run_mpi(
    resolve: &dyn Fn() -> Result<RunConfig>,
    target: &Target,
    progress: bool,
    opts: RankOptions,
) -> Result<RunResult> {
    let mpi = MpiWorld::init()?;
    let ranks = MpiRanks {
        groups_world: RefCell::new(None),
        world: mpi.world_comm(),
        mpi,
    };
    run_job(&ranks, resolve, target, progress, opts)
}
