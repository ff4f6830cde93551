//! Helpers shared by the cargo tests.
#![allow(dead_code)]

use leasesim_sim::runner::{self, RunSpec};
use leasesim_sim::scenario;
use std::sync::Arc;

/// The built-in engine's scenarios every test sweeps: every file in
/// `scenarios/` that runs it (`scenario::builtin_engine_names`), so a new one
/// is swept without a test edit. graphile's have tests of their own
/// (`tests/foreign_engines.rs`).
pub fn scenarios() -> Vec<String> {
    let names = scenario::builtin_engine_names();
    assert!(!names.is_empty(), "no built-in scenario in {}", scenario::builtin_dir().display());
    names
}

pub fn spec(name: &str, seed: u64) -> RunSpec {
    let loaded = scenario::resolve(name, &leasesim_sim::engines()).unwrap_or_else(|e| panic!("{e}"));
    RunSpec::new(Arc::new(loaded.scenario), name, seed)
}

pub fn hash_of(name: &str, seed: u64) -> String {
    runner::run_seed(&spec(name, seed), runner::DEFAULT_WATCHDOG).expect("the seed runs").trace_hash
}

/// A scratch directory of this test process, created empty and removed when
/// dropped (a failing test's too: its panic unwinds through the drop).
pub struct Scratch(std::path::PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("leasesim-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the scratch directory");
        Scratch(dir)
    }

    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
