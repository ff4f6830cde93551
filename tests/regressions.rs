//! Regression tests for the acceptance criteria of the three reports in
//! docs/real-bugs.md, as scripted scenarios: every enqueue is placed
//! by `workload.script` (tests/scenarios/*.toml) and every fault by an
//! explicit fault plan (below), so nothing is drawn from the seed but network
//! latencies and coin flips that the facts do not depend on.
//!
//! Each regression runs twice through one check function, [`check`]: with
//! the fix (no defect switch on), where the report's acceptance facts must be
//! read from the event history and the checkers must find nothing; and with
//! the report's defect switch on, where the history must show the reported
//! failure and the checkers must report exactly the expected invariants.
//!
//! Set `LEASESIM_DUMP=1` to print every run's history (one JSON record a line).

use leasesim::defects::Defect;
use leasesim_sim::check::Violation;
use leasesim_sim::faults::{FaultEvent, FaultKind, FaultPlan, UNTIL_HEAL};
use leasesim_sim::history::{Entry, Record, WorldEvent};
use leasesim_sim::runner::{self, PlanSource, RunSpec};
use leasesim_sim::scenario::{self, Scenario};
use leasesim_vocab::ids::{Fence, IndexId, Owner, ProcId, TaskId};
use leasesim_vocab::op::Refusal;
use leasesim_vocab::task::TaskKind;
use leasesim_vocab::testimony::{Event, ReleaseCause, WriteKind};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

/// An applied write: its fence, kind, retries and committed retry time.
type Applied = (Fence, WriteKind, u32, Option<u64>);

/// Seeds each regression runs with: the facts must not depend on the seed.
const SEEDS: [u64; 8] = [1, 2, 3, 4, 5, 6, 7, 8];

// ---------------------------------------------------------------------------
// The one check function
// ---------------------------------------------------------------------------

/// One report's regression: a scripted scenario, its explicit fault plan, its
/// defect switch, and the facts with and without the switch.
struct Regression {
    /// File stem in tests/scenarios/.
    scenario: &'static str,
    defect: Defect,
    plan: fn() -> Vec<FaultEvent>,
    /// Facts of the fixed engine (the checkers must also find nothing).
    fixed: fn(&Run),
    /// Facts with the defect switch on.
    broken: fn(&Run),
    /// With the switch on, the checkers report exactly these invariants.
    broken_violates: &'static [&'static str],
}

