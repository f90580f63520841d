//! Training: configuration, gradients, optimiser, schedule, the rank program, launchers
//! and run outputs.

pub mod grads;
