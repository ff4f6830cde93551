//! A small history builder and the one check function every checker's
//! data-driven cases run through.

use super::{check, Report};
use crate::history::{Entry, Record, WorldEvent};
use crate::scenario::Scenario;
use leasesim::config::MaintenanceKind;
use leasesim::event::{Event, ReleaseCause, WriteKind};
use leasesim::handler::TaskError;
use leasesim::ids::{Fence, IndexId, Owner, ProcId, StageRef, TaskId};
use leasesim::task::{TaskKind, TaskSpec};

/// The scenario of every case: 2 permits, finalize deadline 1000 ms, idle
/// poll 500 ms; claim bound 1000, recovery bound 2000, permit slack 500,
/// materialize bound 3000, completion bound 5000.
pub const SCENARIO: &str = r#"
name = "checker-cases"
description = "the world of the checkers' unit cases"

[topology]
workers = 2

[engine]
concurrency = 2
finalize_deadline_ms = 1000
idle_poll_ms = 500

[workload]
enqueue_window_ms = 1000
jobs = 1

[phases]
fault_phase_ms = 10000
heal_phase_ms = 10000

[bounds]
claim_bound_ms = 1000
recovery_bound_ms = 2000
permit_release_slack_ms = 500
materialize_bound_ms = 3000
completion_bound_ms = 5000
"#;

pub fn scenario() -> Scenario {
    crate::scenario::parse(SCENARIO).expect("the checker cases' scenario parses")
}

pub fn o(proc: ProcId, incarnation: u32) -> Owner {
    Owner { proc, incarnation }
}

fn fence(task: TaskId, attempt: u32, owner: Owner) -> Fence {
    Fence { task, attempt, owner }
}

/// What a case expects of the whole report.
#[derive(Debug, Clone, Copy)]
pub enum Expect {
    /// No checker finds anything.
    Pass,
    /// This invariant is violated on this task (`None`: no task).
    Violates(&'static str, Option<TaskId>),
}

pub use Expect::{Pass, Violates};

/// The one check function of every case.
pub fn run_case(name: &str, history: Vec<Record>, expect: Expect) -> Report {
    let report = check(&scenario(), &history);
    match expect {
        Expect::Pass => {
            assert!(report.violations.is_empty(), "{name}: expected no violation, got {:#?}", report.violations);
        }
        Expect::Violates(invariant, task) => {
            assert!(
                report.violations.iter().any(|v| v.invariant == invariant && v.task == task),
                "{name}: expected a {invariant} violation on task {task:?}, got {:#?}",
                report.violations
            );
        }
    }
    report
}

/// `cases! { name: history => expect; ... }` makes one test per case, each
/// run through [`run_case`].
macro_rules! cases {
    ($($name:ident: $history:expr => $expect:expr;)+) => {
        $(
            #[test]
            fn $name() {
                $crate::check::testkit::run_case(stringify!($name), $history, $expect);
            }
        )+
    };
}
pub(crate) use cases;

/// A history under construction; every record is stamped with the time set
/// by the last `at`.
#[derive(Debug, Default)]
pub struct H {
    now: u64,
    records: Vec<Record>,
}

impl H {
    pub fn new() -> Self {
        H::default()
    }

    pub fn at(mut self, ms: u64) -> Self {
        assert!(ms >= self.now, "history time goes backwards: {ms} < {}", self.now);
        self.now = ms;
        self
    }

    pub fn build(self) -> Vec<Record> {
        self.records
    }

    fn world(mut self, w: WorldEvent) -> Self {
        self.records.push(Record { at_ms: self.now, entry: Entry::World(w) });
        self
    }

    fn ev(mut self, e: Event) -> Self {
        self.records.push(Record { at_ms: self.now, entry: Entry::Engine(e) });
        self
    }

    // ---- world ----
    pub fn up(self, owner: Owner) -> Self {
        self.world(WorldEvent::ProcessUp { owner })
    }
    pub fn killed(self, owner: Owner) -> Self {
        self.world(WorldEvent::ProcessKilled { owner })
    }
    pub fn paused(self, proc: ProcId) -> Self {
        self.world(WorldEvent::ProcessPaused { proc })
    }
    pub fn resumed(self, proc: ProcId) -> Self {
        self.world(WorldEvent::ProcessResumed { proc })
    }
    pub fn heal(self) -> Self {
        self.world(WorldEvent::Heal)
    }
    pub fn end(self) -> Self {
        self.world(WorldEvent::End)
    }

