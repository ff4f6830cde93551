//! The quiet end (`phases.quiet_end_ms`): a world that owes nothing more and
//! has not changed for a whole period ends its liveness phase early; one
//! that still owes anything runs the whole phase, so a liveness failure is
//! judged as before. Every engine's world ends so: the quiet end reads the
//! store through the seam every engine has, and waits for what the
//! harness counts at its own seams (client calls, task bodies).

mod common;

use common::spec;
use leasesim_sim::check::commit;
use leasesim_sim::runner::{self, RunSpec};
use std::sync::Arc;

/// When the run ended, and when the store last changed.
fn ends(spec: &RunSpec) -> (u64, u64) {
    let result = runner::run_world(spec, runner::DEFAULT_WATCHDOG).expect("the seed runs");
    let changed = |r: &&leasesim_sim::history::Record| commit(r).is_some_and(|c| !c.is_empty());
    let last_change_ms = result.history.iter().filter(changed).map(|r| r.at_ms).max().unwrap_or(0);
    (result.end_ms, last_change_ms)
}

fn without_quiet_end(spec: RunSpec) -> RunSpec {
    let mut scenario = (*spec.scenario).clone();
    scenario.phases.quiet_end_ms = None;
    RunSpec { scenario: Arc::new(scenario), ..spec }
}

/// One scenario of each engine, and seeds of it that settle.
const SETTLING: [(&str, std::ops::RangeInclusive<u64>); 3] =
    [("swarm", 1..=5), ("graphile-recovery", 1..=3), ("apalis-recovery", 1..=3)];

#[test]
fn a_settled_world_ends_after_a_whole_quiet_period() {
    for (scenario, seeds) in SETTLING {
        for seed in seeds {
            let spec = spec(scenario, seed);
            let phases = spec.scenario.phases.clone();
            let quiet_ms = phases.quiet_end_ms.unwrap_or_else(|| panic!("{scenario} ends when quiet"));
            let (end_ms, last_change_ms) = ends(&spec);
            let at = format!("{scenario} seed {seed}: ended at {end_ms} ms, last changed at {last_change_ms} ms");
            assert!(end_ms < phases.duration_ms(), "{at}: ran the whole liveness phase");
            assert!(end_ms >= last_change_ms + quiet_ms, "{at}: ended before a whole quiet period");
            // The looks begin at the heal: a store settled before it ends
            // a whole period (and at most one look) after the heal.
            let settled_ms = last_change_ms.max(phases.fault_phase_ms);
            assert!(end_ms <= settled_ms + quiet_ms + quiet_ms / 4 + quiet_ms, "{at}: ended late");
            let (full_end_ms, _) = ends(&without_quiet_end(spec));
            assert_eq!(full_end_ms, phases.duration_ms(), "{at}: unset, the whole liveness phase runs");
        }
    }
}

/// Bodies that outlast the run: their tasks are never done, so the world
/// owes work to the end, runs the whole phase, and fails for it.
fn owing(scenario: &str) -> RunSpec {
    let base = spec(scenario, 1);
    let mut s = (*base.scenario).clone();
    (s.workload.work_min_ms, s.workload.work_max_ms) = (2_000_000, 2_000_000);
    assert!(s.phases.quiet_end_ms.is_some(), "{scenario} ends when quiet");
    RunSpec { scenario: Arc::new(s), ..base }
}

#[test]
fn a_world_that_still_owes_work_runs_the_whole_phase() {
    for scenario in ["a-index-builds", "graphile-recovery", "apalis-recovery"] {
        let spec = owing(scenario);
        let o = runner::run_seed(&spec, runner::DEFAULT_WATCHDOG).expect("the seed runs");
        assert!(o.tasks["leased"] + o.tasks["ready"] > 0, "{scenario}: no task was left open: {:?}", o.tasks);
        assert_eq!(o.sim_seconds * 1_000.0, spec.scenario.phases.duration_ms() as f64, "{scenario}: ended early");
        let invariants: Vec<&str> = o.violations.iter().map(|v| v.invariant.as_str()).collect();
        assert!(invariants.contains(&"eventual-completion"), "{scenario}: owed work not judged: {invariants:?}");
    }
}
