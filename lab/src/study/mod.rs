//! A study: many runs made into answers. A layout's loss penalty against its setting's
//! t-only baseline, paired by seed (`penalty`), how it changes along the study's axes
//! (`penalty_change`, `penalty_axis`), where and how long its settings trained
//! (`penalty_provenance`, `penalty_table`); a run's setting in a study (`setting`);
//! tuned studies, each layout at its own best learning rate (`tuning`, `tuning_grid`,
//! `tuning_between`, `tuning_record`, `tuned_study`); the link model held to real links
//! (`calibration`) and runs on a modelled link (`on_link`); and their figures (`plots`).

pub mod calibration;
pub mod on_link;
pub mod penalty;
pub mod penalty_axis;
pub mod penalty_change;
pub mod penalty_provenance;
pub mod penalty_table;
pub mod plots;
pub mod setting;
pub mod tuned_study;
pub mod tuning;
pub mod tuning_between;
pub mod tuning_grid;
pub mod tuning_record;
