//! The foreign engines' real workers under the harness (graphile_worker
//! 0.14.1, apalis-redis 1.0.0): their scenarios run quiet without faults,
//! replay bit for bit, reach the coverage points they require, and
//! campaigns with faults find the bugs of docs/findings/graphile-worker.md
//! and docs/findings/apalis.md, and nothing else (expectations on those
//! versions: when an upstream fix lands, these tests tell).

mod common;

use common::spec;
use leasesim_sim::runner::{self, PlanSource};
use leasesim_sim::{scenario, Simulation};
use std::collections::BTreeSet;

/// Every scenario of every foreign engine (two each).
fn foreign_scenarios() -> Vec<String> {
    let mut names = Vec::new();
    for engine in ["graphile-worker", "apalis-redis"] {
        let of_engine = scenario::names_of_engine(engine);
        assert!(of_engine.len() >= 2, "{engine}'s scenarios: {of_engine:?}");
        names.extend(of_engine);
    }
    names
}

/// What a fault-free run of each scenario may still report: a known bug
/// that needs no fault (apalis's lost heartbeat wake-up is a matter of
/// timing alone; its ignored `max_attempts`, of failing bodies alone).
fn known_without_faults(name: &str) -> &'static [&'static str] {
    match name {
        "apalis-retries" => &["keepalive", "retry-budget"],
        _ if name.starts_with("apalis-") => &["keepalive"],
        _ => &[],
    }
}

#[test]
fn fault_free_runs_are_quiet() {
    for name in foreign_scenarios() {
        let report = Simulation::scenario(&name).seeds(1..=5).no_faults().run();
        let known = known_without_faults(&name);
        for run in report.failures() {
            let invariant = run.failure.as_ref().map(|f| f.invariant.as_str()).unwrap_or("a harness error");
            assert!(known.contains(&invariant), "{name} seed {} without faults: {invariant}", run.seed);
        }
        for o in report.outcomes() {
            assert_eq!(o.tasks["done"] + o.tasks["dead"], o.tasks.values().sum::<u64>(), "{name} seed {}", o.seed);
            assert!(o.tasks["done"] > 0, "{name} seed {}: nothing ran", o.seed);
        }
    }
}

#[test]
fn the_same_seed_gives_the_same_run() {
    for name in foreign_scenarios() {
        let a = runner::run_seed(&spec(&name, 3), runner::DEFAULT_WATCHDOG).expect("runs");
        let b = runner::run_seed(&spec(&name, 3), runner::DEFAULT_WATCHDOG).expect("runs");
        assert_eq!(a.trace_hash, b.trace_hash, "{name}");
        assert_eq!(a.events, b.events, "{name}");
    }
    // madsim's draw-by-draw check, and the trace hashes of its two runs.
    runner::check_determinism(&spec("graphile-recovery", 1));
    runner::check_determinism(&spec("apalis-recovery", 1));
}

#[test]
fn every_foreign_scenario_reaches_what_it_requires() {
    for name in foreign_scenarios() {
        let required: BTreeSet<String> = spec(&name, 1).scenario.coverage.require.iter().cloned().collect();
        assert!(!required.is_empty(), "{name} requires no coverage point");
        let mut missing = required.clone();
        for seed in 1..=30 {
            let outcome = runner::run_seed(&spec(&name, seed), runner::DEFAULT_WATCHDOG).expect("runs");
            for point in &outcome.coverage {
                missing.remove(point);
            }
            if missing.is_empty() {
                break;
            }
        }
        assert!(missing.is_empty(), "{name}: seeds 1..=30 never reached {missing:?}");
    }
}

