//! A history builder and the one check function every checker's data-driven
//! cases run through.
//!
//! [`H`] writes histories the way a world records them: every store request
//! arrives (with its sender) and is answered with the rows its transaction
//! changed (ground truth), next to the engine's own events for it
//! (testimony); every body starts and ends at the body seam. `H` keeps its
//! own copy of the store's rows so that each commit carries true before and
//! after rows. Broken histories add lies with [`H::answer`], [`H::fact`] and
//! [`H::ev`].

use super::{check, Report, Spec, Violation};
use leasesim_vocab::history::{Entry, Record, WorldEvent};
use leasesim_vocab::ids::{Fence, IndexId, Owner, ProcId, StageRef, TaskId, TxnId};
use leasesim_vocab::op::{Grant, Op, PeerNote, Refusal, Response};
use leasesim_vocab::promise::{Backoff, Bounds, Capabilities, LeaseTerms, Phases, Promises};
use leasesim_vocab::task::MaintenanceKind;
use leasesim_vocab::task::StageRow;
use leasesim_vocab::task::TaskError;
use leasesim_vocab::task::{Row, TaskKind, TaskSpec, TaskState};
use leasesim_vocab::testimony::{Event, ReleaseCause, WriteKind};
use leasesim_vocab::truth::{ClientAnswer, ClientCall, Commit, Fact, Reply, Sender, StageChange, TaskChange};
use std::collections::{BTreeMap, BTreeSet};

/// The promises of every case: 2 permits, finalize deadline 1000 ms, idle
/// poll 500 ms, heartbeats every 100 s (dead after 200 s), retries after
/// 1000 ms * 2^(n-1) (at most 2 retries); leases of 5 s (index builds, authz),
/// 3 s (workflow tasks) and 6 s (activities), jobs and stages owned by
/// heartbeat; a task given back by recovery is due 2 s later.
pub fn promises() -> Promises {
    Promises {
        concurrency: 2,
        claim_batch_max: 2,
        idle_poll_ms: 500,
        long_poll_ms: 0,
        // Jobs and stages are owned by heartbeat; these kinds hold leases.
        lease_ttl: LeaseTerms {
            index_build_ms: Some(5_000),
            authz_materialization_ms: Some(5_000),
            job_ms: None,
            stage_ms: None,
            workflow_task_ms: Some(3_000),
            activity_ms: Some(6_000),
        },
        renew_divisor: 3,
        heartbeat_interval_ms: 100_000,
        dead_after_ms: 200_000,
        cleanup_interval_ms: 30_000,
        backoff: Backoff::Doubling { base_ms: 1_000, cap_ms: 8_000 },
        max_retries: 2,
        finalize_deadline_ms: 1_000,
        rpc_timeout_ms: 10_000,
        maintenance: Vec::new(),
        maintenance_interval_ms: 5_000,
        txn_timeout_ms: 30_000,
        recovery_delay_ms: 0,
        claim_order: leasesim_vocab::promise::ClaimOrder::DueThenId,
        statement_time: leasesim_vocab::promise::StatementTime::Commit,
        enqueue_retry: Some(leasesim_vocab::promise::EnqueueRetry {
            sends: 3,
            send_timeout_ms: 10_000,
            retry_on: vec![leasesim_vocab::op::Refusal::Conflict],
        }),
        outcome_retry: true,
        outcome_idempotent: true,
        // The cases' claims ask for one task each (whatever is free): the
        // rule is judged in its own cases, with this promise made.
        claim_fills_free_permits: false,
        // Judged in pass-cadence's own cases, under a spec that declares them.
        cadences: Vec::new(),
        // The earlier of the two rules; transactions' own cases judge the
        // later one under a spec that declares it.
        replaced_txns_end: leasesim_vocab::promise::ReplacedTxnsEnd::AnyRequest,
        // The earlier rule; transactions' own cases judge the idle one.
        txn_timeout_from: leasesim_vocab::promise::TxnTimeoutFrom::Open,
        heartbeat_calls: 1,
        releases_by_process: false,
        stop_grace_ms: 10_000,
    }
}

/// The spec of every case: [`promises`], every capability, a 10 s fault
/// phase and a 10 s heal; claim bound 1000, recovery bound 2000, permit
/// slack 500, materialize bound 3000, completion bound 5000.
pub fn spec() -> Spec {
    Spec {
        promises: promises(),
        caps: Capabilities::ALL,
        phases: Phases { fault_phase_ms: 10_000, heal_phase_ms: 10_000, quiet_end_ms: None },
        bounds: Bounds {
            claim_bound_ms: 1_000,
            recovery_bound_ms: 2_000,
            permit_release_slack_ms: 500,
            materialize_bound_ms: 3_000,
            completion_bound_ms: 5_000,
            fresh_index_after_heal_ms: Some(1_000),
        },
    }
}

