//! Unit tests of the store state machine ([`Store::apply`]): fencing of
//! attempt-scoped writes, outcomes (complete, fail, retry backoff, death),
//! completion effects (indexes, pipeline stages), release of heartbeat-owned
//! tasks, reclaim of expired leases, and group repair.
//!
//! Fencing is data-driven: a table of worlds (each yields a fence and the
//! rejection it must get) is crossed with every fenced write and run through
//! one check that compares the whole store before and after.

use super::*;
use crate::config::MaintenanceKind;
use std::sync::Mutex;

const A: Owner = Owner { proc: 1, incarnation: 0 };
const B: Owner = Owner { proc: 2, incarnation: 0 };
const C: Owner = Owner { proc: 3, incarnation: 0 };
/// `A` after a restart.
const A1: Owner = Owner { proc: 1, incarnation: 1 };
/// A newer incarnation of `B`'s process.
const B4: Owner = Owner { proc: 2, incarnation: 4 };
/// The process that runs maintenance requests (never owns tasks).
const JANITOR: Owner = Owner { proc: 99, incarnation: 0 };

/// An observer that keeps every event.
#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<Event>>,
}

impl Observer for Recorder {
    fn emit(&self, event: Event) {
        self.events.lock().expect("recorder lock").push(event);
    }
}

impl Recorder {
    /// The events emitted since the last call.
    fn take(&self) -> Vec<Event> {
        std::mem::take(&mut *self.events.lock().expect("recorder lock"))
    }
}

/// A store, its observer and the store time of the next request.
struct Harness {
    store: Store,
    obs: Recorder,
    now: u64,
}

impl Harness {
    fn new() -> Self {
        Harness::with(EngineConfig::default())
    }

    fn with(cfg: EngineConfig) -> Self {
        Harness { store: Store::new(cfg), obs: Recorder::default(), now: 0 }
    }

    fn cfg(&self) -> EngineConfig {
        self.store.cfg.clone()
    }

    fn at(&mut self, now: u64) -> &mut Self {
        assert!(now >= self.now, "store time goes forward");
        self.now = now;
        self
    }

    fn apply(&mut self, req: Request) -> Response {
        self.store.apply(self.now, &req, &self.obs)
    }

    fn enqueue(&mut self, spec: TaskSpec) -> TaskId {
        match self.apply(Request::Enqueue { spec, key: None }) {
            Response::Enqueued { task } => task,
            other => panic!("enqueue answered {other:?}"),
        }
    }

    fn enqueue_kind(&mut self, kind: TaskKind, group: Option<GroupId>) -> TaskId {
        self.enqueue(spec(kind, group))
    }

    fn claim(&mut self, owner: Owner, max: u32) -> Vec<Grant> {
        match self.apply(Request::Claim { owner, max, wait_ms: 0 }) {
            Response::Claimed { grants } => grants,
            other => panic!("claim answered {other:?}"),
        }
    }

    fn claim_one(&mut self, owner: Owner) -> Fence {
        let grants = self.claim(owner, 1);
        assert_eq!(grants.len(), 1, "expected one grant, got {grants:?}");
        grants[0].fence
    }

    fn heartbeat(&mut self, owner: Owner) {
        assert_eq!(self.apply(Request::Heartbeat { owner }), Response::Ack);
    }

    fn released(&mut self, req: Request) -> u32 {
        match self.apply(req) {
            Response::Released { tasks } => tasks,
            other => panic!("release answered {other:?}"),
        }
    }

    fn task(&self, id: TaskId) -> Task {
        self.store.task(id).cloned().expect("task exists")
    }

    /// The whole store, for "nothing changed" comparisons.
    fn snapshot(&self) -> String {
        format!("{:?}", self.store)
    }
}

fn spec(kind: TaskKind, group: Option<GroupId>) -> TaskSpec {
    TaskSpec { kind, group, stage: None, index: None, not_before_ms: 0 }
}

// ---------------------------------------------------------------------------
// Fencing: rejected writes change nothing.
// ---------------------------------------------------------------------------

/// A fenced write under test.
#[derive(Debug, Clone, Copy)]
enum Write {
    Complete,
    Fail(TaskError),
    Renew,
    LeaseValid,
}

const WRITES: [Write; 5] =
    [Write::Complete, Write::Fail(TaskError::Conflict), Write::Fail(TaskError::Fatal), Write::Renew, Write::LeaseValid];

impl Write {
    fn request(self, fence: Fence) -> Request {
        match self {
            Write::Complete => Request::Complete { fence },
            Write::Fail(error) => Request::Fail { fence, error },
            Write::Renew => Request::Renew { fence },
            Write::LeaseValid => Request::LeaseValid { fence },
        }
    }

    /// The write kind its rejection is reported as (`None`: a lease check,
    /// which answers `valid: false` instead of a rejection).
    fn kind(self) -> Option<WriteKind> {
        match self {
            Write::Complete => Some(WriteKind::Complete),
            Write::Fail(_) => Some(WriteKind::Fail),
            Write::Renew => Some(WriteKind::Renew),
            Write::LeaseValid => None,
        }
    }
}

/// A world in which some fence must be refused.
#[derive(Debug, Clone, Copy)]
enum World {
    /// Heartbeat-owned job: owner A went silent, ReleaseDead released the
    /// task, B re-claimed it at attempt 2; the fence is A's attempt 1.
    StaleAfterReleaseDead,
    /// Ungrouped lease expired, ReclaimExpired released it, B re-claimed it.
    StaleAfterReclaimExpired,
    /// Grouped workflow task expired, Repair released it, B re-claimed it.
    StaleAfterRepair,
    /// Reclaimed twice: B's attempt 2 against C's current attempt 3.
    StaleAfterTwoReclaims,
    /// Released by ReclaimExpired and not re-claimed yet: same attempt, but
    /// the task is ready, so the old owner is no owner.
    ReleasedNotReclaimed,
    /// The current attempt, with another process as owner.
    WrongOwner,
    /// The current attempt, with a newer incarnation of the owner's process.
    WrongIncarnation,
    /// A forged attempt number beyond the current one.
    FutureAttempt,
    /// A task that never existed.
    Missing,
    /// The owner's own fence after it completed the task.
    TerminalDone,
    /// The owner's own fence after a fatal failure.
    TerminalDead,
    /// A stale fence of another owner on a done task: terminal comes first.
    TerminalBeforeSuperseded,
}

const WORLDS: [World; 12] = [
    World::StaleAfterReleaseDead,
    World::StaleAfterReclaimExpired,
    World::StaleAfterRepair,
    World::StaleAfterTwoReclaims,
    World::ReleasedNotReclaimed,
    World::WrongOwner,
    World::WrongIncarnation,
    World::FutureAttempt,
    World::Missing,
    World::TerminalDone,
    World::TerminalDead,
    World::TerminalBeforeSuperseded,
];

