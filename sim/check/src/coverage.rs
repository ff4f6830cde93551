//! Coverage points: the dangerous moments a campaign exists to reach.
//!
//! A campaign that finds nothing says little unless it reached the
//! situations where lease engines break. Each point is a stable kebab-case
//! name with a one-line description, observed by the harness from ground
//! truth (the same facts and view the checkers use, never the engine's
//! testimony). A run reports the points it reached; a campaign counts them;
//! a scenario may require some (`[coverage] require`).

use super::view::held_by;
use super::{answer, commit, fact, granted, lost_holder, promise, Ctx, ExpiryScan};
use leasesim_vocab::faults::{Aim, Anchor, FaultKind};
use leasesim_vocab::history::{Entry, Record, WorldEvent};
use leasesim_vocab::ids::Fence;
use leasesim_vocab::op::{Op, Refusal, Response};
use leasesim_vocab::promise::Capabilities;
use leasesim_vocab::task::TaskError;
use leasesim_vocab::task::{TaskKind, TaskState};
use leasesim_vocab::testimony::Event;
use leasesim_vocab::truth::{ClientAnswer, ClientCall, Fact, Reply, Sender};
use std::collections::{BTreeMap, BTreeSet};

/// One coverage point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    pub name: &'static str,
    pub about: &'static str,
}

/// A coverage point as the checkers name it: its place in [`POINTS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PointId(u8);

impl PointId {
    pub fn name(self) -> &'static str {
        POINTS[self.0 as usize].name
    }

    /// This point's bit in a run's set of reached points.
    fn bit(self) -> u64 {
        1 << self.0
    }
}

impl std::fmt::Display for PointId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

macro_rules! points {
    ($($id:ident = $name:literal: $about:literal;)+) => {
        /// Listing order: each point's place in `POINTS`.
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        enum Place { $($id),+ }
        $(pub const $id: PointId = PointId(Place::$id as u8);)+
        /// Every coverage point, in listing order.
        pub const POINTS: &[Point] = &[$(Point { name: $name, about: $about }),+];
        // A run's reached points are the bits of one u64 (`PointId::bit`):
        // a 65th point would wrap onto the first in a release build.
        const _: () = assert!(POINTS.len() <= u64::BITS as usize, "more coverage points than bits in a u64");
    };
}

points! {
    STALE_COMPLETE = "stale-complete-rejected": "a completion from an attempt that no longer holds its task reached the store and was refused";
    STALE_FAIL = "stale-fail-rejected": "a failure from an attempt that no longer holds its task was refused";
    STALE_RENEW = "stale-renew-rejected": "a renewal from an attempt that no longer holds its task was refused";
    STALE_LEASE_CHECK = "stale-lease-check": "a lease check answered 'not valid' to an attempt that once held the task";
    LEASE_CHECK_AFTER_EXPIRY = "lease-check-after-expiry": "a lease check reached the store while its attempt still held the task but its lease had run out (not yet reclaimed)";
    STALE_STAGE_WRITE = "stale-stage-write-rejected": "a completion of a stage task from a stale attempt was refused";
    AMBIGUOUS_COMPLETION = "ambiguous-completion": "a completion was applied and its answer lost: the worker cannot know it committed";
    LEASE_EXPIRED_RUNNING = "lease-expired-while-running": "a lease expired at the store while its owner was alive and its body running";
    RENEWAL_SAVED = "renewal-saved-long-execution": "a body ran longer than its lease TTL and still held its task when it returned";
    LONG_EXECUTION = "execution-outlived-lease-ttl": "a body ran longer than its lease TTL";
    RENEWAL_REJECTED = "renewal-rejected": "the store refused a renewal";
    POLL_FOR_ABSENT = "long-poll-granted-to-absent-owner": "a held long poll granted a task to a caller that was dead or paused";
    REPAIR_BESIDE_HEALTHY = "repair-beside-healthy-lease": "repair reclaimed a task while another task of its group kept a healthy lease";
    REPAIR_AT_EXPIRY = "repair-at-expiry-ms": "repair reclaimed a lease at the exact millisecond it expired";
    DEAD_OWNER_RELEASED = "dead-owner-task-released": "a heartbeat-owned task was released because its owner counted as dead";
    ZOMBIE_RELEASED = "dead-owner-released-while-paused": "a paused owner's task was released as dead; the owner returns as a zombie";
    ORPHAN_RELEASED = "orphan-released": "same-owner recovery released a task its owner was not running";
    SAME_OWNER_RECLAIM = "same-owner-reclaim": "a released task was granted again to the same owner, at a new attempt";
    FINALIZE_DEADLINE = "finalize-deadline-passed": "an attempt's outcome was not recorded within the finalization deadline";
    MAINTENANCE_OVERDUE = "maintenance-pass-overdue": "a maintenance pass was still running at the store when the next was due";
    NOTE_EARLY = "note-before-retry-time": "a peer note arrived before the retry time it carries";
    RETRY_ON_TIME = "retry-granted-on-time": "a failed task was granted again at the exact millisecond its backoff ended";
    RETRIES_EXHAUSTED = "retries-exhausted": "a task died after spending its whole retry budget";
    FATAL_FAILURE = "fatal-failure": "a task died of a fatal error";
    CONFLICT_RETRIED = "conflict-failure-retried": "a write conflict failed a task body and the task was retried";
    STAGE_REFUSED = "stage-enqueue-refused": "the store refused a stage enqueue (already has a task, done, or not due)";
    REORDERED = "request-reordered": "a request reached the store's engine after a later request of the same sender";
    CLIENT_REPLY_LOST = "client-reply-lost-after-commit": "a client request committed and its answer was lost";
    QUERY_TIMED_OUT = "query-answered-by-lag-timeout": "an index query waited out its whole lag and answered 'not materialized'";
    FULL_WITH_DUE = "worker-full-with-due-tasks": "a live worker was at full capacity while a task was due";
    KILLED_RUNNING = "killed-while-running": "a process was killed while it ran or finalized attempts (its permits vanish)";
    CLOCK_SKEW = "clock-skew-against-lease": "a worker whose clock is off by a third of a lease's renewal margin or more held that lease";
    TXN_TIMEOUT = "transaction-timed-out": "a write's transaction timed out at the store and nothing was applied";
    HELD_AT_STORE = "request-held-at-store": "a request reached the store process but its engine took it over a second later";
    FRESH_INDEX = "fresh-index-queried-after-heal": "an index built from an enqueue after the heal was queried by the application";
    STORE_CRASH_HELD = "store-crashed-holding-requests": "the store process died while it held requests: their transactions aborted, their callers were never answered";
    DUPLICATE_ABSORBED = "duplicate-write-absorbed": "a write delivered twice was answered again by the store, and the copy changed nothing";
    SERIALIZATION_RETRIED = "serialization-failure-retried": "a transaction aborted by a serialization failure was sent again by its caller and committed";
    TXN_CLOSED = "statement-after-transaction-closed": "a statement reached the store after its transaction had ended without it (timed out, its process replaced, the store restarted) and was told the transaction is no longer open";
    LOCK_WAIT = "lock-wait": "a request reached the store while another open transaction held a lock on the row it writes, and had to wait";
    TXN_ABANDONED = "transaction-abandoned": "a transaction was left open by its client (killed, paused, cut off, its answer lost) until the store ended it";
    EXPIRED_LOCKED = "expired-lease-locked": "a lease ran out while an open transaction held its row: recovery had to skip the row until the transaction ended";
    STALE_OUTCOME = "stale-outcome-arrived": "a completion or failure from an attempt that no longer held its task reached the store (whatever the store then did with it)";
    QUEUE_WAIT = "queued-task-behind-running-one": "a task of a named queue was due while another task of that queue ran";
    EXIT_HOLDING = "worker-exited-holding-tasks": "a worker process exited on its own (not killed) while it held tasks";
    LOCK_TIMED_OUT = "lock-wait-timed-out": "a write waited on a row lock past the lock timeout and was told so (SQLSTATE 55P03): its transaction aborted, nothing applied";
    EQUAL_CALLS = "equal-calls-from-one-client": "one long-lived client made two enqueue calls with equal content, and both were acknowledged";
    SCHEDULED_GRANTED = "scheduled-task-granted": "a task the application enqueued with a not-before time in the future was granted (claims before that time had to pass it over)";
    LEASE_CONFIRMED = "lease-confirmed-before-start": "a claim answer came so late that its attempt renewed the lease before starting the body (inside the renewal margin already)";
    ROLLBACK_FIRST = "rollback-before-first-statement": "a transaction's ROLLBACK reached the store before any statement of it (the late statements must find it ended)";
    COMPLETION_RETRIED = "completion-retried-after-commit": "an attempt sent its completion again after it had committed (its first answer lost), and the retry was answered";
    QUERY_HELD_LONG = "query-held-past-rpc-deadline": "an index query was held at the store longer than one RPC deadline before its answer: its client had to wait past one";
    PERMIT_UNSTARTED = "permit-returned-unstarted": "a worker gave back the permit of an attempt whose body never started (its claim answer came after the lease had run out)";
    DEREGISTERED_HOLDING = "deregistered-holding-tasks": "a process told the store it is leaving (deregistered) while tasks were still leased to it: only recovery brings them back";
    CLAIM_ANSWER_LOST = "claim-answer-lost": "a claim granted tasks and its answer was lost: they are leased to a worker that does not know it holds them";
    LIVE_OWNER_RELEASED = "live-owner-task-released": "a heartbeat-owned task was released as dead while its owner was up, not paused and not replaced: silent at the store, not gone";
    FAILED_REGRANTED = "failed-task-regranted-to-same-owner": "a task whose attempt failed was granted again, at a new attempt, to the same worker incarnation that failed it (what that worker remembers of the task, its backoff and its retry count, meets the task again)";
    STOP_WHILE_RUNNING = "stopped-while-running": "a process was asked to stop while attempts ran on it (bodies running or outcomes being recorded)";
    STOP_CLAIM_PENDING = "stopped-with-claim-at-store": "a process was asked to stop while a claim of its own was at the store unanswered: the stop drops it, and whatever it grants must still come back";
    STOP_CANCELLED = "attempt-cancelled-by-stop": "a body was cut short by its process's stop, its grace run out";
    STOP_RELEASED = "stop-released-tasks": "a stopping process's release of its own tasks gave back at least one task it held";
    STOP_OUTLASTED = "stop-outlasted-its-window": "a process asked to stop was still up when its window ended, and was killed";
}

