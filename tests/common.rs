//! Helpers shared by the cargo tests.
#![allow(dead_code)]

use leasesim_sim::runner::{self, RunSpec};
use leasesim_sim::scenario;
use std::sync::Arc;

/// The built-in scenarios every test sweeps.
pub const SCENARIOS: [&str; 4] = ["a-index-builds", "b-machines", "c-workflows", "swarm"];

pub fn spec(name: &str, seed: u64) -> RunSpec {
    let loaded = scenario::resolve(name).unwrap_or_else(|e| panic!("{e}"));
    RunSpec::new(Arc::new(loaded.scenario), name, seed)
}

pub fn hash_of(name: &str, seed: u64) -> String {
    runner::run_seed(&spec(name, seed), runner::DEFAULT_WATCHDOG).expect("the seed runs").trace_hash
}