/// A world built: the fence to refuse, the expected reason, and the current
/// attempt's fence if the task is still leased to someone.
struct Case {
    h: Harness,
    fence: Fence,
    reason: Rejection,
    current: Option<Fence>,
}

fn build(world: World) -> Case {
    let mut h = Harness::new();
    let cfg = h.cfg();
    let ttl = |kind| cfg.lease_ttl.for_kind(kind).expect("leased kind");
    let (fence, reason, current) = match world {
        World::StaleAfterReleaseDead => {
            h.heartbeat(A);
            let id = h.enqueue_kind(TaskKind::Job, None);
            let stale = h.claim_one(A);
            h.at(cfg.dead_after_ms + 1).heartbeat(B);
            assert_eq!(h.released(Request::ReleaseDead { by: JANITOR }), 1);
            let current = h.claim_one(B);
            assert_eq!((current.task, current.attempt), (id, 2));
            (stale, Rejection::Superseded, Some(current))
        }
        World::StaleAfterReclaimExpired => {
            h.enqueue_kind(TaskKind::AuthzMaterialization, None);
            let stale = h.claim_one(A);
            h.at(ttl(TaskKind::AuthzMaterialization));
            assert_eq!(h.released(Request::ReclaimExpired { by: JANITOR }), 1);
            let current = h.claim_one(B);
            assert_eq!(current.attempt, 2);
            (stale, Rejection::Superseded, Some(current))
        }
        World::StaleAfterRepair => {
            h.enqueue_kind(TaskKind::WorkflowTask, Some(7));
            let stale = h.claim_one(A);
            h.at(ttl(TaskKind::WorkflowTask));
            assert_eq!(h.released(Request::Repair { by: JANITOR }), 1);
            let current = h.claim_one(B);
            assert_eq!(current.attempt, 2);
            (stale, Rejection::Superseded, Some(current))
        }
        World::StaleAfterTwoReclaims => {
            h.enqueue_kind(TaskKind::IndexBuild, None);
            let ttl = ttl(TaskKind::IndexBuild);
            h.claim_one(A);
            h.at(ttl);
            assert_eq!(h.released(Request::ReclaimExpired { by: JANITOR }), 1);
            let stale = h.claim_one(B);
            h.at(2 * ttl);
            assert_eq!(h.released(Request::ReclaimExpired { by: JANITOR }), 1);
            let current = h.claim_one(C);
            assert_eq!((stale.attempt, current.attempt), (2, 3));
            (stale, Rejection::Superseded, Some(current))
        }
        World::ReleasedNotReclaimed => {
            h.enqueue_kind(TaskKind::IndexBuild, None);
            let stale = h.claim_one(A);
            h.at(ttl(TaskKind::IndexBuild));
            assert_eq!(h.released(Request::ReclaimExpired { by: JANITOR }), 1);
            (stale, Rejection::NotOwner, None)
        }
        World::WrongOwner => {
            h.enqueue_kind(TaskKind::IndexBuild, None);
            let current = h.claim_one(A);
            (Fence { owner: C, ..current }, Rejection::NotOwner, Some(current))
        }
        World::WrongIncarnation => {
            h.enqueue_kind(TaskKind::Job, None);
            let current = h.claim_one(A);
            (Fence { owner: A1, ..current }, Rejection::NotOwner, Some(current))
        }
        World::FutureAttempt => {
            h.enqueue_kind(TaskKind::Activity, Some(3));
            let current = h.claim_one(A);
            let forged = Fence { attempt: current.attempt + 1, ..current };
            (forged, Rejection::Superseded, Some(current))
        }
        World::Missing => {
            let id = h.enqueue_kind(TaskKind::IndexBuild, None);
            let current = h.claim_one(A);
            let forged = Fence { task: id + 100, ..current };
            (forged, Rejection::Missing, Some(current))
        }
        World::TerminalDone => {
            h.enqueue_kind(TaskKind::IndexBuild, None);
            let own = h.claim_one(A);
            assert!(matches!(h.apply(Request::Complete { fence: own }), Response::Applied { .. }));
            (own, Rejection::Terminal, None)
        }
        World::TerminalDead => {
            h.enqueue_kind(TaskKind::Stage, None);
            let own = h.claim_one(A);
            let fatal = Request::Fail { fence: own, error: TaskError::Fatal };
            assert!(matches!(h.apply(fatal), Response::Applied { .. }));
            assert_eq!(h.task(own.task).state, TaskState::Dead);
            (own, Rejection::Terminal, None)
        }
        World::TerminalBeforeSuperseded => {
            h.enqueue_kind(TaskKind::IndexBuild, None);
            let stale = h.claim_one(A);
            h.at(ttl(TaskKind::IndexBuild));
            assert_eq!(h.released(Request::ReclaimExpired { by: JANITOR }), 1);
            let current = h.claim_one(B);
            assert!(matches!(h.apply(Request::Complete { fence: current }), Response::Applied { .. }));
            (stale, Rejection::Terminal, None)
        }
    };
    Case { h, fence, reason, current }
}

/// The one check of the fencing table: `write` with the world's fence is
/// refused for the world's reason, reported to the observer, and changes
/// nothing at all; the current owner (if any) still holds a valid lease.
fn check_refused(world: World, write: Write) {
    let Case { mut h, fence, reason, current } = build(world);
    let label = format!("{world:?} / {write:?} with {fence}");
    h.obs.take();
    let task_before = h.store.task(fence.task).cloned();
    let store_before = h.snapshot();

    let resp = h.apply(write.request(fence));
    let events = h.obs.take();
    let retried_completion = matches!(world, World::TerminalDone) && write.kind() == Some(WriteKind::Complete);
    match write.kind() {
        // The completing attempt's own retry: applied again, idempotent.
        Some(_) if retried_completion => {
            assert!(matches!(resp, Response::Applied { .. }), "{label}: {resp:?}");
            assert_eq!(events, vec![], "{label}");
        }
        Some(kind) => {
            assert_eq!(resp, Response::Rejected { reason }, "{label}");
            let expected = Event::WriteRejected { fence, write: kind, reason };
            assert_eq!(events, vec![expected], "{label}");
        }
        None => {
            assert_eq!(resp, Response::Valid { valid: false }, "{label}");
            assert_eq!(events, vec![Event::LeaseChecked { fence, valid: false }], "{label}");
        }
    }
    assert_eq!(h.store.task(fence.task).cloned(), task_before, "{label}: task changed");
    assert_eq!(h.snapshot(), store_before, "{label}: store changed");

    if let Some(current) = current {
        let check = h.apply(Request::LeaseValid { fence: current });
        assert_eq!(check, Response::Valid { valid: true }, "{label}: current owner lost its lease");
    }
}

