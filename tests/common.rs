//! Helpers shared by the cargo tests.
#![allow(dead_code)]

use leasesim_sim::runner::{self, RunSpec};
use leasesim_sim::scenario;
use std::sync::Arc;

/// The built-in scenarios every test sweeps: every file in `scenarios/`
/// (`scenario::builtin_names`), so a new one is swept without a test edit.
pub fn scenarios() -> Vec<String> {
    let names = scenario::builtin_names();
    assert!(!names.is_empty(), "no built-in scenario in {}", scenario::builtin_dir().display());
    names
}

pub fn spec(name: &str, seed: u64) -> RunSpec {
    let loaded = scenario::resolve(name).unwrap_or_else(|e| panic!("{e}"));
    RunSpec::new(Arc::new(loaded.scenario), name, seed)
}

pub fn hash_of(name: &str, seed: u64) -> String {
    runner::run_seed(&spec(name, seed), runner::DEFAULT_WATCHDOG).expect("the seed runs").trace_hash
}
