//! The checkers' own model of the world, rebuilt from ground truth alone.
//!
//! The store's rows come from the commits the harness read at the store seam
//! (`Fact::Answered`, `Fact::Drift`); bodies from the task-body seam;
//! liveness from process control and from the requests that reached the
//! store; the application's calls from the client seam. Engine events
//! (testimony) do not change the view: checkers that cross-check testimony
//! keep their own account of it. No engine logic is called here, only engine
//! types are read. `check()` applies each record to the view *after* every
//! checker has looked at it, so a checker always sees the world as it was
//! just before the record it is judging.

use leasesim_vocab::history::{Entry, Record, WorldEvent};
use leasesim_vocab::ids::{Fence, GroupId, IndexId, Owner, ProcId, StageRef, TaskId, TxnId};
use leasesim_vocab::op::{Op, Refusal, Response};
use leasesim_vocab::promise::{ReplacedTxnsEnd, TxnTimeoutFrom};
use leasesim_vocab::task::StageRow;
use leasesim_vocab::task::TaskError;
use leasesim_vocab::task::{QueueId, QueueRow, Row, TaskKind, TaskState};
use leasesim_vocab::truth::{ClientAnswer, ClientCall, Commit, Fact, Reply, Sender};
use std::collections::{BTreeMap, BTreeSet};

/// One task: its row as the store last committed it, and its history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskView {
    pub row: Row,
    pub created_ms: u64,
    /// The request whose transaction created it (`None`: seen first in a drift).
    pub created_by: Option<u64>,
    /// When it last became ready (created, released or failed and retried).
    pub ready_since_ms: u64,
    /// Its last failure, as the store seam saw it.
    pub last_failure: Option<Failure>,
    /// It last became ready through recovery (a dead holder's work
    /// released, an interrupted attempt returned): the engine's recovery
    /// delay applies before it is due.
    pub recovered: bool,
    /// When that recovery's transaction started (its first statement's
    /// answer, or the request's own start): the earliest statement time a
    /// store that stamps the start (`StatementTime::Start`) gives it.
    pub recovered_ms: u64,
    /// The not-before time the application asked for when a client call
    /// created it (`None`: no client call did, a worker's stage enqueue or
    /// a drift). Judged against, not the row's copy, which the engine wrote.
    pub asked_not_before_ms: Option<u64>,
    /// When a transaction last took its row's lock (a statement answered
    /// while the transaction was open).
    pub locked_ms: Option<u64>,
}

impl TaskView {
    pub fn kind(&self) -> TaskKind {
        self.row.spec.kind
    }

    pub fn stage(&self) -> Option<StageRef> {
        self.row.spec.stage
    }

    pub fn state(&self) -> TaskState {
        self.row.state
    }

    /// Done and dead are absorbing.
    pub fn terminal(&self) -> bool {
        self.row.state.is_terminal()
    }

    /// Is the task leased to exactly this attempt of this owner?
    pub fn held_by(&self, fence: &Fence) -> bool {
        held_by(&self.row, fence)
    }

    /// A short description of who holds the task, for messages.
    pub fn holder(&self) -> String {
        holder(&self.row)
    }

    /// Its not-before time: the one the application asked for, or the
    /// row's when no client call created it.
    pub fn not_before_ms(&self) -> u64 {
        self.asked_not_before_ms.unwrap_or(self.row.spec.not_before_ms)
    }
}

/// Is `row` leased to exactly this attempt of this owner?
pub fn held_by(row: &Row, fence: &Fence) -> bool {
    row.state == TaskState::Leased && row.attempt == fence.attempt && row.owner == Some(fence.owner)
}

/// A short description of who holds a task row, for messages.
pub fn holder(row: &Row) -> String {
    match (row.state, row.owner) {
        (TaskState::Leased, Some(o)) => format!("attempt {} ({o}) holds the task", row.attempt),
        (TaskState::Leased, None) => format!("attempt {} holds the task", row.attempt),
        (TaskState::Ready, _) => format!("the task is not leased (last attempt {})", row.attempt),
        (TaskState::Done, _) => "the task is done".to_string(),
        (TaskState::Dead, _) => "the task is dead".to_string(),
    }
}

/// A failure of a task, as the store seam saw it: when its statement
/// committed and when the store took it (its `now()` if the store reads
/// its clock at a statement's start), the failures spent by then, and when
/// the task was due before it (a job queue counts backoff from that too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    pub committed_ms: u64,
    pub started_ms: u64,
    pub retries: u32,
    pub previous_due_ms: u64,
}

/// One worker process incarnation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnerView {
    pub up_ms: Option<u64>,
    pub killed_ms: Option<u64>,
    /// When its first request reached the store.
    pub first_seen_ms: Option<u64>,
    /// When the store last applied a heartbeat that it sent.
    pub last_heartbeat_ms: Option<u64>,
    /// Every applied heartbeat's time, in order (what a transaction that
    /// began earlier saw of the owner's life).
    pub heartbeats_ms: Vec<u64>,
    /// When the store applied its `Deregister` (it said it is leaving and
    /// keeps nothing alive from then on).
    pub deregistered_ms: Option<u64>,
    /// When the world asked it to stop (a graceful stop): from then on it
    /// is leaving, and owes no claim or periodic pass.
    pub stop_requested_ms: Option<u64>,
    /// Task bodies running on it now.
    pub bodies: BTreeSet<Fence>,
    /// Attempts whose body ended and whose outcome answer has not reached it
    /// yet, with the time the body ended.
    pub finalizing: BTreeMap<Fence, u64>,
}