#[test]
fn fencing_refuses_stale_forged_missing_and_terminal_writes_without_effect() {
    for world in WORLDS {
        for write in WRITES {
            check_refused(world, write);
        }
    }
}

#[test]
fn fencing_reason_precedence() {
    // missing > terminal > superseded > not-owner, checked directly.
    let mut h = Harness::new();
    let id = h.enqueue_kind(TaskKind::IndexBuild, None);
    let never_claimed = Fence { task: id, attempt: 0, owner: A };
    assert_eq!(h.store.check_fence(&never_claimed), Err(Rejection::NotOwner));
    let f = h.claim_one(A);
    assert_eq!(h.store.check_fence(&f), Ok(()));
    let forged = Fence { attempt: 5, owner: B, ..f };
    assert_eq!(h.store.check_fence(&forged), Err(Rejection::Superseded));
    h.apply(Request::Complete { fence: f });
    assert_eq!(h.store.check_fence(&forged), Err(Rejection::Terminal));
    assert_eq!(h.store.check_fence(&Fence { task: id + 1, ..f }), Err(Rejection::Missing));
}

// ---------------------------------------------------------------------------
// The current attempt's writes apply.
// ---------------------------------------------------------------------------

#[test]
fn current_attempt_renew_lease_valid_and_complete_apply_for_every_kind() {
    for kind in TaskKind::ALL {
        let mut h = Harness::new();
        let ttl = h.cfg().lease_ttl.for_kind(kind);
        let id = h.enqueue_kind(kind, None);
        h.at(1_000);
        let grants = h.claim(A, 5);
        let expected_grant =
            Grant { fence: Fence { task: id, attempt: 1, owner: A }, kind, lease_expiry_ms: ttl.map(|t| 1_000 + t) };
        assert_eq!(grants, vec![expected_grant.clone()], "{kind:?}");
        let f = expected_grant.fence;
        h.obs.take();

        h.at(2_000);
        let renewed = h.apply(Request::Renew { fence: f });
        let events = h.obs.take();
        match ttl {
            Some(t) => {
                assert_eq!(renewed, Response::Renewed { lease_expiry_ms: 2_000 + t }, "{kind:?}");
                assert_eq!(h.task(id).lease_expiry_ms, Some(2_000 + t), "{kind:?}");
                let expected = Event::LeaseRenewed { fence: f, lease_expiry_ms: 2_000 + t };
                assert_eq!(events, vec![expected], "{kind:?}");
            }
            None => {
                // Heartbeat-owned: the lease never runs out while the owner lives.
                assert_eq!(renewed, Response::Renewed { lease_expiry_ms: u64::MAX }, "{kind:?}");
                assert_eq!(h.task(id).lease_expiry_ms, None, "{kind:?}");
                assert!(events.is_empty(), "{kind:?}: {events:?}");
            }
        }

        assert_eq!(h.apply(Request::LeaseValid { fence: f }), Response::Valid { valid: true });
        assert_eq!(h.obs.take(), vec![Event::LeaseChecked { fence: f, valid: true }]);

        h.at(3_000);
        let done = h.apply(Request::Complete { fence: f });
        assert_eq!(done, Response::Applied { retries: 0, retry_at_ms: None }, "{kind:?}");
        let t = h.task(id);
        assert_eq!(
            (t.state, t.owner, t.attempt, t.lease_expiry_ms, t.updated_ms),
            (TaskState::Done, None, 1, None, 3_000),
            "{kind:?}"
        );
        let applied =
            Event::WriteApplied { fence: f, write: WriteKind::Complete, retries: 0, retry_at_ms: None, terminal: true };
        assert_eq!(h.obs.take(), vec![applied], "{kind:?}");
        // Done is absorbing: nothing claims it again.
        h.at(10_000_000);
        assert!(h.claim(B, 10).is_empty(), "{kind:?}");
    }
}

#[test]
fn lease_valid_is_false_once_the_lease_ran_out_even_before_reclaim() {
    let mut h = Harness::new();
    h.enqueue_kind(TaskKind::WorkflowTask, None);
    let f = h.claim_one(A);
    let expiry = h.task(f.task).lease_expiry_ms.expect("leased kind");
    h.at(expiry - 1);
    assert_eq!(h.apply(Request::LeaseValid { fence: f }), Response::Valid { valid: true });
    h.at(expiry);
    assert_eq!(h.apply(Request::LeaseValid { fence: f }), Response::Valid { valid: false });
    // The fence itself still holds until the lease is reclaimed: a renewal
    // extends the lease and makes it valid again.
    let renewed = h.apply(Request::Renew { fence: f });
    let ttl = h.cfg().lease_ttl.workflow_task_ms.unwrap();
    assert_eq!(renewed, Response::Renewed { lease_expiry_ms: expiry + ttl });
    assert_eq!(h.apply(Request::LeaseValid { fence: f }), Response::Valid { valid: true });
}

/// Retry backoff per config: the backoff after the n-th failure, written out
/// by hand (base * 2^(n-1), capped); one failure more than there are entries
/// makes the task dead.
fn backoff_cases() -> Vec<(&'static str, EngineConfig, Vec<u64>)> {
    let tight = EngineConfig { retry_base_ms: 1_000, retry_cap_ms: 3_000, max_retries: 3, ..EngineConfig::default() };
    let no_retry = EngineConfig { max_retries: 0, ..EngineConfig::default() };
    vec![
        ("default", EngineConfig::default(), vec![5_000, 10_000, 20_000, 40_000, 60_000]),
        ("tight", tight, vec![1_000, 2_000, 3_000]),
        ("no-retry", no_retry, vec![]),
    ]
}