    // ---- store ----
    pub fn created(self, task: TaskId, kind: TaskKind) -> Self {
        let at = self.now;
        self.created_spec(task, TaskSpec { kind, group: None, stage: None, index: None, not_before_ms: at })
    }
    pub fn created_index(self, task: TaskId, index: IndexId) -> Self {
        let at = self.now;
        let spec =
            TaskSpec { kind: TaskKind::IndexBuild, group: None, stage: None, index: Some(index), not_before_ms: at };
        self.created_spec(task, spec)
    }
    pub fn created_stage(self, task: TaskId, pipeline: u64, index: u32) -> Self {
        let at = self.now;
        let stage = StageRef { pipeline, index };
        let spec = TaskSpec {
            kind: TaskKind::Stage,
            group: Some(pipeline),
            stage: Some(stage),
            index: None,
            not_before_ms: at,
        };
        self.created_spec(task, spec)
    }
    pub fn created_spec(self, task: TaskId, spec: TaskSpec) -> Self {
        let retry_at_ms = spec.not_before_ms;
        self.ev(Event::TaskCreated { task, spec, retry_at_ms })
    }
    pub fn granted(self, task: TaskId, attempt: u32, owner: Owner, expiry: Option<u64>) -> Self {
        self.ev(Event::LeaseGranted {
            fence: fence(task, attempt, owner),
            kind: TaskKind::Job,
            lease_expiry_ms: expiry,
            retry_at_ms: 0,
        })
    }
    pub fn renewed(self, task: TaskId, attempt: u32, owner: Owner, expiry: u64) -> Self {
        self.ev(Event::LeaseRenewed { fence: fence(task, attempt, owner), lease_expiry_ms: expiry })
    }
    pub fn released(self, task: TaskId, attempt: u32, owner: Owner) -> Self {
        self.ev(Event::LeaseReleased { fence: fence(task, attempt, owner), cause: ReleaseCause::Expired })
    }
    pub fn completed(self, task: TaskId, attempt: u32, owner: Owner) -> Self {
        self.ev(Event::WriteApplied {
            fence: fence(task, attempt, owner),
            write: WriteKind::Complete,
            retries: 0,
            retry_at_ms: None,
            terminal: true,
        })
    }
    /// A committed failure: retried at `retry_at` (`None`: the task died).
    pub fn failed(self, task: TaskId, attempt: u32, owner: Owner, retries: u32, retry_at: Option<u64>) -> Self {
        self.ev(Event::WriteApplied {
            fence: fence(task, attempt, owner),
            write: WriteKind::Fail,
            retries,
            retry_at_ms: retry_at,
            terminal: retry_at.is_none(),
        })
    }
    pub fn cleared_link(self, task: TaskId, attempt: u32, owner: Owner) -> Self {
        self.ev(Event::WriteApplied {
            fence: fence(task, attempt, owner),
            write: WriteKind::ClearStageLink,
            retries: 0,
            retry_at_ms: None,
            terminal: false,
        })
    }
    pub fn stage_done(self, pipeline: u64, index: u32, task: TaskId) -> Self {
        self.ev(Event::StageDone { stage: StageRef { pipeline, index }, task })
    }
    pub fn materialized(self, index: IndexId, task: TaskId) -> Self {
        self.ev(Event::IndexMaterialized { index, task })
    }
    pub fn answered(self, index: IndexId, materialized: bool) -> Self {
        self.ev(Event::QueryAnswered { index, materialized, waited_ms: 0 })
    }

    // ---- workers ----
    pub fn permit(self, owner: Owner, task: TaskId, attempt: u32) -> Self {
        self.ev(Event::PermitAcquired { owner, task, attempt })
    }
    pub fn unpermit(self, owner: Owner, task: TaskId, attempt: u32) -> Self {
        self.ev(Event::PermitReleased { owner, task, attempt })
    }
    pub fn started(self, task: TaskId, attempt: u32, owner: Owner) -> Self {
        self.ev(Event::ExecutionStarted { fence: fence(task, attempt, owner) })
    }
    pub fn finished(self, task: TaskId, attempt: u32, owner: Owner, ok: bool) -> Self {
        let error = (!ok).then_some(TaskError::Conflict);
        self.ev(Event::ExecutionFinished { fence: fence(task, attempt, owner), error })
    }
    pub fn callback(self, task: TaskId, attempt: u32, owner: Owner) -> Self {
        self.ev(Event::CallbackPublished { fence: fence(task, attempt, owner) })
    }
    pub fn pass_started(self, owner: Owner, kind: MaintenanceKind, pass: u64) -> Self {
        self.ev(Event::MaintenanceStarted { owner, kind, pass })
    }
    pub fn pass_ended(self, owner: Owner, kind: MaintenanceKind, pass: u64) -> Self {
        self.ev(Event::MaintenanceEnded { owner, kind, pass })
    }
    pub fn retry_planned(self, owner: Owner, task: TaskId, retries: u32, wake_at: u64) -> Self {
        self.ev(Event::RetryPlanned { owner, task, retries, wake_at_ms: wake_at })
    }

    /// One whole successful attempt of `task` on `owner`, from `at` on:
    /// grant, permit, run for 100 ms, complete, callback, permit back.
    pub fn attempt_ok(self, at: u64, task: TaskId, attempt: u32, owner: Owner) -> Self {
        self.at(at)
            .granted(task, attempt, owner, Some(at + 5_000))
            .permit(owner, task, attempt)
            .started(task, attempt, owner)
            .at(at + 100)
            .finished(task, attempt, owner, true)
            .completed(task, attempt, owner)
            .callback(task, attempt, owner)
            .unpermit(owner, task, attempt)
    }
}

/// The report of a history with no violation must still show every checker
/// at work.
#[test]
fn every_checker_evaluates_a_plain_history() {
    let history = H::new()
        .up(o(1, 1))
        .created(1, TaskKind::Job)
        .attempt_ok(10, 1, 1, o(1, 1))
        .at(200)
        .heal()
        .at(20_000)
        .end()
        .build();
    let report = run_case("every_checker_evaluates_a_plain_history", history, Pass);
    for (name, _) in super::INVARIANTS {
        let n = report.checks.get(*name).copied().unwrap_or(0);
        assert!(n > 0, "{name} never evaluated: {:?}", report.checks);
    }
    assert_eq!(report.checks.len(), super::INVARIANTS.len());
}
