//! A study's figures: loss curves and the trade-off of final loss against communication
//! or modelled time on a link (`curves`, `tp-plot` and sweeps), the link calibration
//! (`calibration`), the loss penalties (`penalty`) and a tuned study's loss against the
//! tuned value (`tuning`). Replicates come merged ([`crate::analysis::runs`]): one mean
//! curve with a band of one standard deviation, one point with the 95% interval of the
//! mean as an error bar.

pub mod calibration;
mod curves;
mod penalty;
mod tuning;

pub use curves::{plot_on_link, plot_runs};
pub use penalty::{plot_penalty, PENALTY_FIGURES};
pub use tuning::plot_tuning;
