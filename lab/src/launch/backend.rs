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