/// [`spec`] of an engine that releases nothing of a dead holder's (no
/// leases, no heartbeat recovery).
/// [`spec`] with a recovery delay of 2 s (graphile's kind of promise): a
/// task taken back by recovery is due 2 s after it.
pub fn spec_delaying_recovery() -> Spec {
    let mut spec = spec();
    spec.promises.recovery_delay_ms = 2_000;
    spec
}

pub fn spec_without_recovery() -> Spec {
    let mut s = spec();
    s.caps.leases = false;
    s.caps.heartbeats = false;
    s
}

pub fn o(proc: ProcId, incarnation: u32) -> Owner {
    Owner { proc, incarnation }
}

pub fn fence(task: TaskId, attempt: u32, owner: Owner) -> Fence {
    Fence { task, attempt, owner }
}

/// The owner of task `t` in [`three_begun`]: t1 and t2 on p1.1, t3 on p2.1.
pub fn owner_of(t: TaskId) -> Owner {
    if t == 3 {
        o(2, 1)
    } else {
        o(1, 1)
    }
}

/// Three jobs created at 0 ms and begun at 10 ms on [`owner_of`] (two
/// permits each), p1.1 and p2.1 up and heartbeating from 0 ms: the world of
/// the cases that hold a deadline skip to the earliest of several deadlines.
pub fn three_begun() -> H {
    let mut h = H::new().up(o(1, 1)).up(o(2, 1)).heartbeat(o(1, 1)).heartbeat(o(2, 1));
    for t in 1..=3 {
        h = h.created(t, TaskKind::Job);
    }
    for t in 1..=3 {
        h = h.begun(10, t, 1, owner_of(t));
    }
    h
}

/// The violations of `report` as (task, when), sorted.
pub fn judged_at(report: &Report) -> Vec<(Option<TaskId>, u64)> {
    let mut at: Vec<(Option<TaskId>, u64)> = report.violations.iter().map(|v| (v.task, v.at_ms)).collect();
    at.sort();
    at
}

/// What a case expects of the whole report: exactly these (invariant, task)
/// violations, no more and no fewer.
pub type Expect = &'static [(&'static str, Option<TaskId>)];

/// No checker finds anything.
pub const PASS: Expect = &[];

/// The one check function of every case: the whole list of violations must
/// be the expected one.
pub fn run_case(name: &str, history: Vec<Record>, expect: Expect) -> Report {
    run_case_in(name, &spec(), history, expect)
}

/// [`run_case`] under another spec (a promise the case turns off).
pub fn run_case_in(name: &str, spec: &Spec, history: Vec<Record>, expect: Expect) -> Report {
    let report = check(spec, &history);
    let got: BTreeSet<(String, Option<TaskId>)> =
        report.violations.iter().map(|v| (v.invariant.clone(), v.task)).collect();
    let want: BTreeSet<(String, Option<TaskId>)> = expect.iter().map(|(i, t)| (i.to_string(), *t)).collect();
    assert_eq!(got, want, "{name}: the violations differ from the expected ones:\n{:#?}", report.violations);
    assert_parts_agree(name, spec, &history, &report);
    let every = crate::check_reading_every_record(spec, &history);
    assert_eq!(report, every, "{name}: a checker does something with a kind of record it does not declare it reads");
    report
}

/// Judged part by part (`bench judge`'s profile), the history yields the
/// same violations and coverage as judged whole.
fn assert_parts_agree(name: &str, spec: &Spec, history: &[Record], report: &Report) {
    let key = |v: &Violation| (v.invariant.clone(), v.task, v.at_ms, v.message.clone());
    let mut whole: Vec<_> = report.violations.iter().map(key).collect();
    let mut parts = Vec::new();
    for (i, c) in crate::checkers().iter().enumerate() {
        if !c.applies(&spec.caps) {
            continue;
        }
        let run = crate::run_part(spec, history, crate::Part::Checker(i));
        parts.extend(run.violations.iter().map(key));
    }
    whole.sort();
    parts.sort();
    assert_eq!(parts, whole, "{name}: judged part by part, the violations differ");
    let reached = crate::run_part(spec, history, crate::Part::Coverage).reached;
    let reached: BTreeSet<String> = reached.iter().map(|p| p.to_string()).collect();
    assert_eq!(reached, report.coverage, "{name}: judged part by part, the coverage differs");
}