#[test]
fn fail_backs_off_retries_and_dies_after_max_retries() {
    for (name, cfg, backoffs) in backoff_cases() {
        assert_eq!(cfg.max_retries as usize, backoffs.len(), "{name}");
        let mut h = Harness::with(cfg.clone());
        let id = h.enqueue_kind(TaskKind::AuthzMaterialization, None);
        let mut now = 0;
        for (i, &backoff) in backoffs.iter().enumerate() {
            let retries = i as u32 + 1;
            assert_eq!(cfg.retry_backoff_ms(retries), backoff, "{name}: backoff #{retries}");
            let f = h.at(now).claim_one(A);
            assert_eq!(f.attempt, retries, "{name}");
            now += 7;
            let resp = h.at(now).apply(Request::Fail { fence: f, error: TaskError::Conflict });
            let retry_at = now + backoff;
            assert_eq!(resp, Response::Applied { retries, retry_at_ms: Some(retry_at) }, "{name}");
            let t = h.task(id);
            assert_eq!(
                (t.state, t.owner, t.lease_expiry_ms, t.retries, t.retry_at_ms),
                (TaskState::Ready, None, None, retries, retry_at),
                "{name}"
            );
            assert!(h.obs.take().contains(&Event::WriteApplied {
                fence: f,
                write: WriteKind::Fail,
                retries,
                retry_at_ms: Some(retry_at),
                terminal: false,
            }));
            assert_eq!(h.store.next_due_ms(now), Some(retry_at), "{name}");
            // Not claimable before its retry time, claimable at it.
            assert!(h.at(retry_at - 1).claim(B, 10).is_empty(), "{name}: claimed early");
            now = retry_at;
        }
        let last = backoffs.len() as u32 + 1;
        let f = h.at(now).claim_one(A);
        assert_eq!(f.attempt, last, "{name}");
        let resp = h.apply(Request::Fail { fence: f, error: TaskError::Conflict });
        assert_eq!(resp, Response::Applied { retries: last, retry_at_ms: None }, "{name}");
        let t = h.task(id);
        assert_eq!((t.state, t.owner, t.retries), (TaskState::Dead, None, last), "{name}");
        assert!(h.at(now + 10_000_000).claim(B, 10).is_empty(), "{name}");
        assert_eq!(h.store.next_due_ms(now), None, "{name}");
    }
}

#[test]
fn fatal_failure_kills_the_task_at_once() {
    let mut h = Harness::new();
    let id = h.enqueue_kind(TaskKind::IndexBuild, None);
    let f = h.at(50).claim_one(A);
    h.obs.take();
    let resp = h.at(60).apply(Request::Fail { fence: f, error: TaskError::Fatal });
    assert_eq!(resp, Response::Applied { retries: 1, retry_at_ms: None });
    let t = h.task(id);
    assert_eq!(
        (t.state, t.owner, t.lease_expiry_ms, t.retries, t.retry_at_ms, t.updated_ms),
        (TaskState::Dead, None, None, 1, 0, 60)
    );
    let applied =
        Event::WriteApplied { fence: f, write: WriteKind::Fail, retries: 1, retry_at_ms: None, terminal: true };
    assert_eq!(h.obs.take(), vec![applied]);
    assert!(h.at(10_000_000).claim(A, 10).is_empty());
}

// ---------------------------------------------------------------------------
// Completion effects.
// ---------------------------------------------------------------------------

#[test]
fn a_completed_index_build_materializes_at_the_next_index_pass() {
    let mut h = Harness::new();
    let with_index = |kind, index| TaskSpec { index: Some(index), ..spec(kind, None) };
    let build = h.enqueue(with_index(TaskKind::IndexBuild, 9));
    let failing = h.enqueue(with_index(TaskKind::IndexBuild, 10));
    let authz = h.enqueue(with_index(TaskKind::AuthzMaterialization, 11));
    let grants = h.claim(A, 3);
    let fence_of = |id| grants.iter().find(|g| g.fence.task == id).unwrap().fence;
    h.obs.take();

    let resp = h.apply(Request::Complete { fence: fence_of(build) });
    assert_eq!(resp, Response::Applied { retries: 0, retry_at_ms: None });
    assert!(!h.store.is_materialized(9), "a built index waits for a finalization pass");
    assert_eq!(h.store.built().collect::<Vec<_>>(), vec![9]);
    h.apply(Request::Fail { fence: fence_of(failing), error: TaskError::Fatal });
    h.apply(Request::Complete { fence: fence_of(authz) });
    assert!(!h.obs.take().iter().any(|e| matches!(e, Event::IndexMaterialized { .. })));

    // Another kind of pass finalizes nothing; the index pass does.
    let pass = |kind| Request::Maintain { owner: A, kind, timeout_ms: None };
    h.apply(pass(MaintenanceKind::Bucket));
    assert!(!h.store.is_materialized(9));
    h.apply(pass(MaintenanceKind::Index));
    assert!(h.store.is_materialized(9));
    assert!(!h.store.is_materialized(10), "a failed build materializes nothing");
    assert!(!h.store.is_materialized(11), "only index builds materialize");
    assert!(h.obs.take().contains(&Event::IndexMaterialized { index: 9, task: build }));
    assert_eq!(h.apply(Request::QueryIndex { index: 9, lag_timeout_ms: 0 }), Response::Query { materialized: true });
    // Finalization is idempotent: a second pass changes nothing.
    h.apply(pass(MaintenanceKind::Index));
    assert!(!h.obs.take().iter().any(|e| matches!(e, Event::IndexMaterialized { .. })));
}

#[test]
fn stage_complete_clears_the_link_and_marks_the_stage_done_in_one_apply() {
    let mut h = Harness::new();
    let pipe = 5;
    let s0 = StageRef { pipeline: pipe, index: 0 };
    let s1 = StageRef { pipeline: pipe, index: 1 };
    h.apply(Request::CreatePipeline { pipeline: pipe, stages: 2 });
    assert_eq!(h.apply(Request::PipelineSnapshot { by: JANITOR }), Response::Snapshot { due: vec![s0] });

    let Response::Enqueued { task } = h.apply(Request::EnqueueStage { stage: s0 }) else { panic!("stage 0 is due") };
    let t = h.task(task);
    assert_eq!((t.spec.kind, t.spec.group, t.spec.stage), (TaskKind::Stage, Some(pipe), Some(s0)));
    assert_eq!(h.store.stage(s0), Some(&StageRow { task: Some(task), done: false }));

    let f = h.claim_one(A);
    assert_eq!(f.task, task);
    h.obs.take();
    let resp = h.apply(Request::Complete { fence: f });
    assert_eq!(resp, Response::Applied { retries: 0, retry_at_ms: None });
    // Both effects are visible right after the one apply.
    assert_eq!(h.task(task).state, TaskState::Done);
    assert_eq!(h.store.stage(s0), Some(&StageRow { task: None, done: true }));
    let events = h.obs.take();
    assert!(events.contains(&Event::StageDone { stage: s0, task }), "{events:?}");
    assert_eq!(h.apply(Request::PipelineSnapshot { by: JANITOR }), Response::Snapshot { due: vec![s1] });
}