impl OwnerView {
    pub fn alive(&self) -> bool {
        self.up_ms.is_some() && self.killed_ms.is_none()
    }
}

/// One worker process (over all its incarnations).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcView {
    /// Pause intervals `[paused, resumed)`; an open one has no end yet.
    pub pauses: Vec<(u64, Option<u64>)>,
    /// Partition intervals, likewise.
    pub partitions: Vec<(u64, Option<u64>)>,
    pub offset_ms: i64,
}

fn overlaps(intervals: &[(u64, Option<u64>)], from: u64, to: u64) -> bool {
    intervals.iter().any(|&(start, end)| start <= to && end.is_none_or(|e| e > from))
}

fn open(intervals: &mut Vec<(u64, Option<u64>)>, now: u64) {
    if intervals.last().is_none_or(|(_, end)| end.is_some()) {
        intervals.push((now, None));
    }
}

fn close(intervals: &mut [(u64, Option<u64>)], now: u64) {
    if let Some((_, end @ None)) = intervals.last_mut() {
        *end = Some(now);
    }
}

impl ProcView {
    pub fn paused_now(&self) -> bool {
        self.pauses.last().is_some_and(|(_, end)| end.is_none())
    }

    /// Was the process paused at any instant of `[from, to]`?
    pub fn paused_between(&self, from: u64, to: u64) -> bool {
        overlaps(&self.pauses, from, to)
    }

    /// Was it cut off from the network at any instant of `[from, to]`?
    pub fn partitioned_between(&self, from: u64, to: u64) -> bool {
        overlaps(&self.partitions, from, to)
    }
}

/// One request that reached the store and is not finished yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestView {
    pub from: Sender,
    /// The request, or for a statement of a transaction the statement
    /// itself (its transaction is in `txn`).
    pub request: Op,
    /// The transaction a statement or rollback belongs to, and whether the
    /// statement was sent with COMMIT.
    pub txn: Option<(TxnId, bool)>,
    pub arrived_ms: u64,
    /// When the engine's store took it (its arrival, unless the seam held it).
    pub handed_ms: Option<u64>,
    /// The store's answer: when, what, and what became of it.
    pub answer: Option<(u64, Response, Reply)>,
    /// A second delivery of a request: its answer reaches nobody.
    pub duplicate: bool,
    /// It keeps its transaction busy until answered (`TxnView::busy`).
    pub busies: bool,
}

/// One execution of a task body, as the body saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyView {
    pub on: Owner,
    pub kind: TaskKind,
    pub started_ms: u64,
    pub ended_ms: Option<u64>,
    pub error: Option<TaskError>,
    /// Dropped before it returned (its process died, or it was cancelled).
    pub stopped: bool,
}

/// One stage row and when it was done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageView {
    pub row: StageRow,
    pub created_ms: u64,
    /// When it was done, and the task linked to it then.
    pub done: Option<(u64, Option<TaskId>)>,
}

/// One open transaction, as the store seam saw it: when its first
/// statement applied, and the task rows its statements locked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TxnView {
    pub opened_ms: u64,
    /// When its `txn_timeout_ms` started counting, as the engine's
    /// `txn_timeout_from` says: when it opened, or when its latest
    /// statement was answered.
    pub counted_from_ms: u64,
    pub locks: BTreeSet<TaskId>,
    /// Owners whose tasks a recovery statement of it released
    /// (`ReleaseOwners`): it judged them dead from what it read.
    pub releases: BTreeSet<Owner>,
    /// Its statements that reached the store while it was open and are not
    /// answered yet, where the timeout counts idle time: PostgreSQL's idle
    /// clock does not run while a statement is in progress, even one the
    /// store is slow to run (a stall held it).
    pub busy: u32,
}

impl TxnView {
    /// Is it open at `now` by its timeout?
    pub fn in_time(&self, now: u64, txn_timeout_ms: u64) -> bool {
        self.busy > 0 || self.counted_from_ms + txn_timeout_ms > now
    }
}

/// How a transaction ended without a commit or a rollback of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnEnd {
    /// Open for `txn_timeout_ms`.
    TimedOut,
    /// A newer incarnation of its process reached the store (by the request
    /// the engine's `replaced_txns_end` names).
    Superseded,
    /// The store process died.
    StoreCrashed,
}

/// One call of the application's client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallView {
    /// The application client that made the call.
    pub client: u64,
    pub what: ClientCall,
    pub called_ms: u64,
    pub answer: Option<(u64, ClientAnswer)>,
}