/// `cases! { name: history => expect; ... }` makes one test per case, each
/// run through [`run_case`].
macro_rules! cases {
    ($($name:ident: $history:expr => $expect:expr;)+) => {
        $(
            #[test]
            fn $name() {
                $crate::testkit::run_case(stringify!($name), $history, $expect);
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
    tasks: BTreeMap<TaskId, Row>,
    stages: BTreeMap<StageRef, StageRow>,
    materialized: BTreeSet<IndexId>,
    next_req: u64,
    next_call: u64,
    /// The next statement runs in this transaction (and with COMMIT?).
    wrap: Option<(TxnId, bool)>,
}

/// A change to one row, as a builder step describes it.
type Edit<'a> = &'a dyn Fn(&mut Row);

impl H {
    pub fn new() -> Self {
        H::default()
    }

    pub fn at(mut self, ms: u64) -> Self {
        assert!(ms >= self.now, "history time goes backwards: {ms} < {}", self.now);
        self.now = ms;
        self
    }

    pub fn now(&self) -> u64 {
        self.now
    }

    pub fn build(self) -> Vec<Record> {
        self.records
    }

    pub fn row(&self, task: TaskId) -> Row {
        self.tasks.get(&task).cloned().unwrap_or_else(|| panic!("t{task} was never created"))
    }

    fn push(mut self, entry: Entry) -> Self {
        self.records.push(Record { at_ms: self.now, entry });
        self
    }

    pub fn world(self, w: WorldEvent) -> Self {
        self.push(Entry::World(w))
    }

    pub fn ev(self, e: Event) -> Self {
        self.push(Entry::Engine(e))
    }

    pub fn fact(self, f: Fact) -> Self {
        self.push(Entry::Truth(f))
    }

    // ---- world ----
    pub fn up(self, owner: Owner) -> Self {
        self.world(WorldEvent::ProcessUp { owner })
    }
    pub fn killed(self, owner: Owner) -> Self {
        self.world(WorldEvent::ProcessKilled { owner })
    }
    pub fn exited(self, owner: Owner) -> Self {
        self.world(WorldEvent::ProcessExited { owner })
    }
    pub fn paused(self, proc: ProcId) -> Self {
        self.world(WorldEvent::ProcessPaused { proc })
    }
    pub fn resumed(self, proc: ProcId) -> Self {
        self.world(WorldEvent::ProcessResumed { proc })
    }
    pub fn partitioned(self, proc: ProcId) -> Self {
        self.fact(Fact::Partitioned { proc })
    }
    pub fn rejoined(self, proc: ProcId) -> Self {
        self.fact(Fact::Rejoined { proc })
    }
    pub fn offset(self, proc: ProcId, offset_ms: i64) -> Self {
        self.world(WorldEvent::ClockOffset { proc, offset_ms })
    }
    pub fn heal(self) -> Self {
        self.world(WorldEvent::Heal)
    }
    /// The end of the run: `End`, then the store's final state as it is.
    pub fn end(self) -> Self {
        let last = Fact::Final {
            tasks: self.tasks.values().cloned().collect(),
            stages: self.stages.iter().map(|(s, r)| (*s, r.clone())).collect(),
            materialized: self.materialized.iter().copied().collect(),
        };
        self.world(WorldEvent::End).fact(last)
    }

    // ---- the store seam ----

    /// The next statement (a lease check, complete, fail or stage-link
    /// clear) is sent as statement of transaction `seq` of `owner`, with
    /// COMMIT if `commit`.
    pub fn in_txn(mut self, owner: Owner, seq: u64, commit: bool) -> Self {
        self.wrap = Some((TxnId { owner, seq }, commit));
        self
    }

    /// Transaction `seq` of `owner` is rolled back (nothing changes).
    pub fn rolled_back(self, owner: Owner, seq: u64) -> Self {
        let txn = TxnId { owner, seq };
        self.answer(Sender::Worker(owner), Op::Rollback { txn }, Response::Ack, vec![], &[])
    }

    /// A lease check of an attempt, answered `valid`.
    pub fn lease_checked(self, task: TaskId, attempt: u32, owner: Owner, valid: bool) -> Self {
        let f = fence(task, attempt, owner);
        let event = Event::LeaseChecked { fence: f, valid };
        self.answer(Sender::Worker(owner), Op::LeaseValid { fence: f }, Response::Valid { valid }, vec![event], &[])
    }

    /// A request arrives from `from`; returns its number.
    pub fn arrive(mut self, from: Sender, request: Op) -> (Self, u64) {
        let request = match self.wrap.take() {
            Some((txn, commit)) if runs_in_txn(&request) => Op::Exec { txn, stmt: Box::new(request), commit },
            Some(wrap) => {
                self.wrap = Some(wrap);
                request
            }
            None => request,
        };
        self.next_req += 1;
        let req = self.next_req;
        (self.fact(Fact::Arrived { req, from, request, duplicate: false }), req)
    }

    /// A request from `from` is answered: the engine's `events`, then the
    /// answer with the rows `edits` change (each edit gets the row, or a new
    /// row for an id never seen), and the stage rows and indexes changed.
    pub fn answer(
        self,
        from: Sender,
        request: Op,
        response: Response,
        events: Vec<Event>,
        edits: &[(TaskId, Edit)],
    ) -> Self {
        self.answer_as(Reply::Sent, from, request, response, events, edits)
    }

    /// As `answer`, with the answer's fate `reply` (lost, late, sent).
    pub fn answer_as(
        self,
        reply: Reply,
        from: Sender,
        request: Op,
        response: Response,
        events: Vec<Event>,
        edits: &[(TaskId, Edit)],
    ) -> Self {
        let (mut h, req) = self.arrive(from, request);
        let mut commit = Commit::default();
        for (id, edit) in edits {
            let before = h.tasks.get(id).cloned();
            let mut after = before.clone().unwrap_or_else(|| new_row(*id, h.now));
            edit(&mut after);
            after.updated_ms = h.now;
            h.tasks.insert(*id, after.clone());
            commit.tasks.push(TaskChange { before, after });
        }
        for e in &events {
            match e {
                Event::StageDone { stage, task } => {
                    let before = h.stages.get(stage).cloned();
                    let after = StageRow { task: None, done: true };
                    let _ = task;
                    h.stages.insert(*stage, after.clone());
                    commit.stages.push(StageChange { stage: *stage, before, after });
                }
                Event::IndexMaterialized { index, .. } if h.materialized.insert(*index) => {
                    commit.materialized.push(*index);
                }
                _ => {}
            }
        }
        for e in events {
            h = h.ev(e);
        }
        h.fact(Fact::Answered { req, response, commit, reply })
    }

    fn call(&mut self) -> u64 {
        self.next_call += 1;
        self.next_call
    }

    pub fn created(self, task: TaskId, kind: TaskKind) -> Self {
        let spec = TaskSpec { kind, group: None, stage: None, index: None, not_before_ms: 0, queue: None };
        self.created_spec(task, spec)
    }
    pub fn created_in(self, task: TaskId, kind: TaskKind, group: u64) -> Self {
        let spec = TaskSpec { kind, group: Some(group), stage: None, index: None, not_before_ms: 0, queue: None };
        self.created_spec(task, spec)
    }
    pub fn created_index(self, task: TaskId, index: IndexId) -> Self {
        let spec = TaskSpec {
            kind: TaskKind::IndexBuild,
            group: None,
            stage: None,
            index: Some(index),
            not_before_ms: 0,
            queue: None,
        };
        self.created_spec(task, spec)
    }
    /// The client enqueues `spec`, which the store creates as `task`.
    pub fn created_spec(self, task: TaskId, spec: TaskSpec) -> Self {
        self.created_as(task, spec.clone(), spec)
    }
    /// The client asks for `asked`; the engine sends and the store writes
    /// `spec` as `task` (an engine that rewrote the call).
    pub fn created_as(mut self, task: TaskId, asked: TaskSpec, spec: TaskSpec) -> Self {
        let call = self.call();
        let from = Sender::Client(call);
        let what = ClientCall::Enqueue { spec: asked };
        let event = Event::TaskCreated { task, spec: spec.clone(), retry_at_ms: spec.not_before_ms };
        self.fact(Fact::ClientCalled { call, client: call, what })
            .answer(
                from,
                Op::Enqueue { spec: spec.clone(), key: None },
                Response::Enqueued { task },
                vec![event],
                &[(task, &|t: &mut Row| {
                    t.spec = spec.clone();
                    t.retry_at_ms = spec.not_before_ms;
                })],
            )
            .fact(Fact::ClientAnswered { call, answer: ClientAnswer::Enqueued { task: Some(task) } })
    }
    /// The client enqueues a job, every one of its `sends` is lost at the
    /// store seam, and it is told the call failed: the contract kept.
    pub fn enqueue_given_up(mut self, sends: u32) -> Self {
        let call = self.call();
        let spec =
            TaskSpec { kind: TaskKind::Job, group: None, stage: None, index: None, not_before_ms: 0, queue: None };
        let mut h =
            self.fact(Fact::ClientCalled { call, client: call, what: ClientCall::Enqueue { spec: spec.clone() } });
        for _ in 0..sends {
            let (next, req) = h.arrive(Sender::Client(call), Op::Enqueue { spec: spec.clone(), key: Some(call) });
            h = next.fact(Fact::Dropped { req });
        }
        h.fact(Fact::ClientAnswered { call, answer: ClientAnswer::Enqueued { task: None } })
    }
    /// The client creates a pipeline of `stages` stages.
    pub fn pipeline(mut self, pipeline: u64, stages: u32) -> Self {
        let call = self.call();
        let (mut h, req) = self.arrive(Sender::Client(call), Op::CreatePipeline { pipeline, stages });
        let mut commit = Commit::default();
        for index in 0..stages {
            let stage = StageRef { pipeline, index };
            h.stages.insert(stage, StageRow::default());
            commit.stages.push(StageChange { stage, before: None, after: StageRow::default() });
        }
        h.ev(Event::PipelineCreated { pipeline, stages }).fact(Fact::Answered {
            req,
            response: Response::Ack,
            commit,
            reply: Reply::Sent,
        })
    }
    /// Worker `by` enqueues the task of stage `index` of `pipeline` as `task`.
    pub fn created_stage(self, task: TaskId, pipeline: u64, index: u32) -> Self {
        let stage = StageRef { pipeline, index };
        let spec = TaskSpec {
            kind: TaskKind::Stage,
            group: Some(pipeline),
            stage: Some(stage),
            index: None,
            not_before_ms: self.now,
            queue: None,
        };
        let (mut h, req) = self.arrive(Sender::Worker(o(1, 1)), Op::EnqueueStage { stage });
        let mut row = new_row(task, h.now);
        row.spec = spec.clone();
        row.retry_at_ms = h.now;
        h.tasks.insert(task, row.clone());
        let before = h.stages.get(&stage).cloned();
        let after = StageRow { task: Some(task), done: false };
        h.stages.insert(stage, after.clone());
        let commit = Commit {
            tasks: vec![TaskChange { before: None, after: row }],
            stages: vec![StageChange { stage, before, after }],
            materialized: vec![],
            queues: vec![],
        };
        let now = h.now;
        h.ev(Event::TaskCreated { task, spec, retry_at_ms: now }).fact(Fact::Answered {
            req,
            response: Response::Enqueued { task },
            commit,
            reply: Reply::Sent,
        })
    }
    /// The store grants `task` to attempt `attempt` of `owner`, with a lease
    /// until `expiry` (`None`: heartbeat-owned).
    pub fn granted(self, task: TaskId, attempt: u32, owner: Owner, expiry: Option<u64>) -> Self {
        self.granted_asking(1, task, attempt, owner, expiry)
    }
    /// As `granted`, the claim asking for `max` tasks.
    pub fn granted_asking(self, max: u32, task: TaskId, attempt: u32, owner: Owner, expiry: Option<u64>) -> Self {
        self.granted_reply(Reply::Sent, max, task, attempt, owner, expiry)
    }
    /// As `granted`, the claim's answer lost on its way (the task is leased
    /// all the same).
    pub fn granted_lost(self, task: TaskId, attempt: u32, owner: Owner, expiry: Option<u64>) -> Self {
        self.granted_reply(Reply::Lost, 1, task, attempt, owner, expiry)
    }
    fn granted_reply(
        self,
        reply: Reply,
        max: u32,
        task: TaskId,
        attempt: u32,
        owner: Owner,
        expiry: Option<u64>,
    ) -> Self {
        let f = fence(task, attempt, owner);
        let kind = self.row(task).spec.kind;
        let retry_at_ms = self.row(task).retry_at_ms;
        let grant = Grant { fence: f, kind, lease_expiry_ms: expiry };
        self.answer_as(
            reply,
            Sender::Worker(owner),
            Op::Claim { owner, max, wait_ms: 0 },
            Response::Claimed { grants: vec![grant] },
            vec![Event::LeaseGranted { fence: f, kind, lease_expiry_ms: expiry, retry_at_ms }],
            &[(task, &|t: &mut Row| {
                t.state = TaskState::Leased;
                t.owner = Some(owner);
                t.attempt = attempt;
                t.lease_expiry_ms = expiry;
            })],
        )
    }
    /// The store grants `task` to attempt `attempt` of `owner` with the lease
    /// the scenario promises for its kind.
    pub fn grant(self, task: TaskId, attempt: u32, owner: Owner) -> Self {
        let ttl = super::promise::lease_ttl_ms(&promises(), self.row(task).spec.kind);
        let expiry = ttl.map(|ttl| self.now + ttl);
        self.granted(task, attempt, owner, expiry)
    }
    /// A renewal with the promised lease.
    pub fn renew(self, task: TaskId, attempt: u32, owner: Owner) -> Self {
        let ttl = super::promise::lease_ttl_ms(&promises(), self.row(task).spec.kind).expect("a leased kind");
        let expiry = self.now + ttl;
        self.renewed(task, attempt, owner, expiry)
    }
    pub fn renewed(self, task: TaskId, attempt: u32, owner: Owner, expiry: u64) -> Self {
        let f = fence(task, attempt, owner);
        self.answer(
            Sender::Worker(owner),
            Op::Renew { fence: f },
            Response::Renewed { lease_expiry_ms: expiry },
            vec![Event::LeaseRenewed { fence: f, lease_expiry_ms: expiry }],
            &[(task, &|t: &mut Row| t.lease_expiry_ms = Some(expiry))],
        )
    }
    /// A recovery request `request` from `by` releases `task` from its holder.
    pub fn released_by(self, task: TaskId, by: Owner, request: Op, cause: ReleaseCause) -> Self {
        let row = self.row(task);
        let holder = fence(task, row.attempt, row.owner.expect("a released task is leased"));
        self.answer(
            Sender::Worker(by),
            request,
            Response::Released { tasks: 1 },
            vec![Event::LeaseReleased { fence: holder, cause }],
            &[(task, &|t: &mut Row| {
                t.state = TaskState::Ready;
                t.owner = None;
                t.lease_expiry_ms = None;
            })],
        )
    }
    /// Reclaim of an expired lease, asked by worker `by`.
    pub fn released(self, task: TaskId, _attempt: u32, by: Owner) -> Self {
        self.released_by(task, by, Op::ReclaimExpired { by }, ReleaseCause::Expired)
    }
    /// Same-owner recovery by the holder, listing `running`.
    pub fn orphaned(self, task: TaskId, owner: Owner, running: Vec<TaskId>) -> Self {
        let as_of_ms = self.now;
        let request = Op::ReleaseOrphans { owner, running, older_than_ms: 10_000, as_of_ms };
        self.released_by(task, owner, request, ReleaseCause::Orphaned)
    }
    pub fn completed(self, task: TaskId, attempt: u32, owner: Owner) -> Self {
        self.completed_as(Reply::Sent, task, attempt, owner)
    }
    /// A committed completion whose answer met `reply`.
    pub fn completed_as(self, reply: Reply, task: TaskId, attempt: u32, owner: Owner) -> Self {
        let f = fence(task, attempt, owner);
        let row = self.row(task);
        let mut events = vec![Event::WriteApplied {
            fence: f,
            write: WriteKind::Complete,
            retries: row.retries,
            retry_at_ms: None,
            terminal: true,
        }];
        if let (TaskKind::IndexBuild, Some(index)) = (row.spec.kind, row.spec.index) {
            if !self.materialized.contains(&index) {
                events.push(Event::IndexMaterialized { index, task });
            }
        }
        if let Some(stage) = row.spec.stage.filter(|s| self.stages.get(s).is_some_and(|r| r.task == Some(task))) {
            events.push(Event::StageDone { stage, task });
        }
        self.answer_as(
            reply,
            Sender::Worker(owner),
            Op::Complete { fence: f },
            Response::Applied { retries: row.retries, retry_at_ms: None },
            events,
            &[(task, &|t: &mut Row| {
                t.state = TaskState::Done;
                t.owner = None;
                t.lease_expiry_ms = None;
            })],
        )
    }
    /// A committed failure: retried at `retry_at` (`None`: the task died).
    pub fn failed(self, task: TaskId, attempt: u32, owner: Owner, retries: u32, retry_at: Option<u64>) -> Self {
        let f = fence(task, attempt, owner);
        self.answer(
            Sender::Worker(owner),
            Op::Fail { fence: f, error: TaskError::Conflict },
            Response::Applied { retries, retry_at_ms: retry_at },
            vec![Event::WriteApplied {
                fence: f,
                write: WriteKind::Fail,
                retries,
                retry_at_ms: retry_at,
                terminal: retry_at.is_none(),
            }],
            &[(task, &|t: &mut Row| {
                t.retries = retries;
                t.owner = None;
                t.lease_expiry_ms = None;
                match retry_at {
                    Some(at) => {
                        t.state = TaskState::Ready;
                        t.retry_at_ms = at;
                    }
                    None => t.state = TaskState::Dead,
                }
            })],
        )
    }
    pub fn cleared_link(self, task: TaskId, attempt: u32, owner: Owner) -> Self {
        let f = fence(task, attempt, owner);
        let row = self.row(task);
        let stage = row.spec.stage.expect("a stage task");
        self.answer(
            Sender::Worker(owner),
            Op::ClearStageLink { fence: f },
            Response::Applied { retries: row.retries, retry_at_ms: None },
            vec![
                Event::StageDone { stage, task },
                Event::WriteApplied {
                    fence: f,
                    write: WriteKind::ClearStageLink,
                    retries: row.retries,
                    retry_at_ms: None,
                    terminal: false,
                },
            ],
            &[],
        )
    }
    pub fn heartbeat(self, owner: Owner) -> Self {
        self.answer(
            Sender::Worker(owner),
            Op::Heartbeat { owner },
            Response::Ack,
            vec![Event::HeartbeatApplied { owner }],
            &[],
        )
    }
    /// The store answers a query for `index` (asked by a fresh client call).
    /// "Not materialized" comes once the query's 1 s lag ran out, as a
    /// store answers it; "materialized" at once.
    pub fn answered(self, index: IndexId, materialized: bool) -> Self {
        let wait_ms = if materialized { 0 } else { 1_000 };
        self.answered_after(index, materialized, wait_ms)
    }
    /// The store answers a query for `index` `wait_ms` after it arrived.
    pub fn answered_after(mut self, index: IndexId, materialized: bool, wait_ms: u64) -> Self {
        let call = self.call();
        self.query_answer(Sender::Client(call), index, materialized, wait_ms)
    }
    fn query_answer(self, from: Sender, index: IndexId, materialized: bool, wait_ms: u64) -> Self {
        let (h, req) = self.arrive(from, Op::QueryIndex { index, lag_timeout_ms: 1000 });
        let at = h.now + wait_ms;
        let response = Response::Query { materialized };
        h.at(at).ev(Event::QueryAnswered { index, materialized, waited_ms: wait_ms }).fact(Fact::Answered {
            req,
            response,
            commit: Commit::default(),
            reply: Reply::Sent,
        })
    }
    /// The application asks about `index` and is told `materialized`, with
    /// the store's answer `store` delivered to it (`None`: none arrived).
    pub fn queried(self, index: IndexId, store: Option<bool>, materialized: bool) -> Self {
        self.queried_after(index, store, materialized, 0)
    }
    /// As `queried`, with the application told `gap_ms` after the store sent
    /// its answer.
    pub fn queried_after(mut self, index: IndexId, store: Option<bool>, materialized: bool, gap_ms: u64) -> Self {
        let call = self.call();
        let what = ClientCall::Query { index, lag_timeout_ms: 1000 };
        let mut h = self.fact(Fact::ClientCalled { call, client: call, what });
        h = match store {
            Some(m) => h.query_answer(Sender::Client(call), index, m, if m { 0 } else { 1_000 }),
            None => h,
        };
        let at = h.now + gap_ms;
        h.at(at)
            .ev(Event::QueryResult { index, materialized })
            .fact(Fact::ClientAnswered { call, answer: ClientAnswer::Queried { materialized } })
    }

    /// The application asks about `index`, the store refuses the query at
    /// once, and the application is told "not materialized".
    pub fn queried_refused(mut self, index: IndexId) -> Self {
        let call = self.call();
        let what = ClientCall::Query { index, lag_timeout_ms: 1000 };
        let refused = Response::Rejected { reason: Refusal::TimedOut };
        self.fact(Fact::ClientCalled { call, client: call, what })
            .answer(Sender::Client(call), Op::QueryIndex { index, lag_timeout_ms: 1000 }, refused, vec![], &[])
            .ev(Event::QueryResult { index, materialized: false })
            .fact(Fact::ClientAnswered { call, answer: ClientAnswer::Queried { materialized: false } })
    }

    // ---- workers and bodies ----
    pub fn permit(self, owner: Owner, task: TaskId, attempt: u32) -> Self {
        self.ev(Event::PermitAcquired { owner, task, attempt })
    }
    pub fn unpermit(self, owner: Owner, task: TaskId, attempt: u32) -> Self {
        self.ev(Event::PermitReleased { owner, task, attempt })
    }
    /// The engine starts the attempt and its body starts on `owner`.
    pub fn started(self, task: TaskId, attempt: u32, owner: Owner) -> Self {
        let f = fence(task, attempt, owner);
        let kind = self.tasks.get(&task).map_or(TaskKind::Job, |t| t.spec.kind);
        self.ev(Event::ExecutionStarted { fence: f }).fact(Fact::BodyStarted { fence: f, kind, on: owner })
    }
    /// The body returns (`ok`, or a conflict) and the engine says so.
    pub fn finished(self, task: TaskId, attempt: u32, owner: Owner, ok: bool) -> Self {
        let f = fence(task, attempt, owner);
        let error = (!ok).then_some(TaskError::Conflict);
        self.fact(Fact::BodyEnded { fence: f, on: owner, error }).ev(Event::ExecutionFinished { fence: f, error })
    }
    /// The application gets the completion callback and the engine says so.
    pub fn callback(self, task: TaskId, attempt: u32, owner: Owner) -> Self {
        let f = fence(task, attempt, owner);
        self.fact(Fact::Callback { fence: f, on: owner }).ev(Event::CallbackPublished { fence: f })
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
    pub fn note_sent(self, from: Owner, task: TaskId, retries: u32, retry_at_ms: u64) -> Self {
        self.fact(Fact::NoteSent { from, note: PeerNote { task, retries, retry_at_ms, from } })
    }

    /// An attempt of `task` on `owner` from `at` on: grant (the promised
    /// lease), permit, and a body that ends after 100 ms (`ok` or failed);
    /// its outcome is not recorded yet.
    pub fn attempt_body(self, at: u64, task: TaskId, attempt: u32, owner: Owner, ok: bool) -> Self {
        self.begun(at, task, attempt, owner).at(at + 100).finished(task, attempt, owner, ok)
    }

    /// One whole successful attempt of `task` on `owner`, from `at` on: its
    /// body (`attempt_body`), complete, callback, permit back.
    pub fn attempt_ok(self, at: u64, task: TaskId, attempt: u32, owner: Owner) -> Self {
        self.begun(at, task, attempt, owner).ended_ok(at + 100, task, attempt, owner)
    }

    /// At `at`: the grant of an attempt, its permit and its body's start.
    pub fn begun(self, at: u64, task: TaskId, attempt: u32, owner: Owner) -> Self {
        self.at(at).grant(task, attempt, owner).permit(owner, task, attempt).started(task, attempt, owner)
    }

    /// At `at`: a running attempt's body returns, and its completion,
    /// callback and permit's return follow.
    pub fn ended_ok(self, at: u64, task: TaskId, attempt: u32, owner: Owner) -> Self {
        self.at(at)
            .finished(task, attempt, owner, true)
            .completed(task, attempt, owner)
            .callback(task, attempt, owner)
            .unpermit(owner, task, attempt)
    }
}

/// May this request run as a statement of a transaction (in the histories
/// the cases write, as the built-in engine sends them)?
fn runs_in_txn(op: &Op) -> bool {
    matches!(op, Op::LeaseValid { .. } | Op::Complete { .. } | Op::Fail { .. } | Op::ClearStageLink { .. })
}

/// A ready job row, as an enqueue at `now` writes it.
pub(crate) fn new_row(id: TaskId, now: u64) -> Row {
    Row {
        id,
        spec: TaskSpec { kind: TaskKind::Job, group: None, stage: None, index: None, not_before_ms: 0, queue: None },
        state: TaskState::Ready,
        owner: None,
        attempt: 0,
        lease_expiry_ms: None,
        retries: 0,
        retry_at_ms: 0,
        updated_ms: now,
        repair_count: 0,
    }
}

/// The report of a history with no violation must still show every checker
/// at work: a plain run of every kind of thing the checkers judge.
#[test]
fn every_checker_evaluates_a_plain_history() {
    use leasesim_vocab::task::MaintenanceKind::Index;
    let (p1, p2) = (o(1, 1), o(2, 1));
    let history = H::new()
        .up(p1)
        .heartbeat(p1)
        .pipeline(9, 1)
        .created(1, TaskKind::Job)
        .created_index(2, 7)
        .created_stage(3, 9, 0)
        .at(10)
        .grant(1, 1, p1)
        .permit(p1, 1, 1)
        .started(1, 1, p1)
        .at(100)
        .finished(1, 1, p1, false)
        .failed(1, 1, p1, 1, Some(1_100))
        .note_sent(p1, 1, 1, 1_100)
        .unpermit(p1, 1, 1)
        .pass_started(p1, Index, 1)
        .pass_ended(p1, Index, 1)
        // Claims take due tasks in (retry time, id) order: t2 and t3 (due
        // since 0) before t1's retry (due at 1_100).
        .attempt_ok(1_100, 2, 1, p1)
        .queried(7, Some(true), true)
        .at(1_300)
        .grant(3, 1, p1)
        .permit(p1, 3, 1)
        .started(3, 1, p1)
        .at(1_400)
        .finished(3, 1, p1, true)
        .completed(3, 1, p1)
        .callback(3, 1, p1)
        .unpermit(p1, 3, 1)
        .attempt_ok(1_500, 1, 2, p1)
        .at(2_000)
        .heal()
        .heartbeat(p1)
        // t4's claim answer is lost; its lease expires and p2 reclaims it
        // while p1 is paused; p1 claims it again once it is back.
        .up(p2)
        .created(4, TaskKind::WorkflowTask)
        .at(2_100)
        .grant(4, 1, p1)
        .at(5_150)
        .paused(1)
        .at(5_200)
        .released(4, 1, p2)
        .killed(p2)
        .at(6_400)
        .resumed(1)
        .attempt_ok(6_450, 4, 2, p1)
        // t5 fails in one transaction: a lease check that locks the row,
        // then the failure, sent with COMMIT.
        .created(5, TaskKind::Job)
        .attempt_body(6_600, 5, 1, p1, false)
        .in_txn(p1, 1, false)
        .lease_checked(5, 1, p1, true)
        .at(6_800)
        .in_txn(p1, 1, true)
        .failed(5, 1, p1, 1, Some(7_800))
        .unpermit(p1, 5, 1)
        .attempt_ok(7_800, 5, 2, p1)
        .enqueue_given_up(3)
        // Two repair passes on their cadence.
        .at(8_000)
        .answer(Sender::Worker(p1), Op::Repair { by: p1 }, Response::Released { tasks: 0 }, vec![], &[])
        .at(11_000)
        .answer(Sender::Worker(p1), Op::Repair { by: p1 }, Response::Released { tasks: 0 }, vec![], &[])
        .at(20_000)
        .heartbeat(p1)
        // A stale lease check, told "not valid"; then p1 stops and leaves.
        .at(20_100)
        .answer(
            Sender::Worker(p1),
            Op::LeaseValid { fence: fence(1, 1, p1) },
            Response::Valid { valid: false },
            vec![],
            &[],
        )
        .at(20_200)
        .world(WorldEvent::StopRequested { owner: p1 })
        .at(20_300)
        .answer(Sender::Worker(p1), Op::Deregister { owner: p1 }, Response::Ack, vec![], &[])
        .at(20_400)
        .exited(p1)
        .end()
        .build();
    let mut spec = spec();
    spec.promises.cadences = vec![leasesim_vocab::promise::Cadence {
        pass: leasesim_vocab::promise::PassKind::Repair,
        interval_ms: 10_000,
        backoff_cap_ms: 10_000,
        late_ms: 1_000,
    }];
    let report = run_case_in("every_checker_evaluates_a_plain_history", &spec, history, PASS);
    for (name, _) in super::invariants() {
        let n = report.checks.get(name).copied().unwrap_or(0);
        assert!(n > 0, "{name} never evaluated: {:?}", report.checks);
    }
    assert_eq!(report.checks.len(), super::invariants().len());
}
