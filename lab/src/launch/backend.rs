//! How a job's ranks run: threads of this process or MPI processes.

/// How ranks are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// All ranks as threads of this process.
    Threads,
    /// One process per rank under mpirun.
    Mpi,
}

impl Backend {
    /// MPI when started by an MPI launcher, threads otherwise.
    pub fn auto() -> Self {
        #[cfg(feature = "mpi")]
        if super::launcher_env::launched_by_mpirun() {
            return Backend::Mpi;
        }
        Backend::Threads
    }

    /// How the announcement names the ranks it runs.
    pub fn ranks_as(self) -> &'static str {
        match self {
            Backend::Threads => "threads",
            Backend::Mpi => "MPI processes",
        }
    }
}

/// What a run of `ranks` rank threads on a machine with `gpus` GPUs must be told: rank r
/// computes on GPU r % gpus (`threads.rs`), so on one GPU their step is one GPU's work, and
/// on several their sums go through the host (NCCL between GPUs takes ranks as MPI
/// processes). `None` for one rank.
pub fn gpu_sharing_note(ranks: usize, gpus: usize) -> Option<String> {
    match (ranks, gpus) {
        (0 | 1, _) => None,
        (_, 0 | 1) => Some(format!(
            "note: the {ranks} rank threads share GPU 0: their step is one GPU's work, not {ranks} GPUs'"
        )),
        _ => Some(format!(
            "note: rank r computes on GPU r % {gpus} ({ranks} rank threads{}); their sums go through the host: for NCCL between the GPUs, launch the ranks with mpirun (docs/gpus.md)",
            if ranks > gpus { ", some sharing a GPU" } else { "" }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rank threads on a GPU machine are told where they run: sharing GPU 0 (one GPU), or
    /// rank r on GPU r % n with their sums through the host (more), and one rank is told
    /// nothing.
    #[test]
    fn rank_threads_on_gpus_are_told_where_they_run() {
        assert_eq!(gpu_sharing_note(1, 8), None);
        let one = gpu_sharing_note(2, 1).unwrap();
        assert!(one.contains("2 rank threads share GPU 0"), "{one}");
        let eight = gpu_sharing_note(4, 8).unwrap();
        assert!(eight.contains("GPU r % 8 (4 rank threads)"), "{eight}");
        assert!(eight.contains("mpirun"), "{eight}");
        let two = gpu_sharing_note(4, 2).unwrap();
        assert!(two.contains("some sharing a GPU"), "{two}");
    }
}