#[derive(Debug, Clone, Default)]
pub struct View {
    /// Per task: when the last transaction holding a lock on its row ended
    /// (its commit, rollback, refusal, timeout or lost connection).
    pub unlocked_ms: BTreeMap<TaskId, u64>,
    concurrency: u32,
    finalize_deadline_ms: u64,
    /// How long a process asked to stop lets its attempts run on.
    stop_grace_ms: u64,
    /// The engine tries an outcome's transaction again after a retryable
    /// refusal (`Promises::outcome_retry`): such a refusal does not end it.
    outcome_retry: bool,
    pub now_ms: u64,
    pub heal_ms: Option<u64>,
    pub end_ms: Option<u64>,
    pub tasks: BTreeMap<TaskId, TaskView>,
    /// Ids of the tasks that are ready now.
    pub ready: BTreeSet<TaskId>,
    /// Ids of the tasks that are leased now.
    pub leased: BTreeSet<TaskId>,
    pub stages: BTreeMap<StageRef, StageView>,
    /// Pipeline -> when its first stage row appeared.
    pub pipelines: BTreeMap<GroupId, u64>,
    /// Index -> (time it materialized, the task whose completion did it).
    pub materialized: BTreeMap<IndexId, (u64, Option<TaskId>)>,
    pub owners: BTreeMap<Owner, OwnerView>,
    pub procs: BTreeMap<ProcId, ProcView>,
    /// Requests that reached the store and are not finished. Boxed: a
    /// request is large, and a map's inserts and removes move its values
    /// (unboxed, those moves were the largest cost of judgement).
    pub requests: BTreeMap<u64, Box<RequestView>>,
    /// Every body execution, by attempt.
    pub bodies: BTreeMap<Fence, BodyView>,
    /// Every grant the store committed: attempt -> commit time.
    pub grants: BTreeMap<Fence, u64>,
    pub calls: BTreeMap<u64, CallView>,
    /// Idempotency key of an enqueue -> the task it created.
    pub enqueue_keys: BTreeMap<u64, TaskId>,
    /// Done task -> the attempt whose completion made it done.
    pub completed_by: BTreeMap<TaskId, Fence>,
    /// When the store process was down (crash, restart or still down).
    pub store_down: Vec<(u64, Option<u64>)>,
    pub txn_timeout_ms: u64,
    /// Transactions open now.
    pub txns: BTreeMap<TxnId, TxnView>,
    /// Transactions that ended (a statement of one never reopens it).
    pub txn_ended: BTreeSet<TxnId>,
    /// The newest incarnation of each process the store has heard from
    /// by a claim or a heartbeat (what tells a store its tasks' holders are
    /// replaced).
    pub newest: BTreeMap<ProcId, u32>,
    /// The newest incarnation of each process the store took a request of
    /// that ends an older one's transactions (`replaced_txns_end`): any
    /// request, or only a claim or heartbeat (then it is `newest`).
    pub newest_connected: BTreeMap<ProcId, u32>,
    /// The engine's promise of which request of a newer incarnation ends
    /// the older ones' transactions.
    pub replaced_txns_end: ReplacedTxnsEnd,
    /// The engine's promise of from when `txn_timeout_ms` counts.
    pub txn_timeout_from: TxnTimeoutFrom,
    /// Transactions that ended without a commit or rollback of their own,
    /// and how, in the order they ended (for coverage and messages).
    pub abandoned: Vec<(TxnId, TxnEnd)>,
    /// Named queues' lock rows, as the store last committed them.
    pub queues: BTreeMap<QueueId, QueueRow>,
    /// Queues held now by a holder that runs one of their tasks: their
    /// other tasks wait by design (a queue runs one task at a time).
    pub queues_busy: BTreeSet<QueueId>,
    /// When each queue last stopped being busy so.
    pub queue_free_since: BTreeMap<QueueId, u64>,
}

impl View {
    pub fn new(spec: &crate::Spec) -> Self {
        View {
            concurrency: spec.promises.concurrency,
            finalize_deadline_ms: spec.promises.finalize_deadline_ms,
            stop_grace_ms: spec.promises.stop_grace_ms,
            outcome_retry: spec.promises.outcome_retry,
            txn_timeout_ms: spec.promises.txn_timeout_ms,
            replaced_txns_end: spec.promises.replaced_txns_end,
            txn_timeout_from: spec.promises.txn_timeout_from,
            ..View::default()
        }
    }

    /// The tasks `commit` created for client call `call` get the
    /// not-before time the application asked for in it.
    fn note_asked(&mut self, call: u64, commit: &Commit) {
        let Some(ClientCall::Enqueue { spec }) = self.calls.get(&call).map(|c| &c.what) else { return };
        let asked_ms = spec.not_before_ms;
        for change in commit.tasks.iter().filter(|c| c.before.is_none()) {
            if let Some(t) = self.tasks.get_mut(&change.after.id) {
                t.asked_not_before_ms = Some(asked_ms);
            }
        }
    }

    pub fn task(&self, id: TaskId) -> Option<&TaskView> {
        self.tasks.get(&id)
    }

    pub fn owner(&self, owner: Owner) -> Option<&OwnerView> {
        self.owners.get(&owner)
    }

    pub fn killed(&self, owner: Owner) -> Option<u64> {
        self.owners.get(&owner).and_then(|o| o.killed_ms)
    }

    pub fn request(&self, req: u64) -> Option<&RequestView> {
        self.requests.get(&req).map(|r| &**r)
    }

    pub fn paused_between(&self, proc: ProcId, from: u64, to: u64) -> bool {
        self.procs.get(&proc).is_some_and(|p| p.paused_between(from, to))
    }

