//! Where this process sits among a launcher's ranks, from the launcher's environment
//! (mpirun's, or Slurm's under `srun`): whether an MPI launcher started it, and its place
//! and its neighbours on its machine (to share the machine's cores and GPUs).

/// The variables an MPI launcher sets, any of which says one started this process.
const LAUNCHER_VARS: [&str; 4] = [
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
    "PMIX_RANK",
    "MPI_LOCALNRANKS",
];

/// Whether this process was started by an MPI launcher.
pub fn launched_by_mpirun() -> bool {
    launcher_var().is_some()
}

/// The launcher variable that says so, as `NAME=value` (for a message when it may be a
/// stray one left in a shell), as the environment had it when first asked: before MPI
/// starts, which sets some of them itself (a singleton rank gets `PMIX_RANK=0`).
pub fn launcher_var() -> Option<String> {
    static FIRST: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    FIRST
        .get_or_init(|| {
            LAUNCHER_VARS
                .iter()
                .find_map(|v| Some(format!("{v}={}", std::env::var(v).ok()?)))
        })
        .clone()
}

/// This process's index among the ranks on its machine, from the launcher's environment
/// (mpirun's, or Slurm's under `srun`).
pub fn local_rank() -> Option<usize> {
    [
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
        "PMI_LOCAL_RANK",
        "SLURM_LOCALID",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.parse().ok())
}

/// Ranks of this job on this machine (to share its cores), when the launcher says.
pub fn local_ranks() -> Option<usize> {
    ["OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
        .or_else(|| {
            let node = std::env::var("SLURM_NODEID").ok()?.parse().unwrap_or(0);
            slurm_tasks_on(&std::env::var("SLURM_STEP_TASKS_PER_NODE").ok()?, node)
        })
}

/// Slurm's tasks per node (`2(x3),1`: two on each of three nodes, then one) on node
/// `node` of the step.
fn slurm_tasks_on(spec: &str, node: usize) -> Option<usize> {
    let mut per_node = Vec::new();
    for part in spec.split(',') {
        let (n, times) = match part.split_once("(x") {
            Some((n, rest)) => (n, rest.trim_end_matches(')').parse().ok()?),
            None => (part, 1),
        };
        per_node.extend(std::iter::repeat_n(n.trim().parse::<usize>().ok()?, times));
    }
    per_node.get(node).copied()
}

#[cfg(test)]
mod tests {
    use super::slurm_tasks_on;

    #[test]
    fn slurms_tasks_per_node_are_read_for_each_node() {
        assert_eq!(slurm_tasks_on("2", 0), Some(2));
        assert_eq!(slurm_tasks_on("2(x3),1", 2), Some(2));
        assert_eq!(slurm_tasks_on("2(x3),1", 3), Some(1));
        assert_eq!(slurm_tasks_on("2(x3),1", 4), None);
        assert_eq!(slurm_tasks_on("x", 0), None);
    }
}