#[test]
fn enqueue_stage_guard_table() {
    // (name, stage to enqueue, expected rejection) after this setup:
    // pipeline 1 has stage 0 done and stage 1 linked to a task;
    // pipeline 2 has stage 0 unlinked and stage 1 waiting for it.
    let mut h = Harness::new();
    h.apply(Request::CreatePipeline { pipeline: 1, stages: 2 });
    h.apply(Request::CreatePipeline { pipeline: 2, stages: 2 });
    let s = |pipeline, index| StageRef { pipeline, index };
    h.apply(Request::EnqueueStage { stage: s(1, 0) });
    let f = h.claim_one(A);
    h.apply(Request::Complete { fence: f });
    assert!(matches!(h.apply(Request::EnqueueStage { stage: s(1, 1) }), Response::Enqueued { .. }));

    let cases = [
        ("done stage", s(1, 0), Rejection::StageGuard),
        ("stage with a task linked", s(1, 1), Rejection::StageGuard),
        ("previous stage not done", s(2, 1), Rejection::StageGuard),
        ("no such stage", s(1, 2), Rejection::Missing),
        ("no such pipeline", s(3, 0), Rejection::Missing),
    ];
    for (name, stage, reason) in cases {
        h.obs.take();
        let before = h.snapshot();
        assert_eq!(h.apply(Request::EnqueueStage { stage }), Response::Rejected { reason }, "{name}");
        assert_eq!(h.obs.take(), vec![Event::StageEnqueueRefused { stage, reason }], "{name}");
        assert_eq!(h.snapshot(), before, "{name}: store changed");
    }
    // The one due stage is accepted, exactly once.
    assert!(matches!(h.apply(Request::EnqueueStage { stage: s(2, 0) }), Response::Enqueued { .. }));
    assert_eq!(h.apply(Request::EnqueueStage { stage: s(2, 0) }), Response::Rejected { reason: Rejection::StageGuard });
}

#[test]
fn clear_stage_link_leaves_the_task_leased_and_the_stage_done() {
    let mut h = Harness::new();
    let s0 = StageRef { pipeline: 8, index: 0 };
    h.apply(Request::CreatePipeline { pipeline: 8, stages: 1 });
    let Response::Enqueued { task } = h.apply(Request::EnqueueStage { stage: s0 }) else { panic!("stage 0 is due") };
    let f = h.at(100).claim_one(A);
    let leased = h.task(task);
    h.obs.take();

    let resp = h.at(200).apply(Request::ClearStageLink { fence: f });
    assert_eq!(resp, Response::Applied { retries: 0, retry_at_ms: None });
    assert_eq!(h.task(task), leased, "the task itself is left in place");
    assert_eq!(h.task(task).state, TaskState::Leased);
    assert_eq!(h.store.stage(s0), Some(&StageRow { task: None, done: true }));
    let applied = Event::WriteApplied {
        fence: f,
        write: WriteKind::ClearStageLink,
        retries: 0,
        retry_at_ms: None,
        terminal: false,
    };
    assert_eq!(h.obs.take(), vec![Event::StageDone { stage: s0, task }, applied]);
    assert_eq!(h.apply(Request::EnqueueStage { stage: s0 }), Response::Rejected { reason: Rejection::StageGuard });
    // A stale ClearStageLink is fenced like every write.
    let stale = Fence { owner: B, ..f };
    assert_eq!(h.apply(Request::ClearStageLink { fence: stale }), Response::Rejected { reason: Rejection::NotOwner });
    // The second step completes the task; the stage stays done, no second StageDone.
    h.obs.take();
    assert!(matches!(h.apply(Request::Complete { fence: f }), Response::Applied { .. }));
    assert_eq!(h.task(task).state, TaskState::Done);
    assert_eq!(h.store.stage(s0), Some(&StageRow { task: None, done: true }));
    assert!(!h.obs.take().iter().any(|e| matches!(e, Event::StageDone { .. })));
}

// ---------------------------------------------------------------------------
// Release of heartbeat-owned tasks, reclaim of expired leases, group repair.
// ---------------------------------------------------------------------------

#[test]
fn release_dead_table() {
    // (name, kind, owner, owner heartbeats at 0?, later heartbeats (time, owner),
    //  ReleaseDead time, released?) for a task claimed by `owner` at 0.
    // dead_after_ms is 60_000 by default.
    type Later = &'static [(u64, Owner)];
    #[rustfmt::skip]
    let cases: [(&str, TaskKind, Owner, bool, Later, u64, bool); 15] = [
        ("owner fresh", TaskKind::Job, A, true, &[], 0, false),
        ("silent exactly dead_after", TaskKind::Job, A, true, &[], 60_000, false),
        ("silent beyond dead_after", TaskKind::Job, A, true, &[], 60_001, true),
        ("stage of a silent owner", TaskKind::Stage, A, true, &[], 60_001, true),
        ("kept alive by heartbeats", TaskKind::Job, A, true, &[(50_000, A)], 110_000, false),
        ("alive, then silent", TaskKind::Job, A, true, &[(50_000, A)], 110_001, true),
        ("another process's heartbeat does not help", TaskKind::Job, A, true, &[(50_000, B)], 60_001, true),
        ("superseded by a restart", TaskKind::Job, A, true, &[(1_000, A1)], 1_000, true),
        ("superseded stage owner", TaskKind::Stage, A, true, &[(1_000, A1)], 1_000, true),
        ("newer incarnation of another process", TaskKind::Job, A, true, &[(1_000, B4)], 1_000, false),
        ("late heartbeat of an older incarnation", TaskKind::Job, A1, true, &[(1_000, A)], 1_000, false),
        ("a first claim is a sign of life", TaskKind::Job, A, false, &[], 60_000, false),
        ("silent since its first claim", TaskKind::Job, A, false, &[], 60_001, true),
        ("leased kind of a silent owner", TaskKind::IndexBuild, A, true, &[], 200_000, false),
        ("leased kind of a superseded owner", TaskKind::Activity, A, true, &[(1_000, A1)], 1_000, false),
    ];
    for (name, kind, owner, heartbeats, later, release_at, released) in cases {
        let mut h = Harness::new();
        if heartbeats {
            h.heartbeat(owner);
        }
        let id = h.enqueue_kind(kind, None);
        let f = h.claim_one(owner);
        for &(at, owner) in later {
            h.at(at).heartbeat(owner);
        }
        h.at(release_at);
        h.obs.take();
        let before = h.task(id);
        let n = h.released(Request::ReleaseDead { by: JANITOR });
        let events = h.obs.take();
        if !released {
            assert_eq!(n, 0, "{name}");
            assert_eq!(h.task(id), before, "{name}");
            assert!(events.is_empty(), "{name}: {events:?}");
            continue;
        }
        assert_eq!(n, 1, "{name}");
        let t = h.task(id);
        assert_eq!(
            (t.state, t.owner, t.attempt, t.lease_expiry_ms, t.retries, t.repair_count, t.updated_ms),
            (TaskState::Ready, None, 1, None, 0, 0, release_at),
            "{name}"
        );
        assert_eq!(events, vec![Event::LeaseReleased { fence: f, cause: ReleaseCause::DeadOwner }], "{name}");
        // Re-claimed at a new attempt; the dead owner's outcome is fenced off.
        let g = h.claim_one(C);
        assert_eq!((g.task, g.attempt), (id, 2), "{name}");
        assert_eq!(
            h.apply(Request::Complete { fence: f }),
            Response::Rejected { reason: Rejection::Superseded },
            "{name}"
        );
    }
}