    /// What kept `owner` from acting in `[from, to]`, if anything: killed by
    /// `to`, or its process paused or cut off within it. The excuse
    /// `outcome-kept` and `callback-kept` share for work its process lost.
    pub fn kept_from_acting(&self, owner: Owner, from: u64, to: u64) -> Option<&'static str> {
        if self.killed(owner).is_some_and(|k| k <= to) {
            return Some("it was killed");
        }
        // A stop cancels what still runs when its grace is over.
        let grace_over = self.owners.get(&owner).and_then(|o| o.stop_requested_ms).map(|s| s + self.stop_grace_ms);
        if grace_over.is_some_and(|g| g <= to) {
            return Some("its stop's grace ran out");
        }
        let p = self.procs.get(&owner.proc)?;
        if p.paused_between(from, to) {
            return Some("its process was paused");
        }
        p.partitioned_between(from, to).then_some("its process was cut off")
    }

    /// Was `owner` up, alive, running and connected during all of `[from, to]`?
    pub fn live_throughout(&self, owner: Owner, from: u64, to: u64) -> bool {
        let Some(o) = self.owners.get(&owner) else { return false };
        let p = self.procs.get(&owner.proc);
        o.up_ms.is_some_and(|up| up <= from)
            && o.killed_ms.is_none_or(|k| k > to)
            && p.is_none_or(|p| !p.paused_between(from, to) && !p.partitioned_between(from, to))
    }

    /// `live_throughout`, and not asked to stop by `to`: a process that is
    /// leaving owes no claim and no periodic pass (it still owes what keeps
    /// its running attempts alive).
    pub fn serving_throughout(&self, owner: Owner, from: u64, to: u64) -> bool {
        self.live_throughout(owner, from, to)
            && self.owners.get(&owner).is_some_and(|o| o.stop_requested_ms.is_none_or(|s| s > to))
    }

    /// Slots of `owner` in use at `now`: bodies running, and attempts whose
    /// outcome is still being recorded (at most the finalization deadline).
    pub fn busy(&self, owner: Owner, now: u64) -> u32 {
        self.owners.get(&owner).map_or(0, |o| self.busy_of(o, now))
    }

    /// `busy` for an owner already at hand (checkers that walk every owner
    /// at every record ask this often).
    pub fn busy_of(&self, o: &OwnerView, now: u64) -> u32 {
        let finalizing = o.finalizing.values().filter(|&&ended| now < ended + self.finalize_deadline_ms).count();
        (o.bodies.len() + finalizing) as u32
    }

    /// Is attempt `fence` active on its owner at `now`: its body running, or
    /// its outcome still being recorded (within the finalization deadline)?
    pub fn active(&self, fence: &Fence, now: u64) -> bool {
        self.owners.get(&fence.owner).is_some_and(|o| {
            o.bodies.contains(fence)
                || o.finalizing.get(fence).is_some_and(|&ended| now < ended + self.finalize_deadline_ms)
        })
    }

    pub fn concurrency(&self) -> u32 {
        self.concurrency
    }

    /// The heal time, or `end_ms` when the history has no heal.
    pub fn heal_or(&self, end_ms: u64) -> u64 {
        self.heal_ms.unwrap_or(end_ms)
    }

    /// The open transaction (other than `except`) that holds a lock on the
    /// task row, if any.
    pub fn lock_holder(&self, task: TaskId, except: Option<TxnId>) -> Option<TxnId> {
        self.txns.iter().find(|(id, t)| Some(**id) != except && t.locks.contains(&task)).map(|(id, _)| *id)
    }

    /// Has the store heard from a newer incarnation of this owner's process?
    pub fn superseded(&self, owner: Owner) -> bool {
        self.newest.get(&owner.proc).is_some_and(|&n| n > owner.incarnation)
    }

    /// Has the store taken a request of a newer incarnation of this
    /// owner's process that ends this one's transactions (its connections
    /// gone)?
    pub fn disconnected(&self, owner: Owner) -> bool {
        self.superseded(owner) || self.newest_connected.get(&owner.proc).is_some_and(|&n| n > owner.incarnation)
    }

    /// Is the task row locked at `now` by a transaction still open then
    /// (not past its timeout, its process not replaced)?
    pub fn locked_at(&self, task: TaskId, now: u64) -> bool {
        self.txns.iter().any(|(id, t)| {
            let superseded = self.disconnected(id.owner);
            t.locks.contains(&task) && t.in_time(now, self.txn_timeout_ms) && !superseded
        })
    }

    /// When the last transaction holding a lock on the task's row ended, as
    /// of `now` (0: never locked), one whose timeout ran out before `now`
    /// included even if no record has ended it yet.
    pub fn unlocked_at(&self, task: TaskId, now: u64) -> u64 {
        let ended = self.unlocked_ms.get(&task).copied().unwrap_or(0);
        self.txns
            .values()
            .filter(|t| t.locks.contains(&task) && !t.in_time(now, self.txn_timeout_ms))
            .map(|t| t.counted_from_ms + self.txn_timeout_ms)
            .fold(ended, u64::max)
    }

    /// Transactions open past `txn_timeout_ms` end as the store ends them.
    fn expire_txns(&mut self, now: u64) {
        let timeout_ms = self.txn_timeout_ms;
        let expired: Vec<TxnId> =
            self.txns.iter().filter(|(_, t)| !t.in_time(now, timeout_ms)).map(|(id, _)| *id).collect();
        for txn in expired {
            // It ended when its timeout ran out, not when a record noticed.
            let ended_ms = self.txns.get(&txn).map_or(now, |t| t.counted_from_ms + timeout_ms);
            self.end_txn_at(txn, ended_ms);
            self.abandoned.push((txn, TxnEnd::TimedOut));
        }
    }

    /// A claim or heartbeat of a newer incarnation of a process reached
    /// the store: its older ones hold nothing any more.
    fn saw_incarnation(&mut self, owner: Owner) {
        let newest = self.newest.entry(owner.proc).or_insert(owner.incarnation);
        if owner.incarnation < *newest {
            return;
        }
        *newest = owner.incarnation;
        self.saw_connection(owner);
    }

    /// A request of a newer incarnation of a process that ends the older
    /// ones' transactions reached the store: they are gone with their
    /// connections.
    fn saw_connection(&mut self, owner: Owner) {
        let newest = self.newest_connected.entry(owner.proc).or_insert(owner.incarnation);
        if owner.incarnation < *newest {
            return;
        }
        *newest = owner.incarnation;
        if self.txns.is_empty() {
            return;
        }
        let gone: Vec<TxnId> = self
            .txns
            .keys()
            .filter(|t| t.owner.proc == owner.proc && t.owner.incarnation < owner.incarnation)
            .copied()
            .collect();
        for txn in gone {
            self.end_txn(txn);
            self.abandoned.push((txn, TxnEnd::Superseded));
        }
    }

    fn end_txn(&mut self, txn: TxnId) {
        self.end_txn_at(txn, self.now_ms);
    }

    /// `txn` ended at `ended_ms`: its row locks are free from then on.
    fn end_txn_at(&mut self, txn: TxnId, ended_ms: u64) {
        if let Some(t) = self.txns.remove(&txn) {
            for task in t.locks {
                let unlocked = self.unlocked_ms.entry(task).or_insert(ended_ms);
                *unlocked = (*unlocked).max(ended_ms);
            }
        }
        self.txn_ended.insert(txn);
    }

    /// A statement of an open transaction whose timeout counts idle time
    /// reached the store: the transaction is busy until it is answered.
    fn statement_arrived(&mut self, now: u64, mut r: RequestView) -> RequestView {
        let timeout_ms = self.txn_timeout_ms;
        if let (TxnTimeoutFrom::Idle, Some((txn, _))) = (self.txn_timeout_from, r.txn) {
            let open = self.txns.get_mut(&txn).filter(|t| t.in_time(now, timeout_ms));
            if let Some(t) = open.filter(|_| !self.txn_ended.contains(&txn)) {
                t.busy += 1;
                r.busies = true;
            }
        }
        r
    }

    /// Its statement answered (or gone): the transaction `statement_arrived` marked is
    /// idle again, unless another statement of it is in progress.
    fn statement_settled(&mut self, r: &RequestView) {
        let Some((txn, _)) = r.txn.filter(|_| r.busies) else { return };
        if let Some(t) = self.txns.get_mut(&txn) {
            debug_assert!(t.busy > 0, "a busy statement of {txn} counted once");
            t.busy = t.busy.saturating_sub(1);
        }
    }

    /// A statement or rollback of `txn` was answered.
    fn txn_answered(&mut self, r: &RequestView, response: &Response) {
        let Some((txn, commit)) = r.txn else { return };
        let refused = matches!(response, Response::Rejected { reason: Refusal::TxnClosed | Refusal::TimedOut });
        if matches!(r.request, Op::Rollback { .. }) || refused || commit {
            self.end_txn(txn);
            return;
        }
        if !self.txns.contains_key(&txn) && !self.txn_ended.contains(&txn) {
            let opened = TxnView {
                opened_ms: self.now_ms,
                counted_from_ms: self.now_ms,
                locks: BTreeSet::new(),
                releases: BTreeSet::new(),
                busy: 0,
            };
            self.txns.insert(txn, opened);
        }
        // PostgreSQL's idle timeout counts from the end of the latest
        // statement: a transaction busy for longer than it stays open.
        if let (TxnTimeoutFrom::Idle, Some(t)) = (self.txn_timeout_from, self.txns.get_mut(&txn)) {
            t.counted_from_ms = self.now_ms;
        }
        // A recovery statement inside the transaction locks every row it
        // releases: those of the owners it names (visible at its COMMIT).
        if let (Op::ReleaseOwners { owners, .. }, Response::Released { .. } | Response::Rows { .. }) =
            (&r.request, response)
        {
            let held: Vec<TaskId> = self
                .leased
                .iter()
                .copied()
                .filter(|id| self.tasks.get(id).and_then(|t| t.row.owner).is_some_and(|o| owners.contains(&o)))
                .collect();
            for id in &held {
                if let Some(t) = self.tasks.get_mut(id) {
                    t.locked_ms = Some(self.now_ms);
                }
            }
            if let Some(t) = self.txns.get_mut(&txn) {
                t.locks.extend(held);
                t.releases.extend(owners.iter().copied());
            }
            return;
        }
        let fence = match &r.request {
            Op::LeaseValid { fence } | Op::Complete { fence } | Op::Fail { fence, .. } => fence,
            Op::ClearStageLink { fence } => fence,
            _ => return,
        };
        // A write the store answered "applied" locks the row it matched (not
        // a done row a completion's retry reads), even a row its fence should
        // not have matched: the store holds that lock whether or not it
        // should (fenced-completion judges the stale write at its commit),
        // and skips the row meanwhile. A lease check locks the row it found
        // valid.
        let selected = self.tasks.get(&fence.task).is_some_and(|t| t.held_by(fence) || !t.terminal());
        let locked = match response {
            Response::Valid { valid } => *valid,
            Response::Applied { .. } => selected,
            _ => false,
        };
        if let (true, Some(t)) = (locked, self.txns.get_mut(&txn)) {
            t.locks.insert(fence.task);
            if let Some(task) = self.tasks.get_mut(&fence.task) {
                task.locked_ms = Some(self.now_ms);
            }
        }
    }

    /// Applies one record.
    pub fn apply(&mut self, rec: &Record) {
        let now = rec.at_ms;
        self.now_ms = now;
        if !self.txns.is_empty() {
            self.expire_txns(now);
        }
        match &rec.entry {
            Entry::World(w) => self.apply_world(now, w),
            Entry::Truth(f) => self.apply_fact(now, f),
            Entry::Engine(_) => {}
        }
    }

    fn apply_world(&mut self, now: u64, w: &WorldEvent) {
        match w {
            WorldEvent::ProcessUp { owner } => {
                self.owners.entry(*owner).or_default().up_ms.get_or_insert(now);
                self.procs.entry(owner.proc).or_default();
            }
            // An exit ends an incarnation as a kill does.
            WorldEvent::ProcessKilled { owner } | WorldEvent::ProcessExited { owner } => {
                let o = self.owners.entry(*owner).or_default();
                o.killed_ms.get_or_insert(now);
                o.finalizing.clear();
                for fence in std::mem::take(&mut o.bodies) {
                    if let Some(b) = self.bodies.get_mut(&fence) {
                        b.ended_ms.get_or_insert(now);
                        b.stopped = true;
                    }
                }
            }
            WorldEvent::ProcessPaused { proc } => open(&mut self.procs.entry(*proc).or_default().pauses, now),
            WorldEvent::ProcessResumed { proc } => close(&mut self.procs.entry(*proc).or_default().pauses, now),
            WorldEvent::ClockOffset { proc, offset_ms } => {
                self.procs.entry(*proc).or_default().offset_ms = *offset_ms;
            }
            WorldEvent::StopRequested { owner } => {
                self.owners.entry(*owner).or_default().stop_requested_ms.get_or_insert(now);
            }
            WorldEvent::Fault { .. } => {}
            WorldEvent::Heal => {
                self.heal_ms.get_or_insert(now);
            }
            WorldEvent::End => {
                self.end_ms.get_or_insert(now);
            }
        }
    }

    fn apply_fact(&mut self, now: u64, f: &Fact) {
        match f {
            Fact::Arrived { req, from, request, duplicate } => {
                if let Sender::Worker(owner) = from {
                    self.owners.entry(*owner).or_default().first_seen_ms.get_or_insert(now);
                    // A store that ends a replaced incarnation's transactions
                    // at a newer one's first request does so on its arrival
                    // (graphile's `StoreSeam::arrived`), answered or not. (A
                    // store that was down ended them all when it went down.)
                    if self.replaced_txns_end == ReplacedTxnsEnd::AnyRequest {
                        self.saw_connection(*owner);
                    }
                }
                let view = RequestView {
                    from: *from,
                    request: request.statement().clone(),
                    txn: match request {
                        Op::Exec { txn, commit, .. } => Some((*txn, *commit)),
                        Op::Rollback { txn } => Some((*txn, false)),
                        // A COMMIT on its own ends its transaction as a
                        // statement sent with COMMIT does.
                        Op::Commit { txn } => Some((*txn, true)),
                        _ => None,
                    },
                    arrived_ms: now,
                    handed_ms: None,
                    answer: None,
                    duplicate: *duplicate,
                    busies: false,
                };
                let view = self.statement_arrived(now, view);
                self.requests.insert(*req, Box::new(view));
            }
            Fact::Dropped { req } => {
                if let Some(r) = self.requests.remove(req) {
                    self.statement_settled(&r);
                }
            }
            Fact::Refused { req, response, .. } => {
                if let Some(r) = self.requests.remove(req) {
                    self.statement_settled(&r);
                    // A refused statement's transaction is aborted with it.
                    if let Some((txn, _)) = r.txn {
                        self.end_txn(txn);
                    }
                    self.answer_reached(&r, now, Some(response));
                }
            }
            Fact::Handed { req } => {
                if let Some(r) = self.requests.get_mut(req) {
                    r.handed_ms = Some(now);
                }
                // The store sees who claims when it takes the claim (a long
                // poll is answered later).
                if let Some(Op::Heartbeat { owner } | Op::Claim { owner, .. }) =
                    self.requests.get(req).map(|r| &r.request)
                {
                    let owner = *owner;
                    self.saw_incarnation(owner);
                }
            }
            Fact::Answered { req, response, commit, reply } => self.apply_answer(now, *req, response, commit, *reply),
            Fact::Replied { req } => {
                if let Some(mut r) = self.requests.remove(req) {
                    let answer = r.answer.take();
                    self.answer_reached(&r, now, answer.as_ref().map(|(_, response, _)| response));
                }
            }
            Fact::Drift { commit } => self.apply_commit(now, None, None, commit, now, None),
            Fact::BodyStarted { fence, kind, on } => {
                let body =
                    BodyView { on: *on, kind: *kind, started_ms: now, ended_ms: None, error: None, stopped: false };
                self.bodies.insert(*fence, body);
                self.owners.entry(*on).or_default().bodies.insert(*fence);
            }
            Fact::BodyEnded { fence, on, error } => {
                if let Some(b) = self.bodies.get_mut(fence) {
                    b.ended_ms.get_or_insert(now);
                    b.error = *error;
                }
                let o = self.owners.entry(*on).or_default();
                if o.bodies.remove(fence) && o.killed_ms.is_none() {
                    o.finalizing.insert(*fence, now);
                }
            }
            Fact::BodyStopped { fence, on } => {
                if let Some(b) = self.bodies.get_mut(fence) {
                    b.ended_ms.get_or_insert(now);
                    b.stopped = true;
                }
                self.owners.entry(*on).or_default().bodies.remove(fence);
            }
            Fact::ClientCalled { call, client, what } => {
                let view = CallView { client: *client, what: what.clone(), called_ms: now, answer: None };
                self.calls.insert(*call, view);
            }
            Fact::ClientAnswered { call, answer } => {
                if let Some(c) = self.calls.get_mut(call) {
                    c.answer = Some((now, *answer));
                }
            }
            Fact::Partitioned { proc } => open(&mut self.procs.entry(*proc).or_default().partitions, now),
            Fact::Rejoined { proc } => close(&mut self.procs.entry(*proc).or_default().partitions, now),
            Fact::StoreCrashed { .. } => {
                open(&mut self.store_down, now);
                for (txn, _) in std::mem::take(&mut self.txns) {
                    self.txn_ended.insert(txn);
                    self.abandoned.push((txn, TxnEnd::StoreCrashed));
                }
            }
            Fact::StoreRestarted => close(&mut self.store_down, now),
            Fact::Callback { .. }
            | Fact::NoteSent { .. }
            | Fact::NoteDelivered { .. }
            | Fact::TxnSent { .. }
            | Fact::Final { .. }
            | Fact::FinalQueues { .. } => {}
        }
    }

    fn apply_answer(&mut self, now: u64, req: u64, response: &Response, commit: &Commit, reply: Reply) {
        let Some(mut r) = self.requests.remove(&req) else {
            self.apply_commit(now, Some(req), None, commit, now, None);
            return;
        };
        self.statement_settled(&r);
        r.busies = false;
        // An applied heartbeat: the built-in store acknowledges it, graphile's
        // `SELECT * FROM worker_heartbeat(..)` (an upsert) answers its row.
        // Taking only the first left every graphile worker silent since its
        // first request (docs/false-alarms.md).
        if let (Op::Heartbeat { .. }, Response::Ack | Response::Rows { .. }, Sender::Worker(owner)) =
            (&r.request, response, r.from)
        {
            let o = self.owners.entry(owner).or_default();
            o.last_heartbeat_ms = Some(now);
            o.heartbeats_ms.push(now);
        }
        if let (Op::Deregister { owner }, Response::Ack | Response::Rows { .. }) = (&r.request, response) {
            self.owners.entry(*owner).or_default().deregistered_ms.get_or_insert(now);
        }
        // Which request of a newer incarnation ends an older one's
        // transactions is the engine's promise: graphile's store ends them
        // at the newer one's first statement of any kind (its connections
        // closed, as a real store's are when their process dies), the
        // built-in one at its first claim or heartbeat. Judging the built-in
        // engine by the earlier rule took a COMMIT the store held through a
        // restart, and committed before the new incarnation's first claim,
        // for a transaction answered after it ended (docs/false-alarms.md).
        if let Op::Heartbeat { owner } | Op::Claim { owner, .. } = &r.request {
            self.saw_incarnation(*owner);
        }
        if let (Sender::Worker(owner), ReplacedTxnsEnd::AnyRequest) = (r.from, self.replaced_txns_end) {
            self.saw_connection(owner);
        }
        // A statement's time at a store that stamps the start: its
        // transaction's first statement (the transaction ends just below).
        let txn_started = r.txn.and_then(|(txn, _)| self.txns.get(&txn)).map(|t| t.opened_ms);
        self.txn_answered(&r, response);
        let completed_by = match &r.request {
            Op::Complete { fence } => Some(fence.task),
            _ => None,
        };
        let started = r.handed_ms.unwrap_or(r.arrived_ms);
        let recovery_started = txn_started.unwrap_or(started);
        let recovery = matches!(
            r.request,
            Op::ReleaseDead { .. }
                | Op::ReclaimExpired { .. }
                | Op::ReleaseOwners { .. }
                | Op::ReturnOwn { interrupted: true, .. }
        )
        .then_some(recovery_started);
        self.apply_commit(now, Some(req), completed_by, commit, started, recovery);
        if let (Op::Enqueue { .. }, Sender::Client(call)) = (&r.request, r.from) {
            self.note_asked(call, commit);
        }
        if let (Op::Enqueue { key: Some(key), .. }, Response::Enqueued { task }) = (&r.request, response) {
            self.enqueue_keys.entry(*key).or_insert(*task);
        }
        if let Op::Complete { fence } = &r.request {
            if commit.task(fence.task).is_some_and(|c| c.after.state == TaskState::Done) {
                self.completed_by.insert(fence.task, *fence);
            }
        }
        r.handed_ms.get_or_insert(now);
        match reply {
            Reply::Sent => self.answer_reached(&r, now, Some(response)),
            // A lost answer never reaches its caller; it waits out its deadline.
            Reply::Lost => {}
            Reply::Late => {
                r.answer = Some((now, response.clone(), reply));
                self.requests.insert(req, r);
            }
        }
    }

    /// The caller of `r` got its answer (`None`: an answer the store gave
    /// but the history no longer holds). An attempt's final outcome answer
    /// ends its finalization; a retryable refusal of any statement of it
    /// does not, when the engine tries the outcome again
    /// (`Promises::outcome_retry`): its slot stays in use until a final
    /// answer or the finalization deadline.
    fn answer_reached(&mut self, r: &RequestView, _now: u64, response: Option<&Response>) {
        let Sender::Worker(owner) = r.from else { return };
        if r.duplicate {
            return;
        }
        let tried_again = self.outcome_retry
            && matches!(response, Some(Response::Rejected { reason }) if crate::outcome_kept::retryable(reason));
        let refused = matches!(response, Some(Response::Rejected { .. }) | None);
        let fence = match &r.request {
            _ if tried_again => None,
            Op::Complete { fence } | Op::Fail { fence, .. } => Some(*fence),
            Op::LeaseValid { fence } if refused || matches!(response, Some(Response::Valid { valid: false })) => {
                Some(*fence)
            }
            Op::ClearStageLink { fence } if !matches!(response, Some(Response::Applied { .. })) => Some(*fence),
            // A lease check that held, a stage link cleared (the completion
            // follows), or no outcome request at all.
            Op::LeaseValid { .. }
            | Op::ClearStageLink { .. }
            | Op::Enqueue { .. }
            | Op::CreatePipeline { .. }
            | Op::Claim { .. }
            | Op::Heartbeat { .. }
            | Op::Renew { .. }
            | Op::ReleaseDead { .. }
            | Op::ReleaseOrphans { .. }
            | Op::ReclaimExpired { .. }
            | Op::Repair { .. }
            | Op::Maintain { .. }
            | Op::PipelineSnapshot { .. }
            | Op::EnqueueStage { .. }
            | Op::QueryIndex { .. }
            | Op::Exec { .. }
            | Op::Rollback { .. }
            | Op::Commit { .. }
            | Op::ReleaseOwners { .. }
            | Op::ReturnOwn { .. }
            | Op::Other { .. }
            | Op::Deregister { .. } => None,
        };
        if let (Some(fence), Some(o)) = (fence, self.owners.get_mut(&owner)) {
            o.finalizing.remove(&fence);
        }
    }

    /// The store's rows change as `commit` (of request `req`) says.
    fn apply_commit(
        &mut self,
        now: u64,
        req: Option<u64>,
        completed_by: Option<TaskId>,
        commit: &Commit,
        started_ms: u64,
        recovery: Option<u64>,
    ) {
        for change in &commit.tasks {
            let after = &change.after;
            let id = after.id;
            match self.tasks.get_mut(&id) {
                None => {
                    let view = TaskView {
                        row: after.clone(),
                        created_ms: now,
                        created_by: req,
                        ready_since_ms: now,
                        last_failure: None,
                        recovered: false,
                        recovered_ms: 0,
                        asked_not_before_ms: None,
                        locked_ms: None,
                    };
                    self.tasks.insert(id, view);
                }
                Some(t) => {
                    let before = std::mem::replace(&mut t.row, after.clone());
                    if after.state == TaskState::Ready && before.state != TaskState::Ready {
                        t.ready_since_ms = now;
                        t.recovered = recovery.is_some();
                        t.recovered_ms = recovery.unwrap_or(now);
                    }
                    if after.retries > before.retries {
                        t.last_failure = Some(Failure {
                            committed_ms: now,
                            started_ms,
                            retries: after.retries,
                            previous_due_ms: before.retry_at_ms,
                        });
                    }
                }
            }
            let was_leased = change.before.as_ref().is_some_and(|b| b.state == TaskState::Leased);
            let regranted = change.before.as_ref().is_none_or(|b| b.attempt != after.attempt);
            if after.state == TaskState::Leased && (!was_leased || regranted) {
                if let Some(owner) = after.owner {
                    self.grants.insert(Fence { task: id, attempt: after.attempt, owner }, now);
                }
            }
            set_membership(&mut self.ready, id, after.state == TaskState::Ready);
            set_membership(&mut self.leased, id, after.state == TaskState::Leased);
        }
        for change in &commit.stages {
            self.pipelines.entry(change.stage.pipeline).or_insert(now);
            let view = self.stages.entry(change.stage).or_insert_with(|| StageView {
                row: change.after.clone(),
                created_ms: now,
                done: None,
            });
            let was_done = view.row.done;
            let linked = view.row.task;
            view.row = change.after.clone();
            if change.after.done && !was_done {
                view.done = Some((now, linked));
            }
        }
        for index in &commit.materialized {
            self.materialized.entry(*index).or_insert((now, completed_by));
        }
        for change in &commit.queues {
            self.queues.insert(change.queue, change.after.clone());
        }
        let touched = !commit.tasks.is_empty() || !commit.queues.is_empty();
        if touched && !self.queues.is_empty() {
            self.note_busy_queues(now);
        }
    }

    /// Which queues are busy by design now: held by a holder that holds a
    /// task of the queue. A queue held by nobody running one of its tasks
    /// (a leaked lock) is not: its tasks wait for no reason.
    fn note_busy_queues(&mut self, now: u64) {
        let mut busy = BTreeSet::new();
        for id in &self.leased {
            let Some(t) = self.tasks.get(id) else { continue };
            let (Some(q), Some(owner)) = (t.row.spec.queue, t.row.owner) else { continue };
            if self.queues.get(&q).is_some_and(|r| r.holder == Some(owner)) {
                busy.insert(q);
            }
        }
        for q in self.queues_busy.difference(&busy) {
            self.queue_free_since.insert(*q, now);
        }
        self.queues_busy = busy;
    }

    /// Is `row`'s named queue held by another of its tasks (so it cannot
    /// be claimed now)?
    pub fn queue_held(&self, row: &Row) -> bool {
        row.spec.queue.is_some_and(|q| self.queues.get(&q).is_some_and(|r| r.holder.is_some()))
    }
}

fn set_membership(set: &mut BTreeSet<TaskId>, id: TaskId, member: bool) {
    if member {
        set.insert(id);
    } else {
        set.remove(&id);
    }
}