/// Does `point` name something an engine with these capabilities can do?
/// A point that cannot be reached by the engine is reported not applicable.
pub fn applies(point: &str, caps: &Capabilities) -> bool {
    match point {
        "stale-complete-rejected" | "stale-fail-rejected" => caps.outcome_answers,
        "stale-stage-write-rejected" | "stage-enqueue-refused" => caps.pipelines && caps.outcome_answers,
        "stale-renew-rejected"
        | "stale-lease-check"
        | "lease-check-after-expiry"
        | "lease-expired-while-running"
        | "renewal-saved-long-execution"
        | "execution-outlived-lease-ttl"
        | "renewal-rejected"
        | "lease-confirmed-before-start" => caps.leases,
        "clock-skew-against-lease" => caps.leases && caps.clock_seam,
        "long-poll-granted-to-absent-owner" => caps.long_polls,
        "repair-beside-healthy-lease" | "repair-at-expiry-ms" => caps.groups,
        "dead-owner-task-released" | "dead-owner-released-while-paused" | "live-owner-task-released" => caps.heartbeats,
        "deregistered-holding-tasks" => caps.heartbeats && caps.deregistration,
        "orphan-released" | "same-owner-reclaim" => caps.orphan_recovery,
        "maintenance-pass-overdue" => caps.maintenance,
        "note-before-retry-time" => caps.peer_notes,
        "fatal-failure" => caps.fatal_errors,
        "query-answered-by-lag-timeout" | "fresh-index-queried-after-heal" | "query-held-past-rpc-deadline" => {
            caps.indexes
        }
        "transaction-timed-out"
        | "statement-after-transaction-closed"
        | "lock-wait"
        | "transaction-abandoned"
        | "serialization-failure-retried"
        | "lock-wait-timed-out"
        | "rollback-before-first-statement" => caps.transactions,
        "expired-lease-locked" => caps.transactions && caps.leases,
        "duplicate-write-absorbed" => caps.redelivery,
        "completion-retried-after-commit" => caps.outcome_answers,
        "permit-returned-unstarted" => caps.permits,
        "queued-task-behind-running-one" => caps.named_queues,
        "stopped-while-running"
        | "stopped-with-claim-at-store"
        | "attempt-cancelled-by-stop"
        | "stop-released-tasks"
        | "stop-outlasted-its-window" => caps.graceful_stop,
        _ => true,
    }
}

/// How many refused requests coverage remembers, waiting for their retry.
const REFUSED_KEPT: usize = 64;

/// Does `name` name a coverage point?
pub fn known(name: &str) -> bool {
    POINTS.iter().any(|p| p.name == name)
}

#[derive(Default)]
pub struct Coverage {
    /// The points reached so far, one bit each (a set of names was most of
    /// coverage's cost: every record asks about several points).
    reached: u64,
    /// Per sender: the latest arrival among its requests already handed over.
    handed_arrival: BTreeMap<Sender, u64>,
    /// Expiries already looked at, and finalizations already looked at.
    expiries: BTreeSet<(Fence, u64)>,
    /// When the leases are next worth a look for one just expired.
    expiry_scan: ExpiryScan,
    /// No maintenance pass can be overdue, and no finalization past its
    /// deadline, before these moments.
    overdue_due_ms: u64,
    finalize_due_ms: u64,
    finalizations: BTreeSet<Fence>,
    /// Tasks whose last lease was released (not ended by an outcome), with
    /// the attempt that lost it.
    last_release: BTreeMap<leasesim_vocab::ids::TaskId, Fence>,
    /// Per task: the attempt whose own failure made it ready again, until
    /// its next grant.
    last_failed: BTreeMap<leasesim_vocab::ids::TaskId, Fence>,
    /// The latest requests a serialization failure refused (at most
    /// `REFUSED_KEPT`, oldest first).
    serialization_refused: std::collections::VecDeque<(Sender, Op)>,
    /// Processes a fault is killing (its record comes right before the kill).
    killed_by_fault: BTreeSet<u32>,
    /// Faults the history suggests toward points not yet reached (at most
    /// `AIMS_PER_POINT` each, the first ones seen).
    aims: Vec<Aim>,
}

