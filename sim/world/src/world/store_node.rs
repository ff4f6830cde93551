//! The store process: an engine's store behind the store seam.
//!
//! Store-side faults enter here, between the network and the engine's store,
//! never inside the engine: stalls, lost requests and replies (ambiguous
//! commits), late replies, hung outcome writes, transaction timeouts,
//! dropped heartbeats, hung maintenance passes, long polls whose caller is
//! killed while they are open, serialization failures, requests delivered
//! twice, and crashes of the store process itself.
//!
//! It is also where the harness records the store's ground truth: every
//! request that arrived and who sent it (classified in the harness's words
//! by the engine's adapter, [`StoreSeam::classify`]), what became of it,
//! what the store answered and what that answer's transaction changed (read
//! back by the adapter's tap, [`StoreSeam::tap`]). Every decision here is
//! made on the classified request, so every engine gets the same faults.

use super::controller::Controller;
use super::injector::{chance, upto, Injector};
use super::link::Envelope;
use crate::engine::{EngineUnderTest, StoreSeam};
use crate::faults::FaultKind;
use crate::history::Recorder;
use crate::truth::{Commit, Fact, Reply, Sender};
use leasesim_vocab::op::{Op, Refusal};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::sync::Notify;

/// The longest a second delivery of a request trails the first.
const DUPLICATE_MAX_LAG_MS: u64 = 2_000;

pub struct StoreNode<E: EngineUnderTest> {
    pub seam: Arc<E::Store>,
    pub faults: Arc<Injector>,
    pub control: Arc<Controller>,
    pub rec: Recorder,
    /// Numbers the requests that reach the store.
    pub next_req: AtomicU64,
    /// Longest downtime of a process killed under an open long poll.
    pub max_downtime_ms: u64,
    /// Whether the store process is up, and the requests it holds.
    pub crash: Crash,
    pub _alive: super::WorldToken,
}

/// The store process's life: a crash drops every request it holds (their
/// transactions abort; what committed stays committed, as a database's
/// durable state does) and, while it is down, every request that arrives.
#[derive(Default)]
pub struct Crash {
    down: AtomicBool,
    notify: Notify,
    /// Requests the process holds now (arrived, not yet answered or dropped).
    held: Mutex<BTreeSet<u64>>,
}

impl Crash {
    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Relaxed)
    }

    fn enter(&self, req: u64) {
        self.held.lock().expect("held").insert(req);
    }

    fn leave(&self, req: u64) {
        self.held.lock().expect("held").remove(&req);
    }

    /// Kills the process; returns how many requests it held.
    pub fn crash(&self) -> usize {
        self.down.store(true, Ordering::Relaxed);
        // Notify wakes waiters in the order they began to wait: the dropped
        // requests are recorded in arrival order, every run.
        self.notify.notify_waiters();
        self.held.lock().expect("held").len()
    }

    pub fn restart(&self) {
        self.down.store(false, Ordering::Relaxed);
    }

    /// Resolves when the process dies (only crashes are notified).
    async fn crashed(&self) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.is_down() {
            return;
        }
        notified.await;
    }
}

/// What happens to the reply once the request was applied.
enum After {
    Send,
    Lose,
    Delay(u64),
    Hold(i64),
}

/// How the front half of serving a request ended.
enum Front<R> {
    /// The harness dropped it: no answer will come.
    Dropped,
    /// The harness answered for the store (nothing applied), for this
    /// reason, because of this fault (`None`: the statement timeout the
    /// request carried).
    Refused(Refusal, Option<FaultKind>),
    /// The engine's store answered; the reply goes out as `After` says.
    Answered(R, After),
}

/// The refusal of a request a fault of `kind` aborted: what the store
/// answers in the situation the fault stands for.
fn refused_by<R>(kind: FaultKind) -> Front<R> {
    let answer = kind.answer().expect("a fault that aborts a request has an answer");
    Front::Refused(answer, Some(kind))
}

/// One request on its way through the store process.
struct Serving<'a, E: EngineUnderTest> {
    id: u64,
    req: E::Request,
    /// What the request does, one op per thing (see
    /// [`crate::engine::StoreSeam::classify_parts`]); recorded as requests
    /// `id`, `id + 1`, ... Faults are decided by the first.
    parts: &'a [Op],
    duplicate: bool,
}

