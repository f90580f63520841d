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

/// What a run of `ranks` rank threads on a machine with `gpus` GPUs must be told: rank
/// threads all compute on GPU 0 (one candle device, one stream: their sums add each
/// other's tensors where they lie), so their speed is one GPU's, whatever the machine
/// has. `None` for one rank.
pub fn gpu_sharing_note(ranks: usize, gpus: usize) -> Option<String> {
    match (ranks, gpus) {
        (0 | 1, _) => None,
        (_, 0 | 1) => Some(format!(
            "note: the {ranks} rank threads share GPU 0: their step is one GPU's work, not {ranks} GPUs'"
        )),
        _ => Some(format!(
            "note: the {ranks} rank threads all run on GPU 0 of this machine's {gpus}: for a GPU each, launch the ranks with mpirun (docs/gpus.md)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rank threads on a GPU machine are told where they run: all on GPU 0, sharing it
    /// (one GPU) or leaving the others idle (more), and one rank is told nothing.
    #[test]
    fn rank_threads_on_gpus_are_told_they_share_gpu_0() {
        assert_eq!(gpu_sharing_note(1, 8), None);
        let one = gpu_sharing_note(2, 1).unwrap();
        assert!(one.contains("2 rank threads share GPU 0"), "{one}");
        let eight = gpu_sharing_note(4, 8).unwrap();
        assert!(
            eight.contains("all run on GPU 0 of this machine's 8"),
            "{eight}"
        );
        assert!(eight.contains("mpirun"), "{eight}");
    }
}
