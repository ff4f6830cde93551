//! The Rust API for simulation tests (`leasesim_sim::Simulation`), by
//! example: a small world built in code (no scenario file), run over many
//! seeds with faults drawn from each; and the same world with a defect
//! switch on, which the run must report. README.md ("Writing simulation
//! tests in Rust") shows the first test.

use leasesim::config::{EngineConfig, LeaseTtls, MaintenanceKind};
use leasesim::defects::Defect;
use leasesim_sim::faults::FaultPlan;
use leasesim_sim::scenario::{Bounds, CoverageSpec, FaultLimits, Phases, Scenario, Topology, Workload};
use leasesim_sim::Simulation;

/// Two workers; a dozen jobs that fail now and then and retry, three index
/// builds and two authz materializations; two minutes of faults (every
/// kind), then five of calm in which everything must finish.
fn two_workers() -> Scenario {
    Scenario {
        name: "two-workers".into(),
        description: "two workers, a dozen jobs that fail and retry, and a few index builds".into(),
        topology: Topology { workers: 2 },
        engine: leasesim_builtin::section(EngineConfig {
            concurrency: 2,
            notify_peers: true,
            maintenance: vec![MaintenanceKind::Index],
            lease_ttl: LeaseTtls {
                index_build_ms: Some(120_000),
                authz_materialization_ms: Some(120_000),
                ..LeaseTtls::default()
            },
            ..EngineConfig::default()
        }),
        workload: Workload {
            enqueue_window_ms: 60_000,
            jobs: 12,
            job_fail_rate: 0.3,
            index_builds: 3,
            authz_materializations: 2,
            work_min_ms: 200,
            work_max_ms: 3_000,
            ..Workload::default()
        },
        phases: Phases { fault_phase_ms: 120_000, heal_phase_ms: 300_000, quiet_end_ms: None },
        bounds: Bounds {
            claim_bound_ms: 20_000,
            recovery_bound_ms: 40_000,
            permit_release_slack_ms: 5_000,
            materialize_bound_ms: 240_000,
            completion_bound_ms: 280_000,
            fresh_index_after_heal_ms: None,
        },
        faults: FaultLimits::default(),
        coverage: CoverageSpec::default(),
    }
}

#[test]
fn a_world_built_in_rust_passes() {
    let report = Simulation::from_scenario(two_workers()).seeds(1..=30).run();
    report.assert_passes();
    assert_eq!(report.runs.len(), 30);
    assert!(report.summary.fault_counts.values().sum::<u64>() > 0, "faults were injected");
    assert!(report.outcomes().all(|o| o.tasks["done"] + o.tasks["dead"] == o.tasks.values().sum::<u64>()));
}

#[test]
fn a_defect_is_reported_with_its_replay_lines() {
    let report = Simulation::from_scenario(two_workers()).seeds(1..=60).defect(Defect::UnfencedCompletion).run();
    assert!(!report.passed(), "unfenced completions went unnoticed on 60 seeds");
    let failed: Vec<u64> = report.failures().map(|run| run.seed).collect();
    assert_eq!(failed, [18, 34], "the same seeds fail on every machine");
    let first = report.failures().next().expect("a failure").failure.clone().expect("a failed run has a failure");
    assert_eq!(first.invariant, "fenced-completion");
    // Replaying that one seed fails the same way.
    let again = Simulation::from_scenario(two_workers()).seed(first.seed).defect(Defect::UnfencedCompletion).run();
    assert_eq!(again.summary.failures, [first]);

    let panic = std::panic::catch_unwind(|| report.assert_passes()).expect_err("assert_passes panics");
    let message = panic.downcast_ref::<String>().expect("a formatted message");
    assert!(message.starts_with("two-workers: 2 of 60 seeds failed:"), "{message}");
    for seed in failed {
        assert!(message.contains(&format!("FAIL two-workers seed {seed}: [fenced-completion]")), "{message}");
        assert!(message.contains(&format!(".seed({seed})")), "the replay line of seed {seed}: {message}");
    }
}

#[test]
fn faults_can_be_left_out_or_given() {
    let quiet = Simulation::from_scenario(two_workers()).seeds(3).no_faults().run();
    quiet.assert_passes();
    assert_eq!(quiet.summary.fault_counts.values().sum::<u64>(), 0, "no fault with no_faults()");
    let given = Simulation::from_scenario(two_workers()).seeds(3).plan(FaultPlan::none()).run();
    let hashes = |r: &leasesim_sim::Report| r.outcomes().map(|o| o.trace_hash.clone()).collect::<Vec<_>>();
    assert_eq!(hashes(&quiet), hashes(&given), "an empty plan is no faults");
    assert_eq!(given.runs.iter().map(|r| r.seed).collect::<Vec<_>>(), [1, 2, 3], "a count n is seeds 1..=n");
}

#[test]
#[should_panic(expected = "Simulation::scenario: unknown scenario 'no-such-world'")]
fn an_unknown_scenario_panics() {
    Simulation::scenario("no-such-world");
}

#[test]
#[should_panic(expected = "Simulation::from_scenario(two-workers): topology.workers")]
fn a_world_that_cannot_exist_panics() {
    Simulation::from_scenario(Scenario { topology: Topology { workers: 0 }, ..two_workers() });
}

/// README.md shows the world and the first test as they are here.
#[test]
fn the_readme_shows_this_code() {
    let (readme, this) = (include_str!("../README.md"), include_str!("api.rs"));
    let from = this.find("/// Two workers;").expect("the world");
    let to = this.find("#[test]\nfn a_defect").expect("the defect test");
    assert!(readme.contains(this[from..to].trim_end()), "README.md's sample differs from tests/api.rs: copy it over");
}

/// Another engine in the same world: `Simulation::engine` swaps the
/// scenario's engine and keeps its workload, topology, phases and faults.
#[test]
fn another_engine_runs_the_same_world() {
    let graphile = || {
        let adapter =
            leasesim_sim::engines().adapter("graphile-worker").expect("leasesim-sim ships graphile's adapter");
        adapter.configure(&Default::default()).expect("graphile's defaults configure it")
    };
    // Index builds are beyond graphile: refused, naming what it cannot do.
    let refused = Simulation::from_scenario(two_workers()).try_engine(graphile()).expect_err("graphile has no indexes");
    assert!(refused.starts_with("two-workers: "), "{refused}");

    let mut jobs_only = two_workers();
    jobs_only.workload.index_builds = 0;
    jobs_only.workload.authz_materializations = 0;
    // graphile reads the world's one wall clock: no per-process offsets.
    jobs_only.faults.kinds.retain(|k| *k != leasesim_sim::faults::FaultKind::ClockOffset);
    let report = Simulation::from_scenario(jobs_only).engine(graphile()).seeds(1..=3).no_faults().run();
    report.assert_passes();
    for outcome in report.outcomes() {
        assert_eq!(
            outcome.tasks["done"] + outcome.tasks["dead"],
            12,
            "every job ends under graphile: {:?}",
            outcome.tasks
        );
    }
}