/// Aims kept per point: the first few moments are as good as any, and a
/// run's aims must stay small.
const AIMS_PER_POINT: usize = 3;

impl Coverage {
    /// The names of the points reached.
    pub fn reached(&self) -> BTreeSet<&'static str> {
        POINTS.iter().enumerate().filter(|(i, _)| self.reached & (1 << i) != 0).map(|(_, p)| p.name).collect()
    }

    /// Transactions that span round trips: closed under their client,
    /// abandoned, waited for, holding an expired lease.
    fn transactions(&mut self, now: u64, rec: &Record, ctx: &Ctx) {
        if let Some(a) = answer(rec, ctx) {
            let statement = !matches!(a.request.request, Op::Rollback { .. });
            if a.request.txn.is_some()
                && statement
                && !a.request.duplicate
                && matches!(a.response, Response::Rejected { reason: Refusal::TxnClosed })
            {
                self.hit(TXN_CLOSED);
            }
        }
        if let Some(Fact::Arrived { request, .. }) = fact(rec) {
            let fence = request.fence();
            // Only a statement whose fence matches the row waits for it.
            let waits = |f: &Fence| {
                ctx.view.task(f.task).is_some_and(|t| t.held_by(f))
                    && ctx.view.lock_holder(f.task, request.txn()).is_some()
            };
            if self.open(LOCK_WAIT) && fence.is_some_and(waits) {
                self.hit(LOCK_WAIT);
            }
            // A statement of an open transaction on a leased row: its owner
            // paused right after it keeps the transaction open past the
            // lease's expiry, if the lease runs out before the store ends
            // the transaction (a lease that outlasts `txn_timeout_ms` from
            // the transaction's first statement never meets its lock).
            let in_txn = matches!(request, Op::Exec { commit: false, .. });
            let opened_ms = request.txn().and_then(|t| ctx.view.txns.get(&t)).map_or(now, |t| t.opened_ms);
            let ends_ms = opened_ms + ctx.view.txn_timeout_ms;
            let row = fence.and_then(|f| ctx.view.task(f.task).filter(|t| t.held_by(f)).map(|t| (f, &t.row)));
            let expiring = row.and_then(|(f, r)| r.lease_expiry_ms.map(|e| (f, e))).filter(|(_, e)| e + 500 < ends_ms);
            if let Some((f, expiry_ms)) = expiring.filter(|_| in_txn) {
                let window = (now + 1, expiry_ms.saturating_sub(now) + 3_000);
                self.aim(EXPIRED_LOCKED, FaultKind::ProcessPause, Some(f.owner.proc), window, Anchor::Start);
            }
        }
        if !ctx.view.abandoned.is_empty() {
            self.hit(TXN_ABANDONED);
        }
        let expired = |t: &leasesim_vocab::ids::TaskId| {
            ctx.view.task(*t).is_some_and(|t| t.row.lease_expiry_ms.is_some_and(|e| e <= now))
        };
        if self.open(EXPIRED_LOCKED) && ctx.view.txns.values().any(|t| t.locks.iter().any(expired)) {
            self.hit(EXPIRED_LOCKED);
        }
    }

    fn hit(&mut self, point: PointId) {
        self.reached |= point.bit();
    }

    pub fn on_record(&mut self, rec: &Record, ctx: &Ctx) {
        let now = rec.at_ms;
        self.moments(now, ctx);
        self.transactions(now, rec, ctx);
        self.answers(now, rec, ctx);
        self.commits(now, rec, ctx);
        self.facts(now, rec, ctx);
        self.stops(now, rec, ctx);
        // Killed or exited alike (`WorldEvent::gone`).
        let gone = match &rec.entry {
            Entry::World(w) => w.gone(),
            _ => None,
        };
        if let Some(owner) = gone {
            if ctx.view.busy(owner, now) > 0 {
                self.hit(KILLED_RUNNING);
            }
            // Killed by the harness (a fault records itself first), or gone
            // of its own accord (an exit, or a kill no fault announced).
            let holds = ctx.view.leased.iter().any(|id| ctx.view.task(*id).is_some_and(|t| t.row.owner == Some(owner)));
            if holds && !self.killed_by_fault.remove(&owner.proc) {
                self.hit(EXIT_HOLDING);
            }
        }
        if let Entry::Engine(Event::PermitReleased { owner, task, attempt }) = &rec.entry {
            let fence = Fence { task: *task, attempt: *attempt, owner: *owner };
            if self.open(PERMIT_UNSTARTED) && !ctx.view.bodies.contains_key(&fence) {
                self.hit(PERMIT_UNSTARTED);
            }
        }
        if let Entry::World(WorldEvent::Fault { detail, .. }) = &rec.entry {
            if let Some(proc) =
                detail.strip_prefix('p').and_then(|d| d.strip_suffix(" killed")).and_then(|p| p.parse().ok())
            {
                self.killed_by_fault.insert(proc);
            }
        }
        self.expiry_scan.note(rec);
    }

    /// A graceful stop's moments.
    fn stops(&mut self, now: u64, rec: &Record, ctx: &Ctx) {
        let v = &ctx.view;
        let stopping =
            |owner: &leasesim_vocab::ids::Owner| v.owner(*owner).is_some_and(|o| o.stop_requested_ms.is_some());
        match &rec.entry {
            Entry::World(WorldEvent::StopRequested { owner }) => {
                if v.busy(*owner, now) > 0 {
                    self.hit(STOP_WHILE_RUNNING);
                }
                let claim_at_store = v.requests.values().any(|r| {
                    r.from == Sender::Worker(*owner) && matches!(r.request, Op::Claim { .. }) && r.answer.is_none()
                });
                if claim_at_store {
                    self.hit(STOP_CLAIM_PENDING);
                }
            }
            Entry::Truth(Fact::BodyStopped { on, .. }) if stopping(on) && v.killed(*on).is_none() => {
                self.hit(STOP_CANCELLED);
            }
            Entry::World(WorldEvent::ProcessKilled { owner }) if stopping(owner) => self.hit(STOP_OUTLASTED),
            Entry::Truth(Fact::Answered { .. }) => {
                let Some(a) = answer(rec, ctx) else { return };
                let own = match &a.request.request {
                    Op::ReleaseOrphans { owner, .. } | Op::ReturnOwn { owner, .. } => Some(owner),
                    _ => None,
                };
                if own.is_some_and(stopping) && a.commit.tasks.iter().any(|c| lost_holder(c).is_some()) {
                    self.hit(STOP_RELEASED);
                }
            }
            _ => {}
        }
    }

    /// Situations that hold at a moment rather than at one record.
    ///
    /// These look at the whole view at every record, so each is looked for
    /// only until the run reaches it (a run reports each point once).
    fn moments(&mut self, now: u64, ctx: &Ctx) {
        let v = &ctx.view;
        if self.open(LEASE_EXPIRED_RUNNING) {
            self.expired_running(now, ctx);
        }
        if self.open(FINALIZE_DEADLINE) || self.open(FULL_WITH_DUE) {
            self.owner_moments(now, ctx);
        }
        if self.open(MAINTENANCE_OVERDUE) && now >= self.overdue_due_ms {
            self.maintenance_overdue(now, ctx);
        }
        if self.open(QUEUE_WAIT) && !v.queues_busy.is_empty() {
            let waiting = v
                .ready
                .iter()
                .filter_map(|id| v.task(*id))
                .any(|t| t.row.retry_at_ms <= now && t.row.spec.queue.is_some_and(|q| v.queues_busy.contains(&q)));
            if waiting {
                self.hit(QUEUE_WAIT);
            }
        }
    }

    /// A maintenance pass held at the store past its interval. A pass
    /// becomes overdue by time alone, and one that arrives later is due
    /// later still: the next look is at the earliest such moment ahead.
    fn maintenance_overdue(&mut self, now: u64, ctx: &Ctx) {
        let interval_ms = ctx.promises().maintenance_interval_ms;
        let mut next_ms = now.saturating_add(interval_ms);
        for r in ctx.view.requests.values() {
            if !matches!(r.request, Op::Maintain { .. }) || r.answer.is_some() {
                continue;
            }
            let due_ms = r.arrived_ms.saturating_add(interval_ms);
            if now >= due_ms {
                self.hit(MAINTENANCE_OVERDUE);
                return;
            }
            next_ms = next_ms.min(due_ms);
        }
        self.overdue_due_ms = next_ms;
    }

    /// An attempt whose outcome is still being recorded past the
    /// finalization deadline. A body that ends later has its deadline later
    /// still: the next look is at the earliest deadline ahead.
    fn finalize_deadlines(&mut self, now: u64, ctx: &Ctx) {
        let deadline_ms = ctx.promises().finalize_deadline_ms;
        let mut next_ms = now.saturating_add(deadline_ms);
        for o in ctx.view.owners.values() {
            for (fence, ended) in &o.finalizing {
                let due_ms = ended.saturating_add(deadline_ms);
                if now < due_ms {
                    next_ms = next_ms.min(due_ms);
                } else if self.finalizations.insert(*fence) {
                    self.hit(FINALIZE_DEADLINE);
                }
            }
        }
        self.finalize_due_ms = next_ms;
    }

    /// Has the run not reached `point` yet?
    fn open(&self, point: PointId) -> bool {
        self.reached & point.bit() == 0
    }

    /// Proposes a fault toward `point`, while the run has not reached it.
    /// The first moments are kept: keeping the ones that need the shortest
    /// fault instead measured no better (`bench coverage`, 10 starts).
    fn aim(&mut self, point: PointId, kind: FaultKind, proc: Option<u32>, window: (u64, u64), anchor: Anchor) {
        let name = point.name();
        if !self.open(point) || self.aims.iter().filter(|a| a.point == name).count() >= AIMS_PER_POINT {
            return;
        }
        let (at_ms, for_ms) = window;
        let aim = Aim { point: name.to_string(), kind, proc, at_ms, for_ms, anchor, rate_permille: None };
        self.aims.push(aim);
    }

    /// A failed task will be tried again: bodies that keep failing on write
    /// conflicts from now on spend its budget.
    ///
    /// The window covers what is left of the budget: each retry's backoff
    /// (the policy's, so doubling backoffs are not cut off halfway) and an
    /// attempt's round trips and body after it.
    fn aim_exhaustion(&mut self, now: u64, retries: u32, ctx: &Ctx) {
        let cfg = ctx.promises();
        let attempt_ms = cfg.rpc_timeout_ms + 5_000;
        let budget_ms: u64 =
            (retries..=cfg.max_retries).map(|r| promise::backoff_ms(cfg, r.max(1)).saturating_add(attempt_ms)).sum();
        let before = self.aims.len();
        self.aim(RETRIES_EXHAUSTED, FaultKind::WriteConflict, None, (now, budget_ms.min(300_000)), Anchor::Start);
        if let Some(aim) = self.aims.get_mut(before) {
            aim.rate_permille = Some(900);
        }
    }

    /// A claim answer held up (its owner paused from the grant) into its
    /// lease's renewal margin: the attempt must confirm its lease before it
    /// starts. Held up past the expiry: it must give its permit back unused.
    fn aim_late_answer(&mut self, now: u64, fence: Fence, expiry_ms: u64, kind: TaskKind, ctx: &Ctx) {
        let proc = Some(fence.owner.proc);
        let ttl_ms = expiry_ms.saturating_sub(now);
        // A margin under 2 s leaves too little room for a pause to end
        // inside it and a renewal to follow before the expiry.
        let margin = promise::renew_margin_ms(ctx.promises(), kind).filter(|m| *m >= 2_000 && *m < ttl_ms);
        if let Some(margin_ms) = margin {
            let window = (now, ttl_ms - margin_ms / 2);
            self.aim(LEASE_CONFIRMED, FaultKind::ProcessPause, proc, window, Anchor::Both);
        }
        // A longer lease needs a pause near `faults.max_pause_ms` (120 s by
        // default), which clamps it short of the expiry: the shortest
        // leases are the ones to aim at.
        if ttl_ms <= 60_000 {
            self.aim(PERMIT_UNSTARTED, FaultKind::ProcessPause, proc, (now, ttl_ms + 1_000), Anchor::Both);
        }
    }

    /// The aims toward points the run never reached.
    pub fn take_aims(&mut self) -> Vec<Aim> {
        let aims = std::mem::take(&mut self.aims);
        let reached = self.reached();
        aims.into_iter().filter(|a| !reached.contains(a.point.as_str())).collect()
    }

    fn expired_running(&mut self, now: u64, ctx: &Ctx) {
        if !self.expiry_scan.due(now) {
            return;
        }
        let v = &ctx.view;
        let mut next_ms = u64::MAX;
        for id in &v.leased {
            let Some(t) = v.task(*id) else { continue };
            let (Some(expiry), Some(owner)) = (t.row.lease_expiry_ms, t.row.owner) else { continue };
            if expiry > now {
                next_ms = next_ms.min(expiry);
                continue;
            }
            let fence = Fence { task: *id, attempt: t.row.attempt, owner };
            let fresh = self.expiries.insert((fence, expiry));
            let running = v.bodies.get(&fence).is_some_and(|b| b.ended_ms.is_none());
            if fresh && running && v.owner(owner).is_some_and(|o| o.alive()) {
                self.hit(LEASE_EXPIRED_RUNNING);
            }
        }
        self.expiry_scan.looked(next_ms);
    }

    fn owner_moments(&mut self, now: u64, ctx: &Ctx) {
        let v = &ctx.view;
        if self.open(FINALIZE_DEADLINE) && now >= self.finalize_due_ms {
            self.finalize_deadlines(now, ctx);
        }
        if !self.open(FULL_WITH_DUE) {
            return;
        }
        for o in v.owners.values() {
            if o.alive() && v.busy_of(o, now) >= v.concurrency() {
                let due = v.ready.iter().filter_map(|id| v.task(*id)).any(|t| t.row.retry_at_ms <= now);
                if due {
                    self.hit(FULL_WITH_DUE);
                }
            }
        }
    }

    fn answers(&mut self, now: u64, rec: &Record, ctx: &Ctx) {
        let Some(a) = answer(rec, ctx) else { return };
        let v = &ctx.view;
        let was_granted = |f: &Fence| v.grants.contains_key(f);
        let stale = |f: &Fence| was_granted(f) && v.task(f.task).is_some_and(|t| !t.held_by(f));
        let refused = matches!(a.response, Response::Rejected { .. });
        if let Op::Complete { fence } | Op::Fail { fence, .. } = &a.request.request {
            if stale(fence) {
                self.hit(STALE_OUTCOME);
            }
        }
        if let Op::Complete { fence } = a.request.request.statement() {
            if !a.request.duplicate && v.completed_by.get(&fence.task) == Some(fence) {
                self.hit(COMPLETION_RETRIED);
            }
        }
        match &a.request.request {
            Op::Complete { fence } if refused && stale(fence) => {
                self.hit(STALE_COMPLETE);
                if v.task(fence.task).is_some_and(|t| t.stage().is_some()) {
                    self.hit(STALE_STAGE_WRITE);
                }
            }
            Op::Complete { .. } if !a.commit.is_empty() && a.reply == Reply::Lost => self.hit(AMBIGUOUS_COMPLETION),
            Op::Fail { fence, .. } if refused && stale(fence) => self.hit(STALE_FAIL),
            Op::Renew { fence } if refused => {
                self.hit(RENEWAL_REJECTED);
                if stale(fence) {
                    self.hit(STALE_RENEW);
                }
            }
            // A renewal before its attempt's body started: the claim answer
            // came so late that the lease had to be confirmed first.
            Op::Renew { fence } if was_granted(fence) && !v.bodies.contains_key(fence) => self.hit(LEASE_CONFIRMED),
            Op::LeaseValid { fence } => {
                if a.response == &(Response::Valid { valid: false }) && was_granted(fence) {
                    self.hit(STALE_LEASE_CHECK);
                }
                let row = v.task(fence.task).map(|t| &t.row);
                if row.is_some_and(|r| held_by(r, fence) && r.lease_expiry_ms.is_some_and(|e| e <= now)) {
                    self.hit(LEASE_CHECK_AFTER_EXPIRY);
                }
                // A check in time: its owner paused just before sending it,
                // until just past the expiry, sends it after. Both edges
                // matter: a pause that ends much later meets the lease
                // reclaimed by a repair pass (every few seconds).
                if let Some(expiry_ms) = row.filter(|r| held_by(r, fence)).and_then(|r| r.lease_expiry_ms) {
                    let sent_ms = a.request.arrived_ms.saturating_sub(20);
                    let window = (sent_ms, expiry_ms.saturating_sub(sent_ms) + 200);
                    let proc = Some(fence.owner.proc);
                    self.aim(LEASE_CHECK_AFTER_EXPIRY, FaultKind::ProcessPause, proc, window, Anchor::Both);
                }
            }
            Op::Rollback { txn } if !v.txns.contains_key(txn) && !v.txn_ended.contains(txn) => self.hit(ROLLBACK_FIRST),
            Op::EnqueueStage { .. } if refused => self.hit(STAGE_REFUSED),
            Op::QueryIndex { lag_timeout_ms, .. } => {
                let waited = now.saturating_sub(a.request.handed_ms.unwrap_or(a.request.arrived_ms));
                if a.response == &(Response::Query { materialized: false }) && waited >= *lag_timeout_ms {
                    self.hit(QUERY_TIMED_OUT);
                }
                if waited > ctx.promises().rpc_timeout_ms {
                    self.hit(QUERY_HELD_LONG);
                }
            }
            Op::Claim { wait_ms, .. } if *wait_ms > 0 => {
                let absent = a
                    .request
                    .from
                    .owner()
                    .is_some_and(|o| v.killed(o).is_some() || v.procs.get(&o.proc).is_some_and(|p| p.paused_now()));
                if absent && matches!(a.response, Response::Claimed { grants } if !grants.is_empty()) {
                    self.hit(POLL_FOR_ABSENT);
                }
            }
            _ => {}
        }
        if matches!(a.request.from, Sender::Client(_)) && !a.commit.is_empty() && a.reply == Reply::Lost {
            self.hit(CLIENT_REPLY_LOST);
        }
        if let Op::Claim { .. } = a.request.request {
            if a.reply == Reply::Lost && matches!(a.response, Response::Claimed { grants } if !grants.is_empty()) {
                self.hit(CLAIM_ANSWER_LOST);
            }
        }
        // The view is the one before this answer applies: what was leased to
        // the owner when it said it was leaving.
        if let Op::Deregister { owner } = a.request.request {
            let holds = v.leased.iter().filter_map(|id| v.task(*id)).any(|t| t.row.owner == Some(owner));
            if !refused && holds {
                self.hit(DEREGISTERED_HOLDING);
            }
        }
        if a.request.duplicate && a.commit.is_empty() && is_write(&a.request.request) {
            self.hit(DUPLICATE_ABSORBED);
        }
        let retried = |(from, request): &(Sender, Op)| *from == a.request.from && *request == a.request.request;
        if !a.commit.is_empty() && self.serialization_refused.iter().any(retried) {
            self.hit(SERIALIZATION_RETRIED);
        }
        let handed_at = a.request.handed_ms.unwrap_or(now);
        if handed_at > a.request.arrived_ms + 1_000 {
            self.hit(HELD_AT_STORE);
        }
        if a.request.handed_ms.is_none() {
            self.handed(a.request.from, a.request.arrived_ms);
        }
    }

    fn commits(&mut self, now: u64, rec: &Record, ctx: &Ctx) {
        let Some(c) = commit(rec) else { return };
        let v = &ctx.view;
        let cfg = ctx.promises();
        let request = answer(rec, ctx).map(|a| a.request);
        let op = request.map(|r| &r.request);
        for change in &c.tasks {
            let after = &change.after;
            if let Some(holder) = lost_holder(change) {
                let before = change.before.as_ref().expect("a lost holder had a row");
                let own_outcome =
                    matches!(op, Some(Op::Complete { fence } | Op::Fail { fence, .. }) if *fence == holder);
                if !own_outcome {
                    self.released(now, holder, before, op, ctx);
                    if after.state == TaskState::Ready {
                        self.last_release.insert(after.id, holder);
                    }
                } else if after.state == TaskState::Ready {
                    self.last_failed.insert(after.id, holder);
                }
            }
            if let Some(fence) = granted(change) {
                if let Some(expiry_ms) = after.lease_expiry_ms {
                    self.aim_late_answer(now, fence, expiry_ms, after.spec.kind, ctx);
                }
                if after.lease_expiry_ms.is_none() && cfg.dead_after_ms < u64::MAX / 8 {
                    // Paused past the dead timeout and a cleanup pass, its
                    // owner comes back to find the task released as dead.
                    let pause_ms = cfg.dead_after_ms + cfg.cleanup_interval_ms + 2_000;
                    let window = (now + 500, pause_ms);
                    self.aim(ZOMBIE_RELEASED, FaultKind::ProcessPause, Some(fence.owner.proc), window, Anchor::Start);
                }
                if self.last_release.remove(&fence.task).is_some_and(|lost| lost.owner == fence.owner) {
                    self.hit(SAME_OWNER_RECLAIM);
                }
                if self.last_failed.remove(&fence.task).is_some_and(|failed| failed.owner == fence.owner) {
                    self.hit(FAILED_REGRANTED);
                }
                if v.task(fence.task).is_some_and(|t| t.not_before_ms() > t.created_ms) {
                    self.hit(SCHEDULED_GRANTED);
                }
                if let Some(f) = v.task(fence.task).and_then(|t| t.last_failure) {
                    if now == promise::retry_due_ms(cfg, &f) {
                        self.hit(RETRY_ON_TIME);
                    }
                }
                let margin = promise::renew_margin_ms(cfg, after.spec.kind);
                let offset = v.procs.get(&fence.owner.proc).map_or(0, |p| p.offset_ms.unsigned_abs());
                if margin.is_some_and(|m| offset > 0 && offset * 3 >= m) {
                    self.hit(CLOCK_SKEW);
                }
            }
            let died =
                after.state == TaskState::Dead && change.before.as_ref().is_some_and(|b| b.state != TaskState::Dead);
            let error = match op {
                Some(Op::Fail { error, .. }) => Some(*error),
                _ => None,
            };
            if died && error == Some(TaskError::Fatal) {
                self.hit(FATAL_FAILURE);
            } else if died && after.retries > cfg.max_retries {
                self.hit(RETRIES_EXHAUSTED);
            }
            if after.state == TaskState::Ready && error == Some(TaskError::Conflict) {
                self.hit(CONFLICT_RETRIED);
            }
            if after.state == TaskState::Ready && error.is_some() && after.retries <= cfg.max_retries {
                // Every later attempt fails too: its budget runs out.
                self.aim_exhaustion(now, after.retries, ctx);
            }
        }
    }

    /// A lease was taken from `holder` by request `op`.
    fn released(&mut self, now: u64, holder: Fence, before: &leasesim_vocab::task::Row, op: Option<&Op>, ctx: &Ctx) {
        let v = &ctx.view;
        match op {
            Some(Op::ReleaseOrphans { .. }) => self.hit(ORPHAN_RELEASED),
            Some(Op::Repair { .. }) => {
                if before.lease_expiry_ms == Some(now) {
                    self.hit(REPAIR_AT_EXPIRY);
                }
                // Late by a little: a stall that lets the requests it held go
                // at the expiry lands a repair pass on that millisecond.
                if let Some(expiry_ms) = before.lease_expiry_ms.filter(|e| *e < now) {
                    let window = (expiry_ms.saturating_sub(4_000), 4_000.min(expiry_ms));
                    self.aim(REPAIR_AT_EXPIRY, FaultKind::StoreStall, None, window, Anchor::End);
                }
                let group = before.spec.group;
                let healthy = v.leased.iter().filter_map(|id| v.task(*id)).any(|t| {
                    t.row.id != holder.task
                        && t.row.spec.group == group
                        && t.row.lease_expiry_ms.is_some_and(|e| e > now)
                });
                if healthy {
                    self.hit(REPAIR_BESIDE_HEALTHY);
                }
            }
            _ => {}
        }
        if before.lease_expiry_ms.is_none() && !matches!(op, Some(Op::ReleaseOrphans { .. } | Op::ReturnOwn { .. })) {
            self.hit(DEAD_OWNER_RELEASED);
            let paused = v.procs.get(&holder.owner.proc).is_some_and(|p| p.paused_now());
            if paused && v.killed(holder.owner).is_none() {
                self.hit(ZOMBIE_RELEASED);
            }
            let o = holder.owner;
            let replaced = v.owners.iter().any(|(other, view)| {
                other.proc == o.proc && other.incarnation > o.incarnation && view.first_seen_ms.is_some()
            });
            let up = v.owner(o).is_some_and(|view| view.alive() && view.deregistered_ms.is_none());
            if up && !paused && !replaced {
                self.hit(LIVE_OWNER_RELEASED);
            }
        }
    }

    /// A request of `from` that arrived at `arrived_ms` reaches the engine.
    fn handed(&mut self, from: Sender, arrived_ms: u64) {
        let latest = self.handed_arrival.entry(from).or_insert(0);
        let reordered = arrived_ms < *latest;
        *latest = (*latest).max(arrived_ms);
        if reordered {
            self.hit(REORDERED);
        }
    }

    fn facts(&mut self, now: u64, rec: &Record, ctx: &Ctx) {
        let v = &ctx.view;
        match fact(rec) {
            Some(Fact::Handed { req }) => {
                if let Some(r) = v.request(*req) {
                    self.handed(r.from, r.arrived_ms);
                }
            }
            Some(Fact::Refused { fault: Some(FaultKind::TxnTimeout), .. }) => self.hit(TXN_TIMEOUT),
            Some(Fact::Refused { fault: Some(FaultKind::LockTimeout), .. }) => self.hit(LOCK_TIMED_OUT),
            Some(Fact::Refused { req, fault: Some(FaultKind::SerializationFailure), .. }) => {
                // A duplicate's refusal reaches nobody: nobody retries it.
                let Some(r) = v.request(*req).filter(|r| !r.duplicate) else { return };
                if self.serialization_refused.len() == REFUSED_KEPT {
                    self.serialization_refused.pop_front();
                }
                self.serialization_refused.push_back((r.from, r.request.clone()));
            }
            Some(Fact::StoreCrashed { held }) if *held > 0 => self.hit(STORE_CRASH_HELD),
            Some(Fact::NoteDelivered { note, .. }) if now < note.retry_at_ms => self.hit(NOTE_EARLY),
            Some(Fact::BodyEnded { fence, .. }) => {
                let Some(body) = v.bodies.get(fence) else { return };
                let ttl = promise::lease_ttl_ms(ctx.promises(), body.kind);
                if ttl.is_some_and(|ttl| now - body.started_ms > ttl) {
                    self.hit(LONG_EXECUTION);
                    if v.task(fence.task).is_some_and(|t| held_by(&t.row, fence)) {
                        self.hit(RENEWAL_SAVED);
                    }
                }
            }
            Some(Fact::ClientAnswered { call, answer: ClientAnswer::Queried { .. } }) => {
                let (Some(heal), Some(c)) = (v.heal_ms, v.calls.get(call)) else { return };
                let ClientCall::Query { index, .. } = c.what else { return };
                let fresh = v.tasks.values().any(|t| {
                    t.kind() == TaskKind::IndexBuild && t.row.spec.index == Some(index) && t.created_ms >= heal
                });
                if fresh {
                    self.hit(FRESH_INDEX);
                }
            }
            Some(Fact::ClientAnswered { call, answer: ClientAnswer::Enqueued { task: Some(_) } })
                if self.open(EQUAL_CALLS) && equal_call_acknowledged(v, *call) =>
            {
                self.hit(EQUAL_CALLS);
            }
            _ => {}
        }
    }
}

