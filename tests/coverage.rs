//! Each built-in scenario reaches the coverage points it requires
//! (`[coverage] require`) within a small number of seeds, so a campaign on
//! it is never silently vacuous.

mod common;

use common::{scenarios, spec};
use leasesim_sim::runner;
use std::collections::BTreeSet;

/// Seeds each scenario gets to reach every point it requires.
const SEEDS: u64 = 60;

#[test]
fn every_builtin_scenario_reaches_what_it_requires() {
    for name in &scenarios() {
        let required: BTreeSet<String> = spec(name, 1).scenario.coverage.require.iter().cloned().collect();
        assert!(!required.is_empty(), "{name} requires no coverage point");
        let mut missing = required.clone();
        for seed in 1..=SEEDS {
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
        assert!(missing.is_empty(), "{name}: seeds 1..={SEEDS} never reached {missing:?}");
    }
}