impl<E: EngineUnderTest> StoreNode<E> {
    /// Serves one request. `None` means no answer is ever sent. A
    /// `duplicate` is a second delivery of a request already served: it is
    /// applied like any other, and its answer goes nowhere.
    async fn handle_op(&self, from: Sender, req: E::Request, parts: &[Op], duplicate: bool) -> Option<E::Response> {
        assert!(!parts.is_empty(), "a request does at least one thing");
        let id = self.next_req.fetch_add(parts.len() as u64, Ordering::Relaxed) + 1;
        if self.rec.enabled() {
            for (req, op) in (id..).zip(parts) {
                self.rec.fact(Fact::Arrived { req, from, request: op.clone(), duplicate });
            }
        }
        if self.crash.is_down() {
            // The store process is down: nobody takes the request.
            self.dropped(id, parts);
            return None;
        }
        self.seam.arrived(from);
        self.crash.enter(id);
        let served = tokio::select! {
            biased;
            _ = self.crash.crashed() => {
                // The process died holding it: no answer, nothing applied
                // that was not already committed.
                self.dropped(id, parts);
                None
            }
            served = self.serve(Serving { id, req, parts, duplicate }) => served,
        };
        self.crash.leave(id);
        served.filter(|_| !duplicate)
    }

    /// The request's way through the store process, up to its answer
    /// leaving (see `handle`).
    async fn serve(&self, s: Serving<'_, E>) -> Option<E::Response> {
        let (id, parts, duplicate) = (s.id, s.parts, s.duplicate);
        let op = &parts[0];
        let arrived_ms = self.rec.now_ms();
        let name = op.op_name();
        // A statement timeout runs from the moment the store has the request:
        // whatever holds it (a stall, a hang) counts, and when it strikes the
        // transaction is aborted with nothing applied. Other statements run
        // under the caller's deadline only.
        let timeout_ms = match op {
            Op::Maintain { timeout_ms, .. } => *timeout_ms,
            _ => None,
        };
        let front = self.front(id, arrived_ms, s.req, parts, duplicate);
        let front = match timeout_ms {
            None => front.await,
            Some(t) => tokio::select! {
                biased;
                front = front => front,
                _ = tokio::time::sleep(Duration::from_millis(t)) => Front::Refused(Refusal::TimedOut, None),
            },
        };
        let (resp, after) = match front {
            Front::Dropped => {
                self.dropped(id, parts);
                return None;
            }
            // A duplicate's refusal reaches nobody, but it was refused (and
            // a statement's transaction aborted with it).
            Front::Refused(reason, fault) => {
                let resp = self.seam.refuse(op, reason, fault);
                // What the store answered, in the harness's words.
                for (req, op) in (id..).zip(parts) {
                    self.rec.fact(Fact::Refused { req, response: self.seam.normalize(op, &resp), fault });
                }
                return (!duplicate).then_some(resp);
            }
            Front::Answered(resp, after) => (resp, after),
        };
        match after {
            After::Send => return Some(resp),
            After::Lose => {
                if !duplicate {
                    self.faults.inject(FaultKind::MessageLoss, format!("{name} reply lost after it applied"));
                }
                return None;
            }
            After::Delay(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
            After::Hold(magnitude) => self.faults.hold(magnitude).await,
        }
        for req in (id..).take(parts.len()) {
            self.rec.fact(Fact::Replied { req });
        }
        Some(resp)
    }

    /// No answer will come for any part of the request.
    fn dropped(&self, id: u64, parts: &[Op]) {
        for req in (id..).take(parts.len()) {
            self.rec.fact(Fact::Dropped { req });
        }
    }

    /// The faults on the way in, then the engine's store: everything up to
    /// the answer.
    async fn front(
        &self,
        id: u64,
        arrived_ms: u64,
        req: E::Request,
        parts: &[Op],
        duplicate: bool,
    ) -> Front<E::Response> {
        let op = &parts[0];
        // A duplicate's answer has no caller: it is lost whatever happens.
        let mut after = if duplicate { After::Lose } else { After::Send };
        if let Some(front) = self.arrival_faults(op, &mut after).await {
            return front;
        }
        if let Some(front) = self.transaction_faults(op, &mut after).await {
            return front;
        }
        self.stale_poll(op, &mut after);
        self.message_delay(op, &mut after).await;
        if duplicate {
            after = After::Lose;
        }
        let resp = self.apply(id, arrived_ms, req, parts, &after).await;
        Front::Answered(resp, after)
    }

    /// Faults before the store has the request: a stall holds it, a missed
    /// heartbeat or a lost request drops it (a lost reply is decided here
    /// too), a hung maintenance pass never gets further.
    async fn arrival_faults(&self, op: &Op, after: &mut After) -> Option<Front<E::Response>> {
        let f = &self.faults;
        let name = op.op_name();
        if let Some(stall) = f.active(FaultKind::StoreStall) {
            f.inject(FaultKind::StoreStall, format!("{name} held until {} ms", stall.end_ms()));
            let wait_ms = stall.end_ms().saturating_sub(f.now_ms());
            f.hold(wait_ms as i64).await;
        }
        if let Op::Heartbeat { owner } = op {
            if f.active_for(FaultKind::MissedHeartbeat, owner.proc).is_some() {
                f.inject(FaultKind::MissedHeartbeat, format!("heartbeat of {owner} dropped"));
                return Some(Front::Dropped);
            }
        }
        if f.roll(FaultKind::MessageLoss).is_some() {
            if chance(0.5) {
                f.inject(FaultKind::MessageLoss, format!("{name} request lost"));
                return Some(Front::Dropped);
            }
            *after = After::Lose;
        }
        if let Op::Maintain { kind, owner, .. } = op {
            if f.roll(FaultKind::HungMaintenance).is_some() {
                // The pass's work never finishes (a lock it waits on, a
                // statement that never returns); only its statement timeout,
                // if it set one, ends it.
                f.inject(FaultKind::HungMaintenance, format!("{} pass of {owner} never returns", kind.name()));
                std::future::pending::<()>().await;
            }
        }
        None
    }

    /// Faults of the request's transaction: an outcome write or lease check
    /// that hangs (before it applies, or its reply), a write that times out
    /// (57014), a lock wait that times out (55P03), a serialization failure
    /// (40001). Each is answered as PostgreSQL answers it (see the adapters'
    /// `refuse`).
    async fn transaction_faults(&self, op: &Op, after: &mut After) -> Option<Front<E::Response>> {
        let f = &self.faults;
        let name = op.op_name();
        if op.is_outcome_write() || matches!(op.statement(), Op::LeaseValid { .. }) {
            if let Some(e) = f.roll(FaultKind::HungFinalization) {
                let magnitude = e.magnitude_ms;
                if chance(0.5) {
                    f.inject(FaultKind::HungFinalization, format!("{name} held before it applies"));
                    f.hold(magnitude).await;
                } else {
                    f.inject(FaultKind::HungFinalization, format!("{name} applies, its reply is held"));
                    *after = After::Hold(magnitude);
                }
            }
        }
        if is_write(op) {
            if let Some(e) = f.roll(FaultKind::TxnTimeout) {
                let magnitude = e.magnitude_ms;
                f.inject(FaultKind::TxnTimeout, format!("{name} transaction timed out"));
                tokio::time::sleep(Duration::from_millis(magnitude.max(0) as u64)).await;
                self.abort(op);
                return Some(refused_by(FaultKind::TxnTimeout));
            }
        }
        if changes_rows(op) {
            if let Some(e) = f.roll(FaultKind::LockTimeout) {
                // A concurrent transaction holds the row: the statement waits
                // out the lock timeout, and the database aborts its
                // transaction with nothing applied.
                f.inject(FaultKind::LockTimeout, format!("{name} gave up waiting for a row lock"));
                tokio::time::sleep(Duration::from_millis(e.magnitude_ms.max(0) as u64)).await;
                self.abort(op);
                return Some(refused_by(FaultKind::LockTimeout));
            }
        }
        if changes_rows(op) && f.roll(FaultKind::SerializationFailure).is_some() {
            // A concurrent transaction touched the same rows: the database
            // aborts this one at once and tells the caller to retry.
            f.inject(FaultKind::SerializationFailure, format!("{name} aborted by a serialization failure"));
            self.abort(op);
            return Some(refused_by(FaultKind::SerializationFailure));
        }
        None
    }

    /// The database aborted the request's transaction: a statement's
    /// transaction (opened by earlier statements) ends with it.
    fn abort(&self, op: &Op) {
        if let Op::Exec { txn, .. } | Op::Commit { txn } = op {
            self.seam.abort(*txn);
        }
    }

    /// A late message: either leg can be slow. A late request applies late,
    /// a late reply answers with what was true earlier.
    async fn message_delay(&self, op: &Op, after: &mut After) {
        let f = &self.faults;
        let name = op.op_name();
        if let Some(e) = f.roll(FaultKind::MessageDelay) {
            let delay_ms = upto(e.magnitude_ms.max(0) as u64);
            if chance(0.5) {
                f.inject(FaultKind::MessageDelay, format!("{name} request delayed {delay_ms} ms"));
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            } else if matches!(after, After::Send) {
                f.inject(FaultKind::MessageDelay, format!("{name} reply delayed {delay_ms} ms"));
                *after = After::Delay(delay_ms);
            }
        }
    }

    /// Stale polls: a long poll whose caller dies while it is open, or a
    /// poll or snapshot answered late.
    fn stale_poll(&self, op: &Op, after: &mut After) {
        let f = &self.faults;
        match op {
            Op::Claim { owner, wait_ms, .. }
                if *wait_ms > 0 && f.roll(FaultKind::StalePoll).is_some() && chance(0.5) =>
            {
                // The caller dies while its long poll stays open here; the
                // poll may still claim for it.
                let kill_after_ms = upto(*wait_ms / 2);
                f.inject(FaultKind::StalePoll, format!("{owner} killed {kill_after_ms} ms into its open long poll"));
                self.kill_later(owner.proc, kill_after_ms);
            }
            Op::Claim { wait_ms, .. } if *wait_ms > 0 => {}
            Op::Claim { .. } | Op::PipelineSnapshot { .. } => {
                if let Some(e) = f.roll(FaultKind::StalePoll) {
                    let delay_ms = upto(e.magnitude_ms.max(0) as u64);
                    f.inject(FaultKind::StalePoll, format!("{} answered {delay_ms} ms late", op.op_name()));
                    *after = After::Delay(delay_ms);
                }
            }
            // Not polls.
            _ => {}
        }
    }

    /// Hands the request to the engine's store and records what it answered
    /// and what its transaction changed. The store's rows the request may
    /// change are first checked against the tap's mirror: a difference there
    /// happened outside any request (drift).
    async fn apply(&self, id: u64, arrived_ms: u64, req: E::Request, parts: &[Op], after: &After) -> E::Response {
        let op = &parts[0];
        let drift = self.sync(Some(op));
        if !drift.is_empty() {
            self.rec.fact(Fact::Drift { commit: drift });
        }
        // Held requests say when the store took them, for the checkers that
        // judge what a store does while it holds one.
        let held = matches!(op, Op::Claim { wait_ms, .. } if *wait_ms > 0) || matches!(op, Op::QueryIndex { .. });
        if held || self.rec.now_ms() > arrived_ms {
            for req in (id..).take(parts.len()) {
                self.rec.fact(Fact::Handed { req });
            }
        }
        let resp = self.seam.serve(req).await;
        // Same poll as the store's last apply: no other transaction between.
        let commit = self.sync(Some(op));
        let reply = match after {
            After::Send => Reply::Sent,
            After::Lose => Reply::Lost,
            After::Delay(_) | After::Hold(_) => Reply::Late,
        };
        if self.rec.enabled() {
            for ((req, op), commit) in (id..).zip(parts).zip(split_commit(parts, commit)) {
                let response = self.seam.normalize(op, &resp);
                self.rec.fact(Fact::Answered { req, response, commit, reply });
            }
        }
        resp
    }

    /// The tap's look at the store (skipped when nothing is recorded).
    fn sync(&self, op: Option<&Op>) -> Commit {
        if self.rec.enabled() {
            self.seam.tap(op)
        } else {
            Commit::default()
        }
    }

    /// Should this request be delivered a second time, and after how long?
    fn duplicate_after_ms(&self, op: &Op) -> Option<u64> {
        if !self.seam.may_duplicate(op) || self.faults.roll(FaultKind::DuplicateDelivery).is_none() {
            return None;
        }
        let after_ms = upto(DUPLICATE_MAX_LAG_MS);
        self.faults
            .inject(FaultKind::DuplicateDelivery, format!("{} delivered again {after_ms} ms later", op.op_name()));
        Some(after_ms)
    }

    /// The store process dies (see [`Crash`]).
    pub fn crash_now(&self) {
        if self.crash.is_down() {
            return;
        }
        let held = self.crash.crash() as u64;
        self.seam.crash();
        self.faults.inject(FaultKind::StoreCrash, format!("store process died holding {held} requests"));
        self.rec.fact(Fact::StoreCrashed { held });
    }

    /// The store process is back, with what it had committed.
    pub fn restart_now(&self) {
        if self.crash.is_down() {
            self.crash.restart();
            self.rec.fact(Fact::StoreRestarted);
        }
    }

    fn kill_later(&self, proc: u32, after_ms: u64) {
        let control = self.control.clone();
        let faults = self.faults.clone();
        let downtime_ms = 1_000 + upto(self.max_downtime_ms.saturating_sub(1_000));
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(after_ms)).await;
            if faults.is_healed() || !control.kill(proc) {
                return;
            }
            tokio::select! {
                biased;
                _ = faults.until_heal() => {}
                _ = tokio::time::sleep(Duration::from_millis(downtime_ms)) => {}
            }
            control.restart(proc);
        });
    }
}