/// Was `call` acknowledged after another enqueue of its client, with equal
/// content, was acknowledged too?
fn equal_call_acknowledged(v: &crate::view::View, call: u64) -> bool {
    let acked = |c: &crate::view::CallView| matches!(c.answer, Some((_, ClientAnswer::Enqueued { task: Some(_) })));
    let Some(this) = v.calls.get(&call) else { return false };
    v.calls.iter().any(|(n, c)| *n != call && c.client == this.client && c.what == this.what && acked(c))
}

/// Writes whose second delivery the store must absorb.
fn is_write(req: &Op) -> bool {
    matches!(
        req,
        Op::Enqueue { .. }
            | Op::EnqueueStage { .. }
            | Op::CreatePipeline { .. }
            | Op::Complete { .. }
            | Op::Fail { .. }
            | Op::ClearStageLink { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{o, spec, H};
    use leasesim_vocab::history::Record;
    use leasesim_vocab::task::TaskKind;
    use leasesim_vocab::testimony::ReleaseCause;

    /// The points a history reaches, by the one check function.
    fn reached(history: Vec<Record>) -> BTreeSet<String> {
        crate::check(&spec(), &history).coverage
    }

    /// `reaches! { name: history => [points]; }`: exactly these points.
    macro_rules! reaches {
        ($($name:ident: $history:expr => [$($point:expr),*];)+) => {
            $(
                #[test]
                fn $name() {
                    let want: BTreeSet<String> = [$($point.to_string()),*].into_iter().collect();
                    assert_eq!(reached($history), want);
                }
            )+
        };
    }

    reaches! {
        a_plain_run_reaches_nothing:
            H::new().up(o(1, 1)).created(1, TaskKind::Job).attempt_ok(10, 1, 1, o(1, 1)).build()
            => [];
        a_stale_completion_is_refused:
            H::new().up(o(1, 1)).up(o(2, 1)).created(1, TaskKind::WorkflowTask)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .at(100).paused(1)
                .at(3_100).released(1, 1, o(2, 1))
                .attempt_ok(3_200, 1, 2, o(2, 1))
                .at(3_400).resumed(1).finished(1, 1, o(1, 1), true)
                .answer(
                    Sender::Worker(o(1, 1)),
                    Op::Complete { fence: crate::testkit::fence(1, 1, o(1, 1)) },
                    Response::Rejected { reason: leasesim_vocab::op::Refusal::Terminal },
                    vec![],
                    &[],
                )
                .unpermit(o(1, 1), 1, 1)
                .build()
            => [STALE_COMPLETE, STALE_OUTCOME, LEASE_EXPIRED_RUNNING, LONG_EXECUTION];
        a_long_body_kept_alive_by_renewals:
            H::new().up(o(1, 1)).created(1, TaskKind::WorkflowTask)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .at(2_000).renew(1, 1, o(1, 1))
                .at(4_000).renew(1, 1, o(1, 1))
                .at(5_000).finished(1, 1, o(1, 1), true).completed(1, 1, o(1, 1)).callback(1, 1, o(1, 1)).unpermit(o(1, 1), 1, 1)
                .build()
            => [LONG_EXECUTION, RENEWAL_SAVED];
        an_orphan_claimed_again_by_its_owner:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(3, TaskKind::Job)
                .at(10).grant(3, 1, o(1, 1))
                .at(15_000).orphaned(3, o(1, 1), vec![])
                .attempt_ok(15_100, 3, 2, o(1, 1))
                .build()
            => [ORPHAN_RELEASED, SAME_OWNER_RECLAIM];
        a_budget_spent_to_the_end:
            {
                let mut h = H::new().up(o(1, 1)).created(1, TaskKind::Job);
                for k in 1..=3u32 {
                    let at = h.now() + 10_000;
                    let retry = (k < 3).then_some(at + 100 + 1_000 * (1 << (k - 1)));
                    h = h.at(at).grant(1, k, o(1, 1)).permit(o(1, 1), 1, k).started(1, k, o(1, 1))
                        .at(at + 100).finished(1, k, o(1, 1), false).failed(1, k, o(1, 1), k, retry).unpermit(o(1, 1), 1, k);
                }
                h.build()
            }
            => [CONFLICT_RETRIED, RETRIES_EXHAUSTED, FAILED_REGRANTED];
        // The same, but the retry goes to another worker: no memory met.
        a_failed_task_granted_again_to_another_worker:
            H::new().up(o(1, 1)).up(o(2, 1)).created(1, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .at(110).finished(1, 1, o(1, 1), false).failed(1, 1, o(1, 1), 1, Some(1_110)).unpermit(o(1, 1), 1, 1)
                .at(1_110).grant(1, 2, o(2, 1))
                .build()
            => [CONFLICT_RETRIED, RETRY_ON_TIME];
        // Looked for only from the earliest deadline ahead (1 s here): the
        // first body's outcome is recorded in time, the second's is not
        // (it ended at 600 ms, after the first look found nothing).
        an_outcome_never_recorded_past_the_deadline:
            H::new().up(o(1, 1)).created(1, TaskKind::Job).created(2, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .grant(2, 1, o(1, 1)).permit(o(1, 1), 2, 1).started(2, 1, o(1, 1))
                .at(100).finished(1, 1, o(1, 1), true)
                .at(600).finished(2, 1, o(1, 1), true).completed(1, 1, o(1, 1)).callback(1, 1, o(1, 1))
                .at(1_600).end()
                .build()
            => [FINALIZE_DEADLINE];
        an_outcome_recorded_in_time_reaches_nothing:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .at(100).finished(1, 1, o(1, 1), true)
                .at(1_099).completed(1, 1, o(1, 1)).callback(1, 1, o(1, 1))
                .at(5_000).end()
                .build()
            => [];
        a_maintenance_pass_held_past_its_interval:
            // Interval 5 s: the first pass is answered at 5000 ms, 10 ms
            // before it would be overdue; the second, from another worker,
            // is overdue at 5600 ms.
            H::new().up(o(1, 1)).up(o(2, 1))
                .at(10).fact(Fact::Arrived { req: 900, from: Sender::Worker(o(1, 1)), request: maintain(o(1, 1)), duplicate: false })
                .at(600).fact(Fact::Arrived { req: 901, from: Sender::Worker(o(2, 1)), request: maintain(o(2, 1)), duplicate: false })
                .at(5_000).fact(Fact::Answered { req: 900, response: Response::Ack, commit: Default::default(), reply: Reply::Sent })
                .at(5_600).end()
                .build()
            => [MAINTENANCE_OVERDUE, HELD_AT_STORE];
        // Heartbeat-owned (no lease): p1.1 leaves while t1 is still its.
        a_process_deregistered_while_holding_a_task:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job)
                .at(10).granted(1, 1, o(1, 1), None)
                .at(20).answer(Sender::Worker(o(1, 1)), Op::Deregister { owner: o(1, 1) }, Response::Ack, vec![], &[])
                .build()
            => [DEREGISTERED_HOLDING];
        a_process_deregistered_holding_nothing_reaches_nothing:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job)
                .attempt_ok(10, 1, 1, o(1, 1))
                .at(5_000).answer(Sender::Worker(o(1, 1)), Op::Deregister { owner: o(1, 1) }, Response::Ack, vec![], &[])
                .build()
            => [];
        a_claim_whose_answer_was_lost:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).granted_lost(1, 1, o(1, 1), None)
                .build()
            => [CLAIM_ANSWER_LOST];
        // p1.1 is up and running but silent: p2.1 releases its task as dead.
        a_silent_live_owners_task_released:
            H::new().up(o(1, 1)).up(o(2, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job)
                .at(10).granted(1, 1, o(1, 1), None)
                .at(60_000).released_by(1, o(2, 1), Op::ReleaseOwners { by: o(2, 1), owners: vec![o(1, 1)] }, ReleaseCause::DeadOwner)
                .build()
            => [DEAD_OWNER_RELEASED, LIVE_OWNER_RELEASED];
        // The same release of a gone owner's task: dead, not silent (with
        // no kill injected, its end reads as an exit holding the task).
        a_gone_owners_task_released:
            H::new().up(o(1, 1)).up(o(2, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job)
                .at(10).granted(1, 1, o(1, 1), None)
                .at(100).killed(o(1, 1))
                .at(60_000).released_by(1, o(2, 1), Op::ReleaseOwners { by: o(2, 1), owners: vec![o(1, 1)] }, ReleaseCause::DeadOwner)
                .build()
            => [DEAD_OWNER_RELEASED, EXIT_HOLDING];
        an_attempt_given_up_before_its_start:
            // Its claim answer came too late: the permit goes back unused.
            H::new().up(o(1, 1)).created(1, TaskKind::WorkflowTask)
                .at(10).grant(1, 1, o(1, 1))
                .at(3_500).permit(o(1, 1), 1, 1).unpermit(o(1, 1), 1, 1)
                .build()
            => [PERMIT_UNSTARTED];
    }

    fn maintain(owner: leasesim_vocab::ids::Owner) -> Op {
        Op::Maintain { owner, kind: leasesim_vocab::task::MaintenanceKind::Index, timeout_ms: None }
    }

    /// The aims of a history, as (point, kind, proc, at, for, anchor).
    fn aims(history: Vec<Record>) -> Vec<(String, FaultKind, Option<u32>, u64, u64, Anchor)> {
        let report = crate::check(&spec(), &history);
        report.aims.into_iter().map(|a| (a.point, a.kind, a.proc, a.at_ms, a.for_ms, a.anchor)).collect()
    }

    /// t1's body ended at 900 ms and its lease check (the lease runs to
    /// 3010 ms) came at 1000 ms.
    fn checked_in_time() -> H {
        H::new()
            .up(o(1, 1))
            .created(1, TaskKind::WorkflowTask)
            .at(10)
            .grant(1, 1, o(1, 1))
            .permit(o(1, 1), 1, 1)
            .started(1, 1, o(1, 1))
            .at(900)
            .finished(1, 1, o(1, 1), true)
            .at(1_000)
            .lease_checked(1, 1, o(1, 1), true)
    }

    /// The aim of t1's grant at 10 ms (a 3 s lease): a pause of its owner
    /// from the grant to a second past the expiry, so that the claim
    /// answer comes too late to start the body.
    fn answer_past_expiry() -> (String, FaultKind, Option<u32>, u64, u64, Anchor) {
        (PERMIT_UNSTARTED.name().to_string(), FaultKind::ProcessPause, Some(1), 10, 4_000, Anchor::Both)
    }

    /// A lease check that came in time (t1's lease runs to 3010 ms, the
    /// check arrives at 1000 ms) suggests a pause of its owner from just
    /// before it was sent until 200 ms past the expiry; beside it, the
    /// grant's own aim (its 1 s renewal margin is too short to aim into).
    #[test]
    fn a_lease_check_in_time_aims_a_pause_across_the_expiry() {
        let h = checked_in_time().completed(1, 1, o(1, 1)).callback(1, 1, o(1, 1)).unpermit(o(1, 1), 1, 1).build();
        let check =
            (LEASE_CHECK_AFTER_EXPIRY.name().to_string(), FaultKind::ProcessPause, Some(1), 980, 2_230, Anchor::Both);
        assert_eq!(aims(h), vec![answer_past_expiry(), check]);
    }

    /// A grant of a 6 s lease (an activity, renewal margin 2 s) suggests
    /// pausing its owner from the grant into the margin (until 1 s before
    /// the expiry: the body must confirm its lease first) and past the
    /// expiry (the permit must go back unused).
    #[test]
    fn a_grant_aims_its_answer_into_the_margin_and_past_the_expiry() {
        let h = H::new().up(o(1, 1)).created(1, TaskKind::Activity).at(10).grant(1, 1, o(1, 1)).build();
        let margin = (LEASE_CONFIRMED.name().to_string(), FaultKind::ProcessPause, Some(1), 10, 5_000, Anchor::Both);
        let expiry = (PERMIT_UNSTARTED.name().to_string(), FaultKind::ProcessPause, Some(1), 10, 7_000, Anchor::Both);
        assert_eq!(aims(h), vec![margin, expiry]);
    }

    /// A heartbeat-owned grant suggests pausing its owner past the dead
    /// timeout and a cleanup pass (200 s + 30 s + 2 s), half a second later.
    #[test]
    fn a_heartbeat_owned_grant_aims_a_pause_past_the_dead_timeout() {
        let h = H::new().up(o(1, 1)).created(1, TaskKind::Job).attempt_ok(10, 1, 1, o(1, 1)).build();
        let want =
            vec![(ZOMBIE_RELEASED.name().to_string(), FaultKind::ProcessPause, Some(1), 510, 232_000, Anchor::Start)];
        assert_eq!(aims(h), want);
    }

    /// Once the run reaches the point, its aims are dropped: a second lease
    /// check, after the expiry, reaches what the first one aimed at.
    #[test]
    fn a_reached_point_keeps_no_aims() {
        let h = checked_in_time().at(3_100).lease_checked(1, 1, o(1, 1), true).build();
        assert_eq!(aims(h), vec![answer_past_expiry()]);
    }

    #[test]
    fn names_are_unique_kebab_case_and_described() {
        let mut seen = BTreeSet::new();
        for p in POINTS {
            assert!(seen.insert(p.name), "{} listed twice", p.name);
            assert!(p.name.chars().all(|c| c.is_ascii_lowercase() || c == '-'), "{} is not kebab-case", p.name);
            assert!(!p.about.is_empty(), "{} has no description", p.name);
        }
        assert!(POINTS.len() >= 25, "only {} coverage points", POINTS.len());
        assert!(POINTS.len() <= 64, "a run's reached points are one bit each in a u64");
    }
}
