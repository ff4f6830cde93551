//! `check` calls a checker only for the kinds of record it declares it reads
//! (`Checker::reads`). A declaration that leaves out a kind the checker acts
//! on would silently weaken it; here real histories (every built-in
//! scenario, the graphile worlds, and runs with each defect switch on) are
//! judged both ways, and the reports must be equal: violations, evaluation
//! counts, excuses and coverage.

mod common;

use common::{scenarios, spec};
use leasesim::defects::Defect;
use leasesim_sim::check;
use leasesim_sim::runner::{self, RunSpec};

fn judged_alike(spec: &RunSpec) -> usize {
    let result = runner::run_world(spec, runner::DEFAULT_WATCHDOG).expect("the seed runs");
    let judge_spec = spec.scenario.judge_spec();
    let by_kind = check::check(&judge_spec, &result.history);
    let every = check::check_reading_every_record(&judge_spec, &result.history);
    assert_eq!(by_kind, every, "{} seed {}: judged by kind, the report differs", spec.scenario_arg, spec.seed);
    by_kind.violations.len()
}

#[test]
fn every_scenario_is_judged_alike_by_kind_and_record_by_record() {
    let mut names = scenarios();
    names.extend(["graphile-recovery".to_string(), "graphile-no-recovery".to_string()]);
    for name in &names {
        for seed in 1..=3 {
            judged_alike(&spec(name, seed));
        }
    }
}

#[test]
fn histories_with_violations_are_judged_alike_too() {
    let mut violations = 0;
    for defect in Defect::ALL {
        for seed in 1..=3 {
            violations += judged_alike(&spec("swarm", seed).with_defects([defect.name()]));
        }
    }
    assert!(violations > 0, "no defect run broke an invariant: this test compared passing histories only");
}
