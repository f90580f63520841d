//! The library behind the tools that use runs and checkpoints rather than train them:
//! evaluation over a whole split (`tp-eval`), sampling (`tp-sample`), SPD's sensitivity
//! scan (`tp-scan`), importing Hugging Face models (`tp-import`), the benchmark
//! (`tp-train --bench`) and the cluster planner (`tp-plan`).

pub mod eval;
pub mod import;
pub mod sample;