#[test]
fn reclaim_expired_table() {
    // (name, kind, group, reclaim time, released) for a lease granted at 0.
    #[rustfmt::skip]
    let cases = [
        ("index build before expiry", TaskKind::IndexBuild, None, 299_999, false),
        ("index build at expiry", TaskKind::IndexBuild, None, 300_000, true),
        ("ungrouped workflow task", TaskKind::WorkflowTask, None, 10_000, true),
        ("grouped workflow task", TaskKind::WorkflowTask, Some(3), 10_000, false),
        ("grouped activity", TaskKind::Activity, Some(3), 1_000_000, false),
        ("heartbeat-owned job", TaskKind::Job, None, 10_000_000, false),
        ("heartbeat-owned stage", TaskKind::Stage, None, 10_000_000, false),
    ];
    for (name, kind, group, at, released) in cases {
        let mut h = Harness::new();
        let id = h.enqueue_kind(kind, group);
        let f = h.claim_one(A);
        h.at(at);
        h.obs.take();
        let before = h.task(id);
        let n = h.released(Request::ReclaimExpired { by: JANITOR });
        let events = h.obs.take();
        if released {
            assert_eq!(n, 1, "{name}");
            let t = h.task(id);
            assert_eq!((t.state, t.owner, t.lease_expiry_ms, t.attempt), (TaskState::Ready, None, None, 1), "{name}");
            assert_eq!(events, vec![Event::LeaseReleased { fence: f, cause: ReleaseCause::Expired }], "{name}");
        } else {
            assert_eq!(n, 0, "{name}");
            assert_eq!(h.task(id), before, "{name}");
            assert!(events.is_empty(), "{name}: {events:?}");
        }
    }
}

#[test]
fn reclaim_expired_counts_every_expired_ungrouped_lease_in_one_pass() {
    let mut h = Harness::new();
    let a = h.enqueue_kind(TaskKind::WorkflowTask, None);
    let b = h.enqueue_kind(TaskKind::IndexBuild, None);
    let grouped = h.enqueue_kind(TaskKind::WorkflowTask, Some(1));
    let job = h.enqueue_kind(TaskKind::Job, None);
    assert_eq!(h.claim(A, 10).len(), 4);
    h.at(100_000);
    let healthy = h.enqueue_kind(TaskKind::Activity, None);
    assert_eq!(h.claim_one(B).task, healthy);
    h.at(300_000);
    assert_eq!(h.released(Request::ReclaimExpired { by: JANITOR }), 2);
    let states: Vec<TaskState> = [a, b, grouped, healthy, job].iter().map(|&id| h.task(id).state).collect();
    use TaskState::{Leased, Ready};
    assert_eq!(states, vec![Ready, Ready, Leased, Leased, Leased]);
}

#[test]
fn repair_reclaims_only_the_expired_lease_of_a_group() {
    let mut h = Harness::new();
    let g = 42;
    let wf = h.enqueue_kind(TaskKind::WorkflowTask, Some(g));
    let act = h.enqueue_kind(TaskKind::Activity, Some(g));
    let grants = h.claim(A, 2);
    let fence_of = |id| grants.iter().find(|gr| gr.fence.task == id).unwrap().fence;
    let (wf_a, act_a) = (fence_of(wf), fence_of(act));
    assert_eq!((wf_a.attempt, act_a.attempt), (1, 1));

    h.at(10_000); // the workflow task's lease (10 s) is out; the activity's (300 s) is not
    let activity_before = h.task(act);
    h.obs.take();
    assert_eq!(h.released(Request::Repair { by: JANITOR }), 1);
    let t = h.task(wf);
    assert_eq!((t.state, t.owner, t.attempt, t.lease_expiry_ms, t.repair_count), (TaskState::Ready, None, 1, None, 1));
    assert_eq!(h.task(act), activity_before, "the healthy activity is untouched");
    assert_eq!(
        h.obs.take(),
        vec![
            Event::LeaseReleased { fence: wf_a, cause: ReleaseCause::Repair },
            Event::RepairDecision { group: g, needed: true, reclaimed: vec![wf] },
        ]
    );

    // Re-claim: a new attempt of the workflow task only.
    let grants = h.claim(B, 10);
    assert_eq!(grants.len(), 1);
    let wf_b = grants[0].fence;
    assert_eq!((wf_b.task, wf_b.attempt, wf_b.owner), (wf, 2, B));
    assert_eq!(h.task(wf).repair_count, 1);

    // The old owner's outcome for the workflow task is superseded...
    let before = h.task(wf);
    assert_eq!(h.apply(Request::Complete { fence: wf_a }), Response::Rejected { reason: Rejection::Superseded });
    assert_eq!(h.task(wf), before);
    // ...while its activity attempt is still its own.
    assert!(matches!(h.apply(Request::Renew { fence: act_a }), Response::Renewed { .. }));
    assert!(matches!(h.apply(Request::Complete { fence: act_a }), Response::Applied { .. }));
    assert!(matches!(h.apply(Request::Complete { fence: wf_b }), Response::Applied { .. }));
}

#[test]
fn repair_backs_off_per_group_while_nothing_is_needed() {
    let mut h = Harness::new();
    let g = 9;
    h.enqueue_kind(TaskKind::Activity, Some(g));
    h.claim_one(A);
    h.obs.take();
    // Looks at a healthy group at 0, 3 s, 9 s, 21 s, 45 s, 93 s, 153 s, ...:
    // backoff 3 s * 2^(misses-1), capped at 60 s.
    let looks = [0, 3_000, 9_000, 21_000, 45_000, 93_000, 153_000, 213_000];
    let mut now = 0;
    for (i, &at) in looks.iter().enumerate() {
        // Just before the look is due, repair skips the group.
        if at > now {
            h.at(at - 1).obs.take();
            assert_eq!(h.released(Request::Repair { by: JANITOR }), 0);
            assert!(h.obs.take().is_empty(), "look {i} came early");
        }
        h.at(at);
        assert_eq!(h.released(Request::Repair { by: JANITOR }), 0);
        assert_eq!(
            h.obs.take(),
            vec![Event::RepairDecision { group: g, needed: false, reclaimed: vec![] }],
            "look {i}"
        );
        assert_eq!(h.store.repair[&g].misses, i as u32 + 1);
        now = at;
    }

    // A claim in the group resets its backoff: the next look is due at once.
    h.at(213_500);
    h.enqueue_kind(TaskKind::WorkflowTask, Some(g));
    let wf = h.claim_one(B);
    assert_eq!(h.store.repair[&g], RepairState { misses: 0, next_at_ms: 213_500 });
    h.obs.take();
    assert_eq!(h.released(Request::Repair { by: JANITOR }), 0);
    assert_eq!(h.obs.take().len(), 1);
    // Backoff again: looks at +3 s and +9 s; the next one would be due at
    // +21 s, but the workflow lease runs out at +10 s and the look is never
    // later than the next expiry: an expired lease does not wait out a backoff.
    for at in [216_500, 222_500] {
        h.at(at);
        assert_eq!(h.released(Request::Repair { by: JANITOR }), 0, "at {at}");
    }
    assert_eq!(h.store.repair[&g].next_at_ms, 223_500);
    h.at(223_500);
    assert_eq!(h.released(Request::Repair { by: JANITOR }), 1);
    assert_eq!(h.task(wf.task).repair_count, 1);
    assert_eq!(h.store.repair[&g], RepairState { misses: 0, next_at_ms: 223_500 });
}

