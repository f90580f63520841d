//! The MPI backend's two measurement switches, read and checked in one place (also
//! where MPI is not built, so that a run refuses garbage in them like any `TP_*`
//! switch): `TP_MPI_COMM_THREAD` (`1`, the default: progress on a communication thread;
//! `0`: none, the comparison of docs/links.md) and `TP_MPI_POLL_US` (microseconds the
//! TP group's thread sleeps between polls; 0, the default, spins).

/// Whether MPI's progress runs on a communication thread.
pub fn comm_thread() -> Result<bool, String> {
    match std::env::var("TP_MPI_COMM_THREAD").as_deref().map(str::trim) {
        Err(_) | Ok("") | Ok("1") => Ok(true),
        Ok("0") => Ok(false),
        Ok(v) => Err(format!(
            "TP_MPI_COMM_THREAD={v} is not a choice: use 1 (a communication thread, the default) or 0 (none), or unset it"
        )),
    }
}

/// The polling interval of the TP group's communication thread, microseconds.
pub fn poll_us() -> Result<u64, String> {
    match std::env::var("TP_MPI_POLL_US").as_deref().map(str::trim) {
        Err(_) | Ok("") => Ok(0),
        Ok(v) => v
            .parse::<u64>()
            .ok()
            .filter(|us| *us <= 1_000_000)
            .ok_or_else(|| {
                format!("TP_MPI_POLL_US={v} is not a number of microseconds from 0 to 1000000: set one or unset it")
            }),
    }
}
