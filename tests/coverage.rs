//! Each built-in scenario reaches the coverage points it requires
//! (`[coverage] require`) with a margin: in every one of several disjoint
//! windows of seeds, each much shorter than the scenario's `min_seeds`. A
//! point reached only now and then would fail some shard of a nightly
//! campaign for nothing (exit 3); one reached in every short window is
//! reached in nearly every window of `min_seeds`.

mod common;

use common::{scenarios, spec};
use leasesim_sim::runner;
use std::collections::BTreeSet;

/// Disjoint windows of seeds: 1..=50, 51..=100, ...
const WINDOWS: u64 = 4;
const WINDOW_SEEDS: u64 = 50;

/// The required points `name` did not reach in seeds `first..first + WINDOW_SEEDS`.
fn missed_in_window(name: &str, required: &BTreeSet<String>, first: u64) -> BTreeSet<String> {
    let mut missing = required.clone();
    for seed in first..first + WINDOW_SEEDS {
        let outcome = runner::run_seed(&spec(name, seed), runner::DEFAULT_WATCHDOG)
            .unwrap_or_else(|e| panic!("{name} seed {seed}: {e}"));
        assert!(outcome.violations.is_empty(), "{name} seed {seed}: {:?}", outcome.violations);
        for point in &outcome.coverage {
            missing.remove(point);
        }
        if missing.is_empty() {
            break;
        }
    }
    missing
}

#[test]
fn every_required_point_is_reached_in_every_window() {
    let mut misses = Vec::new();
    for name in &scenarios() {
        let scenario = spec(name, 1).scenario;
        let required: BTreeSet<String> = scenario.coverage.require.iter().cloned().collect();
        assert!(!required.is_empty(), "{name} requires no coverage point");
        // The margin is worth something only if a window is shorter than
        // what a campaign judges coverage over.
        assert!(WINDOW_SEEDS * 2 <= scenario.coverage.min_seeds, "{name}: min_seeds {}", scenario.coverage.min_seeds);
        for w in 0..WINDOWS {
            let first = 1 + w * WINDOW_SEEDS;
            for point in missed_in_window(name, &required, first) {
                misses.push(format!("{name}: seeds {first}..={} never reached {point}", first + WINDOW_SEEDS - 1));
            }
        }
    }
    assert!(misses.is_empty(), "required points without a margin:\n{}", misses.join("\n"));
}