/// The store process's side of the link: takes each request as it arrives
/// and serves it in a task of its own (a held request must not hold up the
/// others), sending its answer back over the link.
pub async fn serve<E: EngineUnderTest>(mut inbox: mpsc::UnboundedReceiver<Envelope<E>>, store: Arc<StoreNode<E>>) {
    while let Some(Envelope { from, req, reply, .. }) = inbox.recv().await {
        let parts = store.seam.classify_parts(from, &req);
        if let Some(after_ms) = store.duplicate_after_ms(&parts[0]) {
            let (store, req, parts) = (store.clone(), req.clone(), parts.clone());
            tokio::spawn(Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(after_ms)).await;
                store.handle_op(from, req, &parts, true).await;
            }));
        }
        // Boxed: serving a request is a large future (every store fault's
        // state), and a spawn moves its future several times on the way
        // into its task; a box is moved instead.
        let store = store.clone();
        tokio::spawn(Box::pin(async move {
            // `None`: the answer is never sent (the store seam dropped it).
            if let Some(resp) = store.handle_op(from, req, &parts, false).await {
                reply.send(resp).await;
            }
        }));
    }
}

/// One request's commit, told part by part: each task change to the part
/// whose fence names the task, the rest to the first part.
fn split_commit(parts: &[Op], commit: Commit) -> Vec<Commit> {
    if parts.len() == 1 {
        return vec![commit];
    }
    let mut split: Vec<Commit> = parts.iter().map(|_| Commit::default()).collect();
    let Commit { tasks, stages, materialized, queues } = commit;
    for change in tasks {
        let at = parts.iter().position(|op| op.fence().is_some_and(|f| f.task == change.after.id)).unwrap_or(0);
        split[at].tasks.push(change);
    }
    split[0].stages = stages;
    split[0].materialized = materialized;
    split[0].queues = queues;
    split
}

/// Requests whose transaction may change rows: any of them can abort on a
/// serialization failure (claims, heartbeats and maintenance included).
fn changes_rows(op: &Op) -> bool {
    !matches!(
        op.statement(),
        Op::Rollback { .. }
            | Op::Commit { .. }
            | Op::LeaseValid { .. }
            | Op::PipelineSnapshot { .. }
            | Op::QueryIndex { .. }
            | Op::Other { .. }
    )
}

/// Requests a network or proxy may deliver twice. Not maintenance (one pass
/// per session by construction), lag-bounded queries or long polls (held
/// requests whose second copy would be a second caller).
pub fn may_duplicate(op: &Op) -> bool {
    match op {
        Op::Maintain { .. } | Op::QueryIndex { .. } => false,
        Op::Claim { wait_ms, .. } => *wait_ms == 0,
        _ => true,
    }
}

/// Requests that write (a transaction that can time out).
fn is_write(op: &Op) -> bool {
    matches!(
        op.statement(),
        Op::Complete { .. }
            | Op::Fail { .. }
            | Op::Renew { .. }
            | Op::ClearStageLink { .. }
            | Op::Enqueue { .. }
            | Op::EnqueueStage { .. }
    )
}
