//! The quiet end (`phases.quiet_end_ms`): a world that owes nothing more and
//! has not changed for a whole period ends its liveness phase early; one
//! that still owes anything runs the whole phase, so a liveness failure is
//! judged as before.

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

#[test]
fn a_settled_world_ends_after_a_whole_quiet_period() {
    for seed in 1..=5 {
        let spec = spec("swarm", seed);
        let phases = spec.scenario.phases.clone();
        let quiet_ms = phases.quiet_end_ms.expect("swarm ends when quiet");
        let (end_ms, last_change_ms) = ends(&spec);
        assert!(end_ms < phases.duration_ms(), "seed {seed}: ran the whole liveness phase (ended at {end_ms} ms)");
        assert!(end_ms >= last_change_ms + quiet_ms, "seed {seed}: ended {end_ms} ms, changed {last_change_ms} ms");
        assert!(end_ms <= last_change_ms + quiet_ms + quiet_ms / 4 + quiet_ms, "seed {seed}: ended late");
        let (full_end_ms, _) = ends(&without_quiet_end(spec));
        assert_eq!(full_end_ms, phases.duration_ms(), "seed {seed}: unset, the whole liveness phase runs");
    }
}

#[test]
fn a_world_that_still_owes_work_runs_the_whole_phase() {
    // Bodies that outlast the run: their tasks are still leased or ready at
    // the end, and their indexes never materialize.
    let base = spec("a-index-builds", 1);
    let mut scenario = (*base.scenario).clone();
    (scenario.workload.work_min_ms, scenario.workload.work_max_ms) = (2_000_000, 2_000_000);
    let spec = RunSpec { scenario: Arc::new(scenario), ..base };
    assert!(spec.scenario.phases.quiet_end_ms.is_some(), "a-index-builds ends when quiet");
    let o = runner::run_seed(&spec, runner::DEFAULT_WATCHDOG).expect("the seed runs");
    assert!(o.tasks["leased"] + o.tasks["ready"] > 0, "no task was left open: {:?}", o.tasks);
    assert_eq!(o.sim_seconds * 1_000.0, spec.scenario.phases.duration_ms() as f64);
}