/// Group `g` holds a workflow task and an activity, both granted to A;
/// returns the harness, the workflow task and its grant's fence.
fn workflow_and_activity_granted(g: GroupId) -> (Harness, TaskId, Fence) {
    let mut h = Harness::new();
    let wf = h.enqueue_kind(TaskKind::WorkflowTask, Some(g));
    h.enqueue_kind(TaskKind::Activity, Some(g));
    let grants = h.claim(A, 2);
    let wf_a = grants.iter().find(|gr| gr.fence.task == wf).unwrap().fence;
    (h, wf, wf_a)
}

#[test]
fn repair_looks_again_by_the_expiry_of_a_row_it_skipped_as_locked() {
    // A look skips a row a transaction holds (SKIP LOCKED), but that row's
    // lease still bounds the group's next look: once the lock goes, the
    // expired lease does not wait out a backoff computed without it (a
    // guided swarm run, seed 3151875752896229214, docs/false-alarms.md).
    let g = 7;
    let (mut h, wf, wf_a) = workflow_and_activity_granted(g);
    // Looks at 0 and 3 s; the workflow lease (10 s) bounds nothing yet.
    for at in [0, 3_000] {
        assert_eq!(h.at(at).released(Request::Repair { by: JANITOR }), 0);
    }
    assert_eq!(h.store.repair[&g], RepairState { misses: 2, next_at_ms: 9_000 });
    // At 9 s a transaction holds the workflow task's row: the look skips it
    // and backs off (12 s), but no later than that row's expiry.
    h.at(9_000);
    assert_eq!(h.apply(stmt(1, A, Request::LeaseValid { fence: wf_a }, false)), Response::Valid { valid: true });
    assert_eq!(h.released(Request::Repair { by: JANITOR }), 0);
    assert_eq!(h.store.repair[&g], RepairState { misses: 3, next_at_ms: 10_000 });
    assert_eq!(h.at(9_500).apply(Request::Rollback { txn: TxnId { owner: A, seq: 1 } }), Response::Ack);
    assert_eq!(h.at(10_000).released(Request::Repair { by: JANITOR }), 1);
    assert_eq!(h.task(wf).state, TaskState::Ready);
}

#[test]
fn repair_looks_at_once_while_a_locked_row_holds_an_expired_lease() {
    let g = 8;
    let (mut h, _, wf_a) = workflow_and_activity_granted(g);
    // Locked while its lease is still valid (9.9 s), then out (10 s): each
    // look skips it, and the next look is never later than the next pass.
    h.at(9_900);
    assert_eq!(h.apply(stmt(1, A, Request::LeaseValid { fence: wf_a }, false)), Response::Valid { valid: true });
    for at in [10_000, 10_001, 12_000] {
        assert_eq!(h.at(at).released(Request::Repair { by: JANITOR }), 0, "at {at}");
        assert_eq!(h.store.repair[&g].next_at_ms, at, "at {at}");
    }
    assert_eq!(h.at(12_500).apply(Request::Rollback { txn: TxnId { owner: A, seq: 1 } }), Response::Ack);
    assert_eq!(h.at(12_501).released(Request::Repair { by: JANITOR }), 1);
}

#[test]
fn repair_leaves_ungrouped_and_heartbeat_owned_tasks_alone() {
    let mut h = Harness::new();
    let ungrouped = h.enqueue_kind(TaskKind::WorkflowTask, None);
    let grouped_job = h.enqueue_kind(TaskKind::Job, Some(4));
    assert_eq!(h.claim(A, 10).len(), 2);
    h.at(1_000_000);
    let before = h.snapshot();
    h.obs.take();
    assert_eq!(h.released(Request::Repair { by: JANITOR }), 0);
    assert!(h.obs.take().is_empty());
    assert_eq!(h.snapshot(), before);
    assert_eq!(h.task(ungrouped).state, TaskState::Leased);
    assert_eq!(h.task(grouped_job).state, TaskState::Leased);
}

#[test]
fn claim_takes_due_ready_tasks_in_retry_time_order_up_to_max() {
    let mut h = Harness::new();
    let at = |not_before_ms| TaskSpec { not_before_ms, ..spec(TaskKind::IndexBuild, None) };
    let late = h.enqueue(at(500));
    let early = h.enqueue(at(100));
    let first = h.enqueue(at(0));
    let future = h.enqueue(at(10_000));
    h.at(1_000);
    let order: Vec<TaskId> = h.claim(A, 2).iter().map(|g| g.fence.task).collect();
    assert_eq!(order, vec![first, early]);
    let order: Vec<TaskId> = h.claim(B, 5).iter().map(|g| g.fence.task).collect();
    assert_eq!(order, vec![late]);
    assert_eq!(h.store.next_due_ms(1_000), Some(10_000));
    assert!(h.claim(C, 0).is_empty());
    assert_eq!(h.at(10_000).claim_one(C).task, future);
}

// ---------------------------------------------------------------------------
// Transactions that span round trips (txn.rs).
// ---------------------------------------------------------------------------

fn stmt(seq: u64, owner: Owner, req: Request, commit: bool) -> Request {
    Request::Exec { txn: TxnId { owner, seq }, stmt: Box::new(req), commit }
}

/// t1 (a workflow task, 10 s lease) claimed by `A` at 0 and failing: its
/// transaction has locked the row with a lease check at 1000.
fn failing_in_txn() -> (Harness, Fence) {
    let mut h = Harness::new();
    let id = h.enqueue_kind(TaskKind::WorkflowTask, None);
    let fence = h.claim_one(A);
    assert_eq!(fence.task, id);
    h.at(1_000);
    assert_eq!(h.apply(stmt(1, A, Request::LeaseValid { fence }, false)), Response::Valid { valid: true });
    h.obs.take();
    (h, fence)
}

