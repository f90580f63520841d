//! The integration tests, one binary (one link instead of seventeen): each module the
//! tests of one subject, named for what it proves; `common` the helpers they all share.
//! One subject alone: `cargo test --release --test it -- cli::`.

mod common;

mod bench;
mod checkpoints;
mod cli;
mod comm_threads;
mod compressed_allreduce;
mod conformance;
mod docs;
mod full_eval;
mod golden_vectors;
mod gpu_package;
mod hf_export;
mod hostile_inputs;
mod import;
mod init_from;
mod kill_resume;
mod kinds;
mod ladder_equals_blocks_md;
mod layering;
mod matmul_route;
mod mpi;
mod nothing_lost;
mod nothing_lost_3;
mod nothing_lost_4;
mod overlapped_grads;
mod plan;
mod plot;
mod replicated_activations;
mod s_and_p_equal_blocks_md;
mod scan;
mod script_help;
mod sizes;
mod study;
mod study_script;
mod sweep;
mod sweep_status;
mod t_equals_gpt2;
mod tally_counts;
mod tensorboard;
mod time_model;
mod trace;
mod training_invariants;
mod tuned_sweep;
mod vendored_backprop;
mod vocab_parallel;
mod workflow;