fn check(reg: &Regression) {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/scenarios").join(format!("{}.toml", reg.scenario));
    let loaded = scenario::load(&path, &leasesim_sim::engines()).unwrap_or_else(|e| panic!("{e}"));
    let scenario = Arc::new(loaded.scenario);
    let plan = FaultPlan { events: (reg.plan)() };
    plan.validate(scenario.topology.workers, scenario.phases.fault_phase_ms)
        .unwrap_or_else(|e| panic!("{}: bad fault plan: {e}", reg.scenario));
    for seed in SEEDS {
        for defect in [None, Some(reg.defect)] {
            let spec = RunSpec::new(scenario.clone(), path.display().to_string(), seed)
                .with_plan(PlanSource::Explicit(plan.clone()))
                .with_defects(defect.iter().map(|d| d.name()));
            let result = runner::run_world(&spec, runner::DEFAULT_WATCHDOG)
                .unwrap_or_else(|e| panic!("{} seed {seed} {defect:?}: {e}", reg.scenario));
            let outcome = runner::judge(&spec, &result);
            let run = Run {
                label: format!(
                    "{} seed {seed} ({})",
                    reg.scenario,
                    defect.map_or_else(|| "fixed".to_string(), |d| format!("defect {d}"))
                ),
                scenario: scenario.clone(),
                history: result.history,
                violations: outcome.violations,
            };
            if std::env::var_os("LEASESIM_DUMP").is_some() {
                eprintln!("==== {}\n{}", run.label, run.dump());
            }
            match defect {
                None => {
                    assert!(run.violations.is_empty(), "{run}: the fixed engine violates {:#?}", run.violations);
                    (reg.fixed)(&run);
                }
                Some(_) => {
                    let expected: BTreeSet<String> = reg.broken_violates.iter().map(|s| s.to_string()).collect();
                    assert_eq!(run.violated(), expected, "{run}: violations {:#?}", run.violations);
                    (reg.broken)(&run);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Reading the history
// ---------------------------------------------------------------------------

/// One finished run: its history and the checkers' verdict.
struct Run {
    label: String,
    scenario: Arc<Scenario>,
    history: Vec<Record>,
    violations: Vec<Violation>,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label)
    }
}

/// A grant, release, write... with its time.
type At<T> = (u64, T);

impl Run {
    fn events(&self) -> impl Iterator<Item = (u64, &Event)> {
        self.history.iter().filter_map(|r| match &r.entry {
            Entry::Engine(e) => Some((r.at_ms, e)),
            Entry::World(_) | Entry::Truth(_) => None,
        })
    }

    fn world(&self) -> impl Iterator<Item = (u64, &WorldEvent)> {
        self.history.iter().filter_map(|r| match &r.entry {
            Entry::World(w) => Some((r.at_ms, w)),
            Entry::Engine(_) | Entry::Truth(_) => None,
        })
    }

    fn dump(&self) -> String {
        self.history.iter().map(|r| serde_json::to_string(r).expect("a record serializes") + "\n").collect()
    }

    /// Every record about `task`, one a line (for assertion messages).
    fn trace(&self, task: TaskId) -> String {
        let about = |e: &Event| match e {
            Event::TaskCreated { task: t, .. } => *t == task,
            Event::LeaseGranted { fence, .. }
            | Event::LeaseRenewed { fence, .. }
            | Event::LeaseReleased { fence, .. }
            | Event::WriteApplied { fence, .. }
            | Event::WriteRejected { fence, .. }
            | Event::LeaseChecked { fence, .. }
            | Event::ExecutionStarted { fence }
            | Event::AttemptDropped { fence }
            | Event::ExecutionFinished { fence, .. }
            | Event::FinalizeTimedOut { fence }
            | Event::CallbackPublished { fence } => fence.task == task,
            Event::PermitAcquired { task: t, .. } | Event::PermitReleased { task: t, .. } => *t == task,
            Event::RepairDecision { reclaimed, .. } => reclaimed.contains(&task),
            _ => false,
        };
        let mut out = format!("history of t{task}:\n");
        for r in &self.history {
            let keep = match &r.entry {
                Entry::Engine(e) => about(e),
                Entry::World(_) => true,
                Entry::Truth(_) => false,
            };
            if keep {
                out += &format!("  {:>9} {}\n", r.at_ms, serde_json::to_string(&r.entry).expect("serializes"));
            }
        }
        out
    }

    /// The invariants the checkers report.
    fn violated(&self) -> BTreeSet<String> {
        self.violations.iter().map(|v| v.invariant.clone()).collect()
    }

    /// The tasks the checkers report under `invariant`.
    fn violating_tasks(&self, invariant: &str) -> BTreeSet<TaskId> {
        self.violations.iter().filter(|v| v.invariant == invariant).filter_map(|v| v.task).collect()
    }

    fn heal_ms(&self) -> u64 {
        self.world().find(|(_, w)| matches!(w, WorldEvent::Heal)).map(|(at, _)| at).expect("every run heals")
    }

    /// Tasks of `kind`, in creation order, with their creation time.
    fn created(&self, kind: TaskKind) -> Vec<At<TaskId>> {
        self.events()
            .filter_map(|(at, e)| match e {
                Event::TaskCreated { task, spec, .. } if spec.kind == kind => Some((at, *task)),
                _ => None,
            })
            .collect()
    }

    fn grants(&self, task: TaskId) -> Vec<At<Fence>> {
        self.events()
            .filter_map(|(at, e)| match e {
                Event::LeaseGranted { fence, .. } if fence.task == task => Some((at, *fence)),
                _ => None,
            })
            .collect()
    }

    fn grant(&self, task: TaskId, attempt: u32) -> At<Fence> {
        self.grants(task)
            .into_iter()
            .find(|(_, f)| f.attempt == attempt)
            .unwrap_or_else(|| panic!("{self}: t{task} attempt {attempt} never granted\n{}", self.trace(task)))
    }

    fn releases(&self, task: TaskId) -> Vec<At<(Fence, ReleaseCause)>> {
        self.events()
            .filter_map(|(at, e)| match e {
                Event::LeaseReleased { fence, cause } if fence.task == task => Some((at, (*fence, *cause))),
                _ => None,
            })
            .collect()
    }

    /// Applied fenced writes of `task`: (fence, write, retries, retry_at).
    fn applied(&self, task: TaskId) -> Vec<At<Applied>> {
        self.events()
            .filter_map(|(at, e)| match e {
                Event::WriteApplied { fence, write, retries, retry_at_ms, .. } if fence.task == task => {
                    Some((at, (*fence, *write, *retries, *retry_at_ms)))
                }
                _ => None,
            })
            .collect()
    }

    /// Applied writes of one kind (complete, fail...) of `task`.
    fn applied_of(&self, task: TaskId, kind: WriteKind) -> Vec<At<Fence>> {
        self.applied(task).into_iter().filter(|(_, (_, w, ..))| *w == kind).map(|(at, (f, ..))| (at, f)).collect()
    }

    fn rejected(&self, task: TaskId) -> Vec<At<(Fence, WriteKind, Refusal)>> {
        self.events()
            .filter_map(|(at, e)| match e {
                Event::WriteRejected { fence, write, reason } if fence.task == task => {
                    Some((at, (*fence, *write, *reason)))
                }
                _ => None,
            })
            .collect()
    }

    fn callbacks(&self, task: TaskId) -> Vec<At<Fence>> {
        self.events()
            .filter_map(|(at, e)| match e {
                Event::CallbackPublished { fence } if fence.task == task => Some((at, *fence)),
                _ => None,
            })
            .collect()
    }

    /// When the execution of `fence`'s attempt finished, and whether it failed.
    fn finished(&self, fence: Fence) -> Option<At<bool>> {
        self.events().find_map(|(at, e)| match e {
            Event::ExecutionFinished { fence: f, error } if *f == fence => Some((at, error.is_some())),
            _ => None,
        })
    }

    fn finalize_timeouts(&self) -> Vec<At<Fence>> {
        self.events()
            .filter_map(|(at, e)| match e {
                Event::FinalizeTimedOut { fence } => Some((at, *fence)),
                _ => None,
            })
            .collect()
    }

    /// When the permit of attempt `attempt` of `task` came back.
    fn permit_released(&self, task: TaskId, attempt: u32) -> Option<u64> {
        self.events().find_map(|(at, e)| match e {
            Event::PermitReleased { task: t, attempt: a, .. } if *t == task && *a == attempt => Some(at),
            _ => None,
        })
    }

    /// The most permits any one process held at once (rebuilt from
    /// PermitAcquired / PermitReleased).
    fn max_permits_in_use(&self) -> u32 {
        let mut held: BTreeMap<Owner, u32> = BTreeMap::new();
        let mut max = 0;
        for (_, e) in self.events() {
            match e {
                Event::PermitAcquired { owner, .. } => {
                    let n = held.entry(*owner).or_default();
                    *n += 1;
                    max = max.max(*n);
                }
                Event::PermitReleased { owner, .. } => *held.entry(*owner).or_default() -= 1,
                _ => {}
            }
        }
        max
    }

    /// The concurrency every process started with.
    fn started_concurrency(&self) -> BTreeSet<u32> {
        self.events()
            .filter_map(|(_, e)| match e {
                Event::ProcessStarted { concurrency, .. } => Some(*concurrency),
                _ => None,
            })
            .collect()
    }

    /// The client's query results: (index, materialized).
    fn query_results(&self) -> Vec<At<(IndexId, bool)>> {
        self.events()
            .filter_map(|(at, e)| match e {
                Event::QueryResult { index, materialized } => Some((at, (*index, *materialized))),
                _ => None,
            })
            .collect()
    }

    /// The store's side of the queries: (index, materialized, waited_ms).
    fn query_answers(&self) -> Vec<At<(IndexId, bool, u64)>> {
        self.events()
            .filter_map(|(at, e)| match e {
                Event::QueryAnswered { index, materialized, waited_ms } => {
                    Some((at, (*index, *materialized, *waited_ms)))
                }
                _ => None,
            })
            .collect()
    }

    fn materialized(&self, index: IndexId) -> Option<u64> {
        self.events().find_map(|(at, e)| match e {
            Event::IndexMaterialized { index: i, .. } if *i == index => Some(at),
            _ => None,
        })
    }

    /// Repair decisions about `group`: (needed, reclaimed).
    fn repair_decisions(&self, group: u64) -> Vec<At<(bool, Vec<TaskId>)>> {
        self.events()
            .filter_map(|(at, e)| match e {
                Event::RepairDecision { group: g, needed, reclaimed } if *g == group => {
                    Some((at, (*needed, reclaimed.clone())))
                }
                _ => None,
            })
            .collect()
    }

    /// Injections of a fault kind: (time, detail).
    fn injections(&self, kind: FaultKind) -> Vec<At<String>> {
        self.world()
            .filter_map(|(at, w)| match w {
                WorldEvent::Fault { kind: k, detail } if k == kind.name() => Some((at, detail.clone())),
                _ => None,
            })
            .collect()
    }

    fn paused(&self, proc: ProcId) -> Vec<u64> {
        self.world()
            .filter(|(_, w)| matches!(w, WorldEvent::ProcessPaused { proc: p } if *p == proc))
            .map(|(at, _)| at)
            .collect()
    }

    fn resumed(&self, proc: ProcId) -> Vec<u64> {
        self.world()
            .filter(|(_, w)| matches!(w, WorldEvent::ProcessResumed { proc: p } if *p == proc))
            .map(|(at, _)| at)
            .collect()
    }

    /// When the incarnation `owner` was killed, if it was.
    fn killed(&self, owner: Owner) -> Option<u64> {
        self.world().find_map(|(at, w)| match w {
            w if w.gone() == Some(owner) => Some(at),
            _ => None,
        })
    }
}

// ---------------------------------------------------------------------------
// Fault plans
// ---------------------------------------------------------------------------

fn fault(kind: FaultKind, at_ms: u64, for_ms: u64) -> FaultEvent {
    FaultEvent { kind, at_ms, for_ms, proc: None, rate: 0.0, magnitude_ms: 0 }
}

fn kill(proc: ProcId, at_ms: u64, for_ms: u64) -> FaultEvent {
    FaultEvent { proc: Some(proc), ..fault(FaultKind::ProcessKill, at_ms, for_ms) }
}

fn pause(proc: ProcId, at_ms: u64, for_ms: u64) -> FaultEvent {
    FaultEvent { proc: Some(proc), ..fault(FaultKind::ProcessPause, at_ms, for_ms) }
}

// ---------------------------------------------------------------------------
// A1: a hung failure finalization holds the permit (docs/real-bugs.md#a1)
// ---------------------------------------------------------------------------

/// Every outcome write (lease check, fail) arriving in [0 s, 35 s) is held
/// until the heal: that covers the failure finalization of the four authz
/// attempts (they fail at ~1 s) and every retry of it until its 30 s
/// deadline, and nothing of the index builds (40 s on).
fn a1_plan() -> Vec<FaultEvent> {
    vec![FaultEvent { rate: 1.0, magnitude_ms: UNTIL_HEAL, ..fault(FaultKind::HungFinalization, 0, 35_000) }]
}

#[test]
fn a1_hung_failure_finalization_does_not_starve_later_index_builds() {
    check(&Regression {
        scenario: "a1-hung-failure-finalization",
        defect: Defect::UnboundedFinalize,
        plan: a1_plan,
        fixed: a1_fixed,
        broken: a1_broken,
        broken_violates: &["no-permit-leak"],
    });
}

/// The four authz tasks, and checks of what is common to both runs: each
/// attempt 1 failed at once and its finalization was held.
fn a1_authz(run: &Run) -> Vec<TaskId> {
    let authz: Vec<TaskId> = run.created(TaskKind::AuthzMaterialization).into_iter().map(|(_, t)| t).collect();
    assert_eq!(authz.len(), 4, "{run}: authz materializations created");
    for &t in &authz {
        let (_, fence) = run.grant(t, 1);
        let finished = run.finished(fence);
        assert!(
            matches!(finished, Some((at, true)) if at < 10_000),
            "{run}: t{t} attempt 1 did not fail inside the hung window\n{}",
            run.trace(t)
        );
    }
    // The first try of each of the four, and (fixed engine) its retries.
    let held = run.injections(FaultKind::HungFinalization);
    assert!(held.len() >= 4, "{run}: at least one held finalization per failed authz attempt: {held:?}");
    authz
}

fn a1_builds(run: &Run) -> Vec<At<TaskId>> {
    let builds = run.created(TaskKind::IndexBuild);
    assert_eq!(builds.len(), 4, "{run}: index builds created");
    assert!(
        builds.iter().all(|&(at, _)| at >= 40_000),
        "{run}: builds enqueued after the finalize deadline: {builds:?}"
    );
    builds
}

fn a1_fixed(run: &Run) {
    let engine = run.scenario.engine.get().promises();
    let lag = run.scenario.workload.query_lag_timeout_ms;
    let heal = run.heal_ms();
    // Failure persistence is bounded: each held finalization gives up after
    // exactly the deadline and its permit comes back then.
    let authz = a1_authz(run);
    let timeouts = run.finalize_timeouts();
    assert_eq!(timeouts.len(), 4, "{run}: finalize timeouts {timeouts:?}");
    for &t in &authz {
        let (_, fence) = run.grant(t, 1);
        let (finished, _) = run.finished(fence).expect("finished");
        let deadline = finished + engine.finalize_deadline_ms;
        assert!(
            timeouts.iter().any(|&(at, f)| f == fence && at.abs_diff(deadline) <= 1),
            "{run}: {fence} timed out {timeouts:?}, expected at {deadline} ms"
        );
        let released = run
            .permit_released(t, 1)
            .unwrap_or_else(|| panic!("{run}: permit of t{t} never released\n{}", run.trace(t)));
        assert!(
            released.abs_diff(deadline) <= 1,
            "{run}: permit of {fence} released at {released} ms, expected at {deadline} ms"
        );
        // The abandoned attempt stays recoverable: recovery reclaims exactly
        // it (same-owner recovery, once the owner no longer runs it), the
        // task is retried at new attempts, and it ends dead after the last
        // retry (every authz attempt conflicts).
        let releases = run.releases(t);
        assert!(
            matches!(releases.first(), Some(&(at, (f, ReleaseCause::Orphaned))) if f == fence && at > released),
            "{run}: recovery of {fence}\n{}",
            run.trace(t)
        );
        let fails = run.applied_of(t, WriteKind::Fail);
        assert_eq!(fails.len() as u32, engine.max_retries + 1, "{run}: failures of t{t}\n{}", run.trace(t));
        assert!(fails.iter().all(|(_, f)| f.attempt >= 2), "{run}: attempt 1 recorded a failure\n{}", run.trace(t));
        let last = run.applied(t).last().map(|&(_, (_, w, _, retry_at))| (w, retry_at));
        assert_eq!(last, Some((WriteKind::Fail, None)), "{run}: t{t} did not die\n{}", run.trace(t));
    }
    // The later, unrelated index builds start at once (within one idle poll),
    // long before the hung writes are released at the heal.
    for (created, t) in a1_builds(run) {
        let (granted, _) = run.grant(t, 1);
        assert!(
            granted <= created + engine.idle_poll_ms + 100,
            "{run}: build t{t} enqueued at {created} ms started only at {granted} ms\n{}",
            run.trace(t)
        );
        assert!(granted < heal, "{run}: build t{t} started at {granted} ms, not before the heal at {heal} ms");
    }
    // Every query (sent together with its build) finds the index materialized
    // within the report's 5000 ms lag timeout.
    let results = run.query_results();
    assert_eq!(results.len(), 4, "{run}: query results {results:?}");
    assert!(results.iter().all(|(_, (_, materialized))| *materialized), "{run}: query results {results:?}");
    let answers = run.query_answers();
    assert_eq!(answers.len(), 4, "{run}: query answers {answers:?}");
    for (at, (index, materialized, waited_ms)) in answers {
        assert!(
            materialized && waited_ms <= lag,
            "{run}: index {index} answered {materialized} at {at} ms after {waited_ms} ms"
        );
        let built = run.materialized(index).expect("materialized");
        assert!(built < heal, "{run}: index {index} materialized at {built} ms, not before the heal at {heal} ms");
    }
}

fn a1_broken(run: &Run) {
    let lag = run.scenario.workload.query_lag_timeout_ms;
    let heal = run.heal_ms();
    // No deadline: nothing times out and the four permits stay held until the
    // heal releases the hung writes.
    let authz = a1_authz(run);
    assert_eq!(run.finalize_timeouts(), vec![], "{run}: finalize timeouts without a deadline");
    for &t in &authz {
        let released = run
            .permit_released(t, 1)
            .unwrap_or_else(|| panic!("{run}: permit of t{t} never released\n{}", run.trace(t)));
        assert!(
            released >= heal,
            "{run}: permit of t{t} released at {released} ms, before the heal at {heal} ms\n{}",
            run.trace(t)
        );
    }
    // So no index build starts before the heal ...
    for (_, t) in a1_builds(run) {
        let (granted, _) = run.grant(t, 1);
        assert!(
            granted >= heal,
            "{run}: build t{t} started at {granted} ms, before the heal at {heal} ms\n{}",
            run.trace(t)
        );
    }
    // ... and every query runs into its lag timeout: "index not materialised".
    let results = run.query_results();
    assert_eq!(results.len(), 4, "{run}: query results {results:?}");
    assert!(results.iter().all(|(_, (_, materialized))| !*materialized), "{run}: query results {results:?}");
    let answers = run.query_answers();
    assert_eq!(answers.len(), 4, "{run}: query answers {answers:?}");
    for (at, (index, materialized, waited_ms)) in answers {
        assert!(
            !materialized && waited_ms >= lag,
            "{run}: index {index} answered {materialized} at {at} ms after {waited_ms} ms"
        );
    }
    // The checker names the four authz attempts whose permits leaked.
    let leaked = run.violating_tasks("no-permit-leak");
    assert_eq!(leaked, authz.iter().copied().collect(), "{run}: {:#?}", run.violations);
}

// ---------------------------------------------------------------------------
// A3: one shard target serializes execution (docs/real-bugs.md#a3)
// ---------------------------------------------------------------------------

#[test]
fn a3_single_shard_target_keeps_the_configured_concurrency() {
    check(&Regression {
        scenario: "a3-single-shard-concurrency",
        defect: Defect::SingleShardSerialization,
        plan: Vec::new,
        fixed: a3_fixed,
        broken: a3_broken,
        // One permit in use of four: every claim asks for fewer than the
        // worker says it has free, and due work waits.
        broken_violates: &["claim-progress", "no-permit-leak"],
    });
}

/// The eight builds' first grants, in time order.
fn a3_grants(run: &Run) -> Vec<At<Fence>> {
    let builds = run.created(TaskKind::IndexBuild);
    assert_eq!(builds.len(), 8, "{run}: builds created");
    let mut grants: Vec<At<Fence>> = builds
        .iter()
        .map(|&(_, t)| {
            let grants = run.grants(t);
            assert_eq!(grants.len(), 1, "{run}: t{t} granted {grants:?}");
            grants[0]
        })
        .collect();
    grants.sort();
    grants
}

fn a3_fixed(run: &Run) {
    let work = run.scenario.workload.work_min_ms;
    assert_eq!(run.started_concurrency(), BTreeSet::from([4]), "{run}: concurrency at start");
    assert_eq!(run.max_permits_in_use(), 4, "{run}: most permits in use at once");
    // Two waves of four: four builds start together, the other four when
    // the first wave is done.
    let grants = a3_grants(run);
    let first_wave = grants.iter().filter(|(at, _)| *at < work).count();
    assert_eq!(first_wave, 4, "{run}: builds started before the first one could end: {grants:?}");
    let results = run.query_results();
    assert_eq!(results.iter().filter(|(_, (_, m))| *m).count(), 8, "{run}: query results {results:?}");
}

fn a3_broken(run: &Run) {
    let work = run.scenario.workload.work_min_ms;
    assert_eq!(run.started_concurrency(), BTreeSet::from([1]), "{run}: concurrency at start");
    assert_eq!(run.max_permits_in_use(), 1, "{run}: most permits in use at once");
    // One build after another.
    let grants = a3_grants(run);
    for pair in grants.windows(2) {
        assert!(pair[1].0 >= pair[0].0 + work, "{run}: builds overlap: {pair:?}");
    }
    // Only the first two builds are done when the queries come at 45 s.
    let results = run.query_results();
    assert_eq!(results.len(), 8, "{run}: query results {results:?}");
    assert_eq!(results.iter().filter(|(_, (_, m))| *m).count(), 2, "{run}: query results {results:?}");
    // claim-progress names every build that waited behind the first one.
    let starved: BTreeSet<TaskId> = grants[1..].iter().map(|(_, f)| f.task).collect();
    assert_eq!(run.violating_tasks("claim-progress"), starved, "{run}: {:#?}", run.violations);
}

// ---------------------------------------------------------------------------
// B1: a zombie's stale completion (docs/real-bugs.md#b1)
// ---------------------------------------------------------------------------

/// p2 is down until 60 s, so p1 claims the job (at its 30 s store poll);
/// p1 hangs from 40 s to 720 s: silent past the 600 s dead timeout, cleanup
/// (p2's, at 660 s) releases the job and p2 claims it at attempt 2; p1
/// resumes while attempt 2 runs (300 s of work), and its attempt 1, whose
/// 300 s of work ran out during the pause, returns and completes.
fn b1_plan() -> Vec<FaultEvent> {
    vec![kill(2, 0, 60_000), pause(1, 40_000, 680_000)]
}

#[test]
fn b1_stale_completion_is_fenced_off() {
    check(&Regression {
        scenario: "b1-stale-completion",
        defect: Defect::UnfencedCompletion,
        plan: b1_plan,
        fixed: b1_fixed,
        broken: b1_broken,
        // The stale completion also takes the task from its healthy new owner.
        broken_violates: &["fenced-completion", "lease-revocation"],
    });
}

/// The job and its two attempts, checking the choreography common to both
/// runs; returns (job, attempt 1, attempt 2, time p1 resumed).
fn b1_attempts(run: &Run) -> (TaskId, At<Fence>, At<Fence>, u64) {
    let jobs = run.created(TaskKind::Job);
    assert_eq!(jobs.len(), 1, "{run}: jobs {jobs:?}");
    let job = jobs[0].1;
    let trace = || run.trace(job);
    let (g1, a1) = run.grant(job, 1);
    let (g2, a2) = run.grant(job, 2);
    assert_eq!(run.grants(job).len(), 2, "{run}: grants\n{}", trace());
    assert_eq!(a1.owner.proc, 1, "{run}: attempt 1\n{}", trace());
    assert_eq!(a2.owner.proc, 2, "{run}: attempt 2\n{}", trace());
    let paused = run.paused(1);
    let resumed = run.resumed(1);
    assert!(paused.len() == 1 && paused[0] > g1, "{run}: p1 paused {paused:?}, after its claim at {g1} ms");
    assert!(resumed.len() == 1 && resumed[0] > g2, "{run}: p1 resumed {resumed:?}, after attempt 2 at {g2} ms");
    let resumed = resumed[0];
    // Cleanup released attempt 1 because p1 was silent past the dead timeout.
    let releases = run.releases(job);
    assert_eq!(releases.len(), 1, "{run}: releases\n{}", trace());
    let (released, (fence, cause)) = releases[0];
    assert_eq!((fence, cause), (a1, ReleaseCause::DeadOwner), "{run}: release\n{}", trace());
    assert!(
        released >= paused[0] + run.scenario.engine.get().promises().dead_after_ms && released <= g2,
        "{run}\n{}",
        trace()
    );
    // p1's execution of attempt 1 returns only once p1 runs again.
    let (finished, failed) = run.finished(a1).unwrap_or_else(|| panic!("{run}: attempt 1 never returned\n{}", trace()));
    assert!(finished >= resumed && !failed, "{run}: attempt 1 returned at {finished} ms\n{}", trace());
    (job, (g1, a1), (g2, a2), resumed)
}

fn b1_fixed(run: &Run) {
    let (job, (_, a1), (_, a2), resumed) = b1_attempts(run);
    let trace = || run.trace(job);
    // Exactly one committed outcome: attempt 2's completion, with attempt 2's
    // retry budget and clock untouched (no failure, no retry time).
    let applied = run.applied(job);
    assert_eq!(applied.len(), 1, "{run}: applied writes\n{}", trace());
    let (completed, write) = applied[0];
    assert_eq!(write, (a2, WriteKind::Complete, 0, None), "{run}\n{}", trace());
    // The stale completion reached the store while attempt 2 still ran, and
    // was rejected as superseded.
    let rejected = run.rejected(job);
    let stale: Vec<_> = rejected.iter().filter(|(_, (f, ..))| *f == a1).collect();
    assert_eq!(stale.len(), 1, "{run}: writes of attempt 1 rejected\n{}", trace());
    let (at, (_, write, reason)) = *stale[0];
    assert_eq!((write, reason), (WriteKind::Complete, Refusal::Superseded), "{run}\n{}", trace());
    assert!(at >= resumed && at < completed, "{run}: stale completion at {at} ms\n{}", trace());
    // One callback, for attempt 2.
    assert_eq!(run.callbacks(job).into_iter().map(|(_, f)| f).collect::<Vec<_>>(), vec![a2], "{run}\n{}", trace());
}

fn b1_broken(run: &Run) {
    let (job, (_, a1), (_, a2), resumed) = b1_attempts(run);
    let trace = || run.trace(job);
    // The stale completion of attempt 1 finishes the task under attempt 2 and
    // publishes the callback; attempt 2's own completion is then refused.
    let completions = run.applied_of(job, WriteKind::Complete);
    assert_eq!(completions.iter().map(|(_, f)| *f).collect::<Vec<_>>(), vec![a1], "{run}\n{}", trace());
    assert!(completions[0].0 >= resumed, "{run}\n{}", trace());
    assert_eq!(run.callbacks(job).into_iter().map(|(_, f)| f).collect::<Vec<_>>(), vec![a1], "{run}\n{}", trace());
    let refused: Vec<_> = run.rejected(job).into_iter().map(|(_, w)| w).collect();
    assert_eq!(refused, vec![(a2, WriteKind::Complete, Refusal::Terminal)], "{run}\n{}", trace());
    assert_eq!(run.violating_tasks("fenced-completion"), BTreeSet::from([job]), "{run}: {:#?}", run.violations);
}

// ---------------------------------------------------------------------------
// C: repair hides an expired lease behind a live activity (docs/real-bugs.md#c)
// ---------------------------------------------------------------------------

/// Act 1: p1 and p3 down at 0 (p1 until 5 s, p3 until 20 s); p1 hangs from
/// 10 s to 40 s with its long poll open. Act 2: p3 down from 60 s and p1 from
/// 110 s (with a poll open), both until the heal at 120 s.
fn c_plan() -> Vec<FaultEvent> {
    vec![
        kill(1, 0, 5_000),
        kill(3, 0, 20_000),
        pause(1, 10_000, 30_000),
        kill(3, 60_000, 60_000),
        kill(1, 110_000, 10_000),
    ]
}

#[test]
fn c2_repair_reclaims_an_expired_lease_behind_a_live_activity() {
    check(&Regression {
        scenario: "c2-expired-lease-behind-activity",
        defect: Defect::RepairHidesExpiredLease,
        plan: c_plan,
        fixed: c_fixed,
        broken: c_broken,
        // At the store seam, by the first repair pass after the first
        // expiry (store-reply), and after the heal by the recovery bound.
        broken_violates: &["expired-lease-recovery", "store-reply"],
    });
}

/// The workflow run (group) every task of the scenario belongs to.
const WORKFLOW_RUN: u64 = 1;

/// The activity, wf1 and wf2 with their first grants, checking what both
/// runs share: p2 claims the activity; the hung p1's open poll claims wf1;
/// the dead p1's open poll claims wf2.
struct CTasks {
    activity: TaskId,
    wf1: At<Fence>,
    wf2: At<Fence>,
    /// When p1 resumed after its hang.
    resumed: u64,
}

fn c_tasks(run: &Run) -> CTasks {
    let activity = run.created(TaskKind::Activity);
    let wf = run.created(TaskKind::WorkflowTask);
    assert_eq!((activity.len(), wf.len()), (1, 2), "{run}: activity {activity:?}, workflow tasks {wf:?}");
    let (activity, wf1, wf2) = (activity[0].1, run.grant(wf[0].1, 1), run.grant(wf[1].1, 1));
    // wf1 is claimed for p1 while p1 is paused: its open poll did it.
    let (paused, resumed) = (run.paused(1), run.resumed(1));
    assert!(paused.len() == 1 && resumed.len() == 1, "{run}: p1 paused {paused:?}, resumed {resumed:?}");
    assert!(
        wf1.1.owner.proc == 1 && paused[0] < wf1.0 && wf1.0 < resumed[0],
        "{run}: wf1 {wf1:?}\n{}",
        run.trace(wf1.1.task)
    );
    // wf2 is claimed for p1 after p1 was killed: a dead owner's stale poll.
    let killed = run.killed(wf2.1.owner);
    assert!(wf2.1.owner.proc == 1 && killed.is_some_and(|k| k < wf2.0), "{run}: wf2 {wf2:?}, owner killed {killed:?}");
    CTasks { activity, wf1, wf2, resumed: resumed[0] }
}

/// The activity keeps its owner, attempt, lease and history: one grant, no
/// release, completed and published by attempt 1.
fn c_activity_untouched(run: &Run, activity: TaskId) {
    let trace = || run.trace(activity);
    let grants = run.grants(activity);
    assert_eq!(grants.len(), 1, "{run}: activity grants\n{}", trace());
    let a1 = grants[0].1;
    assert_eq!(a1.owner.proc, 2, "{run}: activity owner\n{}", trace());
    assert_eq!(run.releases(activity), vec![], "{run}: activity released\n{}", trace());
    assert_eq!(
        run.applied_of(activity, WriteKind::Complete).into_iter().map(|(_, f)| f).collect::<Vec<_>>(),
        vec![a1],
        "{run}\n{}",
        trace()
    );
    assert_eq!(run.callbacks(activity).into_iter().map(|(_, f)| f).collect::<Vec<_>>(), vec![a1], "{run}\n{}", trace());
}

/// The lease expiry of a workflow task's attempt 1.
fn c_expiry(run: &Run, (granted, _): At<Fence>) -> u64 {
    granted + run.scenario.engine.get().promises().lease_ttl.workflow_task_ms.expect("workflow tasks are leased")
}

fn c_fixed(run: &Run) {
    let c = c_tasks(run);
    let bound = run.scenario.bounds.recovery_bound_ms;
    for wf in [c.wf1, c.wf2] {
        let (_, a1) = wf;
        let task = a1.task;
        let trace = || run.trace(task);
        let expiry = c_expiry(run, wf);
        // Repair reclaims exactly the expired task, once (repair count 1) ...
        let releases = run.releases(task);
        assert_eq!(releases.len(), 1, "{run}: releases\n{}", trace());
        let (released, (fence, cause)) = releases[0];
        assert_eq!((fence, cause), (a1, ReleaseCause::Repair), "{run}\n{}", trace());
        assert!(released >= expiry, "{run}: released at {released} ms before expiry {expiry} ms\n{}", trace());
        let reclaims: Vec<_> =
            run.repair_decisions(WORKFLOW_RUN).into_iter().filter(|(_, (_, r))| r.contains(&task)).collect();
        assert_eq!(reclaims.len(), 1, "{run}: repair decisions reclaiming t{task}: {reclaims:?}");
        assert_eq!(reclaims[0].1 .1, vec![task], "{run}: repair reclaimed more than the expired task");
        // ... and a live replacement (another incarnation than the stale
        // owner) claims it at attempt 2 within the report's 30 s claim bound
        // after the expiry.
        let grants = run.grants(task);
        assert_eq!(grants.len(), 2, "{run}: grants\n{}", trace());
        let (granted, a2) = grants[1];
        let live = run.killed(a2.owner).is_none_or(|killed| killed > granted);
        assert!(a2.attempt == 2 && a2.owner != a1.owner && live, "{run}: attempt 2 {a2}\n{}", trace());
        assert!(granted <= expiry + bound, "{run}: attempt 2 at {granted} ms, expiry {expiry} ms\n{}", trace());
        assert_eq!(
            run.applied_of(task, WriteKind::Complete).into_iter().map(|(_, f)| f).collect::<Vec<_>>(),
            vec![a2],
            "{run}\n{}",
            trace()
        );
        assert_eq!(run.callbacks(task).into_iter().map(|(_, f)| f).collect::<Vec<_>>(), vec![a2], "{run}\n{}", trace());
    }
    // When the hung p1 resumes, its stale attempt of wf1 either never starts
    // (its lease is gone and the store refuses to renew it) or runs and its
    // late completion is rejected.
    let (_, a1) = c.wf1;
    let trace = || run.trace(a1.task);
    let dropped = run.events().find(|(_, e)| matches!(e, Event::AttemptDropped { fence } if *fence == a1));
    match (run.finished(a1), dropped) {
        (None, Some((at, _))) => assert!(at >= c.resumed, "{run}: dropped before the resume\n{}", trace()),
        (Some((finished, _)), None) => {
            assert!(finished >= c.resumed, "{run}\n{}", trace());
            let late: Vec<_> = run
                .rejected(a1.task)
                .into_iter()
                .filter(|(_, (f, w, _))| *f == a1 && *w == WriteKind::Complete)
                .collect();
            assert_eq!(late.len(), 1, "{run}: late completion of attempt 1\n{}", trace());
            assert!(late[0].0 >= c.resumed, "{run}\n{}", trace());
        }
        other => panic!("{run}: p1's stale attempt neither ran once nor was dropped once: {other:?}\n{}", trace()),
    }
    c_activity_untouched(run, c.activity);
}

fn c_broken(run: &Run) {
    let c = c_tasks(run);
    let activity_done = run.applied_of(c.activity, WriteKind::Complete)[0].0;
    for wf in [c.wf1, c.wf2] {
        let (_, a1) = wf;
        let task = a1.task;
        let trace = || run.trace(task);
        let expiry = c_expiry(run, wf);
        // No claim within 20 s after the expiry: repair keeps answering "not
        // needed", judging the run by its older, healthy activity.
        let late_grants: Vec<_> =
            run.grants(task).into_iter().filter(|(at, _)| *at >= expiry && *at <= expiry + 20_000).collect();
        assert_eq!(late_grants, vec![], "{run}: claims after expiry {expiry} ms\n{}", trace());
        let decisions: Vec<_> = run
            .repair_decisions(WORKFLOW_RUN)
            .into_iter()
            .filter(|(at, _)| *at >= expiry && *at <= expiry + 20_000)
            .collect();
        assert!(
            !decisions.is_empty() && decisions.iter().all(|(_, (needed, _))| !needed),
            "{run}: repair decisions {decisions:?}"
        );
        // Repair reclaims nothing of the run while the activity is leased.
        let repaired: Vec<_> = run
            .releases(task)
            .into_iter()
            .filter(|(at, (_, cause))| *cause == ReleaseCause::Repair && *at < activity_done)
            .collect();
        assert_eq!(repaired, vec![], "{run}\n{}", trace());
    }
    // Nothing took wf1 from the hung p1: back at 40 s, it renews the expired
    // lease and completes attempt 1.
    let (_, a1) = c.wf1;
    let completions = run.applied_of(a1.task, WriteKind::Complete);
    assert!(
        matches!(completions[..], [(at, f)] if f == a1 && at >= c.resumed),
        "{run}: completions of wf1 {completions:?}\n{}",
        run.trace(a1.task)
    );
    // The dead owner's wf2 stays leased (expired) until the activity ends.
    let (_, a1) = c.wf2;
    let released = run.releases(a1.task);
    assert!(
        released.first().is_some_and(|(at, _)| *at >= activity_done),
        "{run}: activity done at {activity_done} ms\n{}",
        run.trace(a1.task)
    );
    assert_eq!(
        run.violating_tasks("expired-lease-recovery"),
        BTreeSet::from([a1.task]),
        "{run}: {:#?}",
        run.violations
    );
    c_activity_untouched(run, c.activity);
}

// ---------------------------------------------------------------------------
// A fix3 / E2E36: a finalization pass that hangs
// ---------------------------------------------------------------------------

/// Every maintenance pass reaching the store from 20 s to 60 s hangs.
fn e2e36_plan() -> Vec<FaultEvent> {
    vec![FaultEvent { rate: 1.0, ..fault(FaultKind::HungMaintenance, 20_000, 40_000) }]
}

#[test]
fn e2e36_a_stuck_finalization_pass_does_not_keep_later_indexes_unmaterialized() {
    check(&Regression {
        scenario: "e2e36-stuck-finalization",
        defect: Defect::UncancelledMaintenance,
        plan: e2e36_plan,
        fixed: e2e36_fixed,
        broken: e2e36_broken,
        broken_violates: &["materialization"],
    });
}

/// The queries of the indexes created after the heal: (index, materialized).
fn e2e36_late_answers(run: &Run) -> Vec<(IndexId, bool)> {
    let results: Vec<(IndexId, bool)> =
        run.query_results().into_iter().map(|(_, r)| r).filter(|(index, _)| *index >= 5).collect();
    assert_eq!(results.len(), 4, "{run}: queries of the late indexes {results:?}");
    results
}

fn e2e36_fixed(run: &Run) {
    let heal = run.heal_ms();
    // Passes hung in the window and were cut by their statement timeout ...
    let hung = run.injections(FaultKind::HungMaintenance);
    assert!(!hung.is_empty(), "{run}: no pass hung");
    // ... every index was finalized: the early ones soon after the window,
    // the late ones in time for their query.
    for index in [1, 2] {
        let at = run.materialized(index).unwrap_or_else(|| panic!("{run}: index {index} never materialized"));
        assert!(at < heal, "{run}: index {index} materialized at {at} ms, after the heal at {heal} ms");
    }
    assert!(e2e36_late_answers(run).iter().all(|(_, m)| *m), "{run}: {:?}", e2e36_late_answers(run));
}

fn e2e36_broken(run: &Run) {
    // The first hung index pass stays in flight: the worker keeps saying so,
    // with ever larger ages, and no index is finalized after it.
    let ages: Vec<u64> = run
        .events()
        .filter_map(|(_, e)| match e {
            Event::MaintenanceStillRunning { kind: leasesim_vocab::task::MaintenanceKind::Index, age_ms, .. } => {
                Some(*age_ms)
            }
            _ => None,
        })
        .collect();
    assert!(ages.len() > 10 && ages.windows(2).all(|w| w[0] < w[1]), "{run}: still-running ages {ages:?}");
    assert!(ages.last().is_some_and(|&a| a > 120_000), "{run}: the pass was not stuck for good: {ages:?}");
    assert!(e2e36_late_answers(run).iter().all(|(_, m)| !*m), "{run}: {:?}", e2e36_late_answers(run));
}