#[test]
fn a_transaction_writes_nothing_visible_until_it_commits() {
    let (mut h, fence) = failing_in_txn();
    let before = h.task(fence.task);
    let fail = Request::Fail { fence, error: TaskError::Conflict };
    let answer = h.at(1_100).apply(stmt(1, A, fail.clone(), false));
    assert_eq!(answer, Response::Applied { retries: 1, retry_at_ms: Some(1_100 + h.cfg().retry_backoff_ms(1)) });
    assert_eq!(h.task(fence.task), before, "an uncommitted failure shows");
    assert_eq!(h.obs.take(), vec![], "an uncommitted write reports");
    // The row is locked: a renewal waits for it (here it has waited all it
    // may), recovery skips it even once the lease has run out.
    assert_eq!(h.apply(Request::Renew { fence }), Response::Rejected { reason: Rejection::TimedOut });
    assert_eq!(h.at(20_000).released(Request::ReclaimExpired { by: B }), 0);
    assert_eq!(h.task(fence.task), before);
    // COMMIT (with a harmless second statement) writes the failure as it
    // was computed at 1_100, and reports it then.
    let answer = h.apply(stmt(1, A, Request::LeaseValid { fence }, true));
    assert_eq!(answer, Response::Valid { valid: false }, "the statement sees the transaction's own failure");
    let row = h.task(fence.task);
    assert_eq!((row.state, row.retries, row.retry_at_ms), (TaskState::Ready, 1, 1_100 + h.cfg().retry_backoff_ms(1)));
    let events = h.obs.take();
    assert!(
        matches!(events.as_slice(), [Event::LeaseChecked { .. }, Event::WriteApplied { write: WriteKind::Fail, .. }]),
        "{events:?}"
    );
    assert_eq!(h.store.open_txns().count(), 0);
}

#[test]
fn a_transaction_open_past_its_timeout_is_aborted_with_nothing_applied() {
    let (mut h, fence) = failing_in_txn();
    let snapshot_row = h.task(fence.task);
    let timeout_ms = h.cfg().txn_timeout_ms;
    let fail = Request::Fail { fence, error: TaskError::Conflict };
    assert!(matches!(h.at(1_100).apply(stmt(1, A, fail.clone(), false)), Response::Applied { .. }));
    assert_eq!(h.store.blocked_until(1_100, &Request::Renew { fence }), Some(1_000 + timeout_ms));
    h.at(1_000 + timeout_ms);
    assert_eq!(h.store.blocked_until(h.now, &Request::Renew { fence }), None, "the lock outlived the transaction");
    assert_eq!(h.apply(stmt(1, A, fail, true)), Response::Rejected { reason: Rejection::TxnClosed });
    assert_eq!(h.task(fence.task), snapshot_row, "an aborted transaction applied something");
    assert_eq!(h.obs.take(), vec![]);
    // Once free, the expired lease is reclaimed as usual.
    assert_eq!(h.released(Request::ReclaimExpired { by: B }), 1);
}

#[test]
fn a_transaction_ends_with_its_client_and_never_reopens() {
    let (mut h, fence) = failing_in_txn();
    let fail = Request::Fail { fence, error: TaskError::Conflict };
    // A restarted A (a newer incarnation) reaches the store: the old
    // connection's transaction is gone, its later statements refused.
    h.at(1_200).heartbeat(A1);
    assert_eq!(h.store.open_txns().count(), 0);
    assert_eq!(h.apply(stmt(1, A, fail.clone(), true)), Response::Rejected { reason: Rejection::TxnClosed });
    assert_eq!(h.task(fence.task).state, TaskState::Leased);
    // A rolled-back or committed transaction never opens again, even when
    // its first statement is delivered a second time.
    let (mut h, fence) = failing_in_txn();
    assert_eq!(h.apply(Request::Rollback { txn: TxnId { owner: A, seq: 1 } }), Response::Ack);
    assert_eq!(
        h.apply(stmt(1, A, Request::LeaseValid { fence }, false)),
        Response::Rejected { reason: Rejection::TxnClosed }
    );
    assert_eq!(
        h.apply(Request::Rollback { txn: TxnId { owner: A, seq: 1 } }),
        Response::Rejected { reason: Rejection::TxnClosed }
    );
    assert_eq!(h.store.open_txns().count(), 0);
}

#[test]
fn a_second_transaction_waits_for_the_row_and_a_stale_fence_locks_nothing() {
    let (mut h, fence) = failing_in_txn();
    // Another transaction on the same row waits (its wait ran out here:
    // it times out and is aborted); one with a stale fence matches no row
    // and takes no lock.
    let check = Request::LeaseValid { fence };
    assert_eq!(h.store.blocked_until(1_000, &stmt(2, A, check.clone(), false)), Some(1_000 + h.cfg().txn_timeout_ms));
    assert_eq!(h.apply(stmt(2, A, check, false)), Response::Rejected { reason: Rejection::TimedOut });
    assert_eq!(h.store.open_txns().collect::<Vec<_>>(), vec![TxnId { owner: A, seq: 1 }]);
    let stale = Fence { attempt: fence.attempt + 1, ..fence };
    assert_eq!(h.apply(stmt(1, B, Request::LeaseValid { fence: stale }, false)), Response::Valid { valid: false });
    assert_eq!(h.store.lock_holder(fence.task), Some(TxnId { owner: A, seq: 1 }));
}

#[test]
fn a_stage_completion_in_one_transaction_is_idempotent_for_its_attempt() {
    let mut h = Harness::new();
    h.apply(Request::CreatePipeline { pipeline: 5, stages: 2 });
    let stage = StageRef { pipeline: 5, index: 0 };
    assert!(matches!(h.apply(Request::EnqueueStage { stage }), Response::Enqueued { .. }));
    let fence = h.claim_one(A);
    let clear = Request::ClearStageLink { fence };
    assert!(matches!(h.apply(stmt(1, A, clear.clone(), false)), Response::Applied { .. }));
    assert_eq!(h.store.stage(stage).map(|r| r.done), Some(false), "the stage shows done before COMMIT");
    assert!(matches!(h.apply(stmt(1, A, Request::Complete { fence }, true)), Response::Applied { .. }));
    assert_eq!(h.store.stage(stage).cloned(), Some(StageRow { task: None, done: true }));
    assert_eq!(h.task(fence.task).state, TaskState::Done);
    // The whole transaction again (its COMMIT's answer was lost): applied,
    // and nothing changes.
    let rows =
        |h: &Harness| (h.task(fence.task), h.store.stage(stage).cloned(), h.store.completions().collect::<Vec<_>>());
    let before = rows(&h);
    assert!(matches!(h.apply(stmt(2, A, clear, false)), Response::Applied { .. }));
    assert!(matches!(h.apply(stmt(2, A, Request::Complete { fence }, true)), Response::Applied { .. }));
    assert_eq!(rows(&h), before);
}
