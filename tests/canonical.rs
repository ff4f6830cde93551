//! Canonical runs, snapshotted: a change to what the engine does or records
//! shows up here as a reviewed snapshot diff (`cargo insta review`).

mod common;

use common::spec;
use leasesim_sim::{runner, scenario};

/// Every built-in scenario, whatever engine it runs.
#[test]
fn canonical_runs() {
    for name in &scenario::builtin_names() {
        let outcome = runner::run_seed(&spec(name, 1), runner::DEFAULT_WATCHDOG).expect("the seed runs");
        insta::assert_json_snapshot!(format!("{name}-seed-1"), outcome);
    }
}