#[test]
fn a_campaign_finds_the_stale_completion() {
    let report = Simulation::scenario("graphile-recovery").seeds(1..=30).run();
    let found: Vec<(u64, String)> =
        report.failures().filter_map(|run| run.failure.as_ref().map(|f| (run.seed, f.invariant.clone()))).collect();
    assert!(
        found.iter().any(|(_, invariant)| invariant == "fenced-completion"),
        "graphile 0.14.1's unfenced complete_job was not found in 30 seeds: {found:?}"
    );
    // Nothing but that bug: every other invariant holds.
    assert!(found.iter().all(|(_, invariant)| invariant == "fenced-completion"), "{found:?}");
    // Without recovery no job is taken from a live worker: no stale completion.
    let quiet = Simulation::scenario("graphile-no-recovery").seeds(1..=15).run();
    quiet.assert_passes();
    // And the same worlds without faults have nothing to find.
    let spec = spec("graphile-recovery", 24).with_plan(PlanSource::None);
    let outcome = runner::run_seed(&spec, runner::DEFAULT_WATCHDOG).expect("runs");
    assert!(outcome.violations.is_empty(), "{:?}", outcome.violations);
}

/// Campaigns of apalis-redis 1.0.0 find its two bugs
/// (docs/findings/apalis.md), each as the invariant that judges it, and
/// nothing else: a restarted worker's task completed by its previous run's
/// late acknowledgement (`fenced-completion`, with kills and restarts), and
/// an idle worker whose heartbeat fell due during a fetch falling silent
/// (`keepalive`, without process faults too).
#[test]
fn apalis_campaigns_find_its_three_bugs() {
    let scenarios =
        [("apalis-recovery", "fenced-completion"), ("apalis-quiet", "keepalive"), ("apalis-retries", "retry-budget")];
    for (name, want) in scenarios {
        let report = Simulation::scenario(name).seeds(1..=30).run();
        let found: BTreeSet<String> =
            report.failures().filter_map(|r| r.failure.as_ref()).map(|f| f.invariant.clone()).collect();
        assert!(found.contains(want), "{name}: {want} not found in 30 seeds: {found:?}");
        let known: BTreeSet<String> = ["fenced-completion", "keepalive", "retry-budget"].map(String::from).into();
        assert!(found.is_subset(&known), "{name}: {found:?}");
    }
}

/// max-attempts-ignored (docs/findings/apalis.md): a job pushed with
/// `max_attempts = 2` is retried after its second failure. Every
/// retry-budget violation of apalis-retries says so, and nothing else
/// fails on its first seed.
#[test]
fn apalis_retries_past_the_applications_budget() {
    let outcome = runner::run_seed(&spec("apalis-retries", 1), runner::DEFAULT_WATCHDOG).expect("runs");
    assert!(!outcome.violations.is_empty(), "seed 1 kept every budget");
    for v in &outcome.violations {
        assert_eq!(v.invariant, "retry-budget", "{v:?}");
        assert!(v.message.contains("failure 2 (Conflict) left it Ready; it must die (max_retries 1)"), "{}", v.message);
    }
}

/// graphile-recovery seed 120712: a new incarnation's first request closes
/// its predecessor's transaction x2@p1.2, whose lock a held `complete_job`
/// waited on. When the store closed it while classifying the request,
/// before recording its arrival, the freed statement was recorded first, and
/// `transactions` saw a row changed under a lock still held
/// (docs/false-alarms.md; "t9 changed by request 131 (complete) while
/// transaction x2@p1.2 held its lock", with the store closing it there
/// again). Seed 56595635367 pinned this until the trace change of
/// 2026-12-05 (docs/trace-changes.md); 9 of 20,000 seeds from 120000 fail
/// so with the old order, none with the new.
#[test]
fn a_lock_freed_by_a_new_incarnation_is_recorded_after_its_arrival() {
    let outcome = runner::run_seed(&spec("graphile-recovery", 120_712), runner::DEFAULT_WATCHDOG).expect("runs");
    let invariants: Vec<&str> = outcome.violations.iter().map(|v| v.invariant.as_str()).collect();
    assert!(invariants.is_empty(), "{:#?}", outcome.violations);
}
