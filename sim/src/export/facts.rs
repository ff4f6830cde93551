//! Ground truth into the timeline, the same for every engine.
//!
//! The store's rows are rebuilt from the commits the harness read at the
//! store seam (`Fact::Answered`, `Fact::Drift`), as the checkers' view
//! rebuilds them, and read with the checkers' own notions: a grant is
//! `leasesim_check::granted` (the task leased afterwards to an attempt that
//! did not hold it before), a lease ends at `leasesim_check::lost_holder`
//! (the commit after which its attempt no longer holds the task), a write
//! is stale as `fenced-completion` judges one (its attempt did not hold the
//! task's row). Bodies are the task-body seam's; query results the client
//! seam's.

use super::{tag, wire_name, Builder, Cut, MarkKind, NewSpan, OpenLease, OpenReq, OpenTxn, OpenWrite, SpanKind};
use super::{StoreMark, Value};
use crate::check::view::{held_by, holder};
use crate::check::{granted, lost_holder};
use crate::truth::{ClientAnswer, ClientCall, Commit, Fact, Reply, Sender, TaskChange};
use leasesim_vocab::ids::{Fence, TxnId};
use leasesim_vocab::op::{Op, Refusal, Response};
use leasesim_vocab::task::TaskState;
use serde_json::Map;

/// How a write's answer ended it, in words.
fn write_end(response: &Response, commit: &Commit, reply: Reply) -> String {
    let what = match response {
        Response::Rejected { reason } => format!("rejected ({})", wire_name(reason)),
        _ if commit.tasks.is_empty() => "answered; it changed no task".to_string(),
        _ => "applied".to_string(),
    };
    match reply {
        Reply::Sent => what,
        Reply::Lost => format!("{what}; its answer was lost"),
        Reply::Late => format!("{what}; its answer was held back"),
    }
}

/// How a commit that took the task from `lost` ended its lease: the cut
/// (its own outcome ends it normally, anything else takes it away) and
/// what happened, in words.
fn lease_end(change: &TaskChange, lost: Fence, by: &str, by_fence: Option<Fence>) -> (Cut, String) {
    let after = &change.after;
    let failed = change.before.as_ref().is_some_and(|b| after.retries > b.retries);
    let what = match after.state {
        TaskState::Done => "completed".to_string(),
        TaskState::Dead => format!("dead after {} failures", after.retries),
        TaskState::Ready if failed => format!("failed: retry {} at {} ms", after.retries, after.retry_at_ms),
        TaskState::Ready => "released".to_string(),
        TaskState::Leased => {
            let to = after.owner.map_or("?".to_string(), |o| o.to_string());
            return (Cut::Reclaimed, format!("superseded: attempt {} granted to {to} by {by}", after.attempt));
        }
    };
    if by_fence == Some(lost) {
        (Cut::Normal, format!("{what} ({by})"))
    } else {
        (Cut::Reclaimed, format!("{what} by {by}"))
    }
}

impl Builder {
    /// Folds one fact into the timeline.
    pub(super) fn fact(&mut self, now: u64, f: &Fact) {
        match f {
            Fact::Arrived { req, from, request, duplicate } => self.arrived(now, *req, *from, request, *duplicate),
            Fact::Answered { req, response, commit, reply } => self.answered(now, *req, response, commit, *reply),
            Fact::Refused { req, response, fault } => {
                let by = fault.map_or("its own statement timeout", |k| k.name());
                self.refused(now, *req, response, by)
            }
            Fact::Dropped { req } => {
                self.reqs.remove(req);
                self.close_write(*req, now, "dropped: no answer came".into(), None);
            }
            Fact::Drift { commit } => self.apply_commit(now, "a change outside any request (drift)", None, commit),
            Fact::BodyStarted { fence, kind, on } => {
                self.see(*on);
                self.task_kinds.insert(fence.task, *kind);
                self.execs.insert(*fence, (*on, now));
            }
            Fact::BodyEnded { fence, error, .. } => {
                let ended = match error {
                    None => "finished ok".to_string(),
                    Some(e) => format!("finished with error {}", wire_name(e)),
                };
                self.close_exec(*fence, now, Cut::Normal, ended);
            }
            Fact::BodyStopped { fence, .. } => {
                self.close_exec(*fence, now, Cut::Killed, "stopped before it returned".into());
            }
            Fact::ClientCalled { call, what: ClientCall::Query { index, .. }, .. } => {
                self.queries.insert(*call, *index);
            }
            Fact::ClientAnswered { call, answer: ClientAnswer::Queried { materialized } } => {
                if let Some(index) = self.queries.remove(call) {
                    self.mark(now, MarkKind::Query { index, materialized: *materialized });
                }
            }
            Fact::StoreCrashed { .. } => {
                for txn in self.txns.keys().copied().collect::<Vec<_>>() {
                    self.close_txn(txn, now, Cut::Killed, "lost when the store process died");
                }
            }
            // Not drawn: answers leaving late, requests handed over after a
            // hold, callbacks, other client calls, notes, statements as
            // sent, partitions (their faults are marked), the end state.
            Fact::Handed { .. }
            | Fact::Replied { .. }
            | Fact::Callback { .. }
            | Fact::ClientCalled { .. }
            | Fact::ClientAnswered { .. }
            | Fact::NoteSent { .. }
            | Fact::NoteDelivered { .. }
            | Fact::TxnSent { .. }
            | Fact::Partitioned { .. }
            | Fact::Rejoined { .. }
            | Fact::StoreRestarted
            | Fact::Final { .. }
            | Fact::FinalQueues { .. } => {}
        }
    }

    /// A request reached the store: remember what it is, open its
    /// transaction or its outcome write.
    fn arrived(&mut self, now: u64, req: u64, from: Sender, request: &Op, duplicate: bool) {
        if let Sender::Worker(owner) = from {
            self.replaced(now, owner);
        }
        let stmt = request.statement();
        let mut fence = request.fence().copied();
        let txn = match request {
            Op::Exec { txn, commit, .. } => Some((*txn, *commit, false)),
            Op::Rollback { txn } => Some((*txn, false, true)),
            Op::Commit { txn } => Some((*txn, true, false)),
            _ => None,
        };
        // A statement opens its transaction, unless the store already ended
        // it (the statement is then answered that it is no longer open).
        if let Op::Exec { txn: id, .. } = request {
            if !self.txns_ended.contains(id) {
                let open = OpenTxn { start_ms: now, fence, statements: 0, ops: Default::default() };
                let t = self.txns.entry(*id).or_insert(open);
                t.fence = t.fence.or(fence);
                if !matches!(stmt, Op::Other { .. }) {
                    t.ops.insert(stmt.op_name());
                }
            }
        }
        let dup = if duplicate { "duplicate " } else { "" };
        let by = match (request, fence) {
            (Op::Commit { txn }, _) => {
                let open = self.txns.get(txn);
                fence = open.and_then(|t| t.fence);
                let ops: Vec<&str> = open.map(|t| t.ops.iter().copied().collect()).unwrap_or_default();
                let ops = if ops.is_empty() { String::new() } else { format!(" ({})", ops.join(", ")) };
                format!("{dup}commit of {txn}{ops} from {from}")
            }
            (_, Some(f)) => format!("{dup}{} of {} from {from}", stmt.op_name(), tag(&f)),
            (_, None) => format!("{dup}{} from {from}", stmt.op_name()),
        };
        self.reqs.insert(req, OpenReq { by, fence, txn });
        if let (true, false, Some(f), Sender::Worker(_)) = (stmt.is_outcome_write(), duplicate, fence, from) {
            let stale = self.stale_at(&f);
            self.writes.insert(req, OpenWrite { fence: f, start_ms: now, what: stmt.op_name(), stale });
        }
    }

    /// Why attempt `fence` does not hold its task now, if it does not
    /// (`fenced-completion`'s words). A task its own completion already
    /// made done is not taken from it: a retried completion is not stale.
    fn stale_at(&self, fence: &Fence) -> Option<String> {
        match self.rows.get(&fence.task) {
            Some(row) if held_by(row, fence) => None,
            Some(_) if self.done_by.get(&fence.task) == Some(fence) => None,
            Some(row) => Some(format!("at its arrival {}", holder(row))),
            None => Some("at its arrival the task does not exist".to_string()),
        }
    }

    /// Why the store's change to `fence`'s task in `commit` was stale, if it
    /// was: the row before it was not held by the attempt.
    fn stale_change(&self, fence: &Fence, commit: &Commit) -> Option<String> {
        let change = commit.task(fence.task)?;
        match change.before.as_ref().or(self.rows.get(&fence.task)) {
            Some(row) if held_by(row, fence) => None,
            Some(row) => Some(format!("the store changed the task while {}", holder(row))),
            None => Some("the store changed a task that did not exist".to_string()),
        }
    }

    /// A request of `owner` reached the store: the transactions of its
    /// process's older incarnations end there (the view's default rule,
    /// `ReplacedTxnsEnd::AnyRequest`: their connections are gone).
    fn replaced(&mut self, now: u64, owner: leasesim_vocab::ids::Owner) {
        let older: Vec<TxnId> = self
            .txns
            .keys()
            .filter(|t| t.owner.proc == owner.proc && t.owner.incarnation < owner.incarnation)
            .copied()
            .collect();
        for txn in older {
            let why = format!("ended by the store: a newer incarnation, {owner}, reached it");
            self.close_txn(txn, now, Cut::Killed, &why);
        }
    }

    fn answered(&mut self, now: u64, req: u64, response: &Response, commit: &Commit, reply: Reply) {
        let OpenReq { by, fence, txn } =
            self.reqs.remove(&req).unwrap_or_else(|| OpenReq { by: format!("request {req}"), fence: None, txn: None });
        // Judged before the rows change, as fenced-completion judges it.
        let stale = self.writes.get(&req).and_then(|w| self.stale_change(&w.fence, commit));
        self.apply_commit(now, &by, fence, commit);
        if let Some(f) = fence.filter(|f| commit.task(f.task).is_some_and(|c| c.after.state == TaskState::Done)) {
            self.done_by.insert(f.task, f);
        }
        if let (Response::Rejected { reason }, Some(f)) = (response, fence) {
            self.store(now, StoreMark::Rejected, Some(f.task), format!("{by} rejected: {}", wire_name(reason)));
        }
        self.close_write(req, now, write_end(response, commit, reply), stale);
        if let Some((id, commits, rollback)) = txn {
            self.txn_answered(now, id, (commits, rollback), response);
        }
    }

    /// A statement, COMMIT or rollback of `txn` was answered: the
    /// transaction ends, or counts one more statement.
    fn txn_answered(&mut self, now: u64, txn: TxnId, (commits, rollback): (bool, bool), response: &Response) {
        let (cut, ended_by) = match response {
            Response::Rejected { reason: Refusal::TxnClosed } => (Cut::Killed, "told it is no longer open".to_string()),
            Response::Rejected { reason: Refusal::TimedOut } => (Cut::Killed, "a lock wait timed out".to_string()),
            _ if rollback => (Cut::Killed, "rolled back".to_string()),
            Response::Rejected { reason } if commits => {
                (Cut::Killed, format!("its commit was refused ({})", wire_name(reason)))
            }
            _ if commits => (Cut::Normal, "committed".to_string()),
            _ => {
                if let Some(t) = self.txns.get_mut(&txn) {
                    t.statements += 1;
                }
                return;
            }
        };
        self.close_txn(txn, now, cut, &ended_by);
    }

    /// The harness answered for the store: nothing applied; a statement's
    /// transaction is aborted with it.
    fn refused(&mut self, now: u64, req: u64, response: &Response, by: &str) {
        let Some(r) = self.reqs.remove(&req) else { return };
        let reason = match response {
            Response::Rejected { reason } => wire_name(reason),
            other => wire_name(other),
        };
        self.close_write(req, now, format!("refused by {by} ({reason})"), None);
        if let Some((txn, _, _)) = r.txn {
            self.close_txn(txn, now, Cut::Killed, &format!("aborted by {by} at the store"));
        }
    }

    /// The store's rows change as `commit` (made by `by`, for the attempt
    /// `by_fence` if it speaks for one) says: leases open and close, store
    /// marks are set.
    pub(super) fn apply_commit(&mut self, now: u64, by: &str, by_fence: Option<Fence>, commit: &Commit) {
        for change in &commit.tasks {
            self.task_change(now, by, by_fence, change);
        }
        for s in &commit.stages {
            if s.after.done && !s.before.as_ref().is_some_and(|b| b.done) {
                self.store(now, StoreMark::StageDone, s.after.task, format!("{} done by {by}", s.stage));
            }
        }
        for index in &commit.materialized {
            let task = by_fence.map(|f| f.task);
            self.store(now, StoreMark::Materialized, task, format!("index {index} materialized by {by}"));
        }
    }

    fn task_change(&mut self, now: u64, by: &str, by_fence: Option<Fence>, change: &TaskChange) {
        let after = &change.after;
        let id = after.id;
        self.task_kinds.insert(id, after.spec.kind);
        if change.before.is_none() && !self.rows.contains_key(&id) {
            self.store(now, StoreMark::Created, Some(id), format!("t{id} ({}) by {by}", after.spec.kind.name()));
        }
        if let Some(lost) = lost_holder(change).filter(|l| self.leases.get(&id).is_some_and(|o| o.fence == *l)) {
            let (cut, ended_by) = lease_end(change, lost, by, by_fence);
            self.close_lease(id, now, cut, ended_by);
        }
        if let Some(fence) = granted(change) {
            self.see(fence.owner);
            self.close_lease(id, now, Cut::Reclaimed, format!("superseded by the grant of {fence} ({by})"));
            let lease =
                OpenLease { fence, start_ms: now, kind: after.spec.kind, expiry: after.lease_expiry_ms, renewals: 0 };
            self.leases.insert(id, lease);
        } else if let Some(l) = self.leases.get_mut(&id) {
            if held_by(after, &l.fence) && after.lease_expiry_ms != l.expiry {
                l.renewals += 1;
                l.expiry = after.lease_expiry_ms;
            }
        }
        self.state_marks(now, by, change);
        self.rows.insert(id, after.clone());
    }

    /// The store marks a row change makes: done, dead, failed (and due
    /// again), released.
    fn state_marks(&mut self, now: u64, by: &str, change: &TaskChange) {
        let after = &change.after;
        let id = after.id;
        let before = change.before.as_ref();
        let was = |state| before.is_some_and(|b| b.state == state);
        let failed = before.is_some_and(|b| after.retries > b.retries);
        let (what, detail) = match after.state {
            TaskState::Done if !was(TaskState::Done) => (StoreMark::Done, format!("t{id} done by {by}")),
            TaskState::Dead if !was(TaskState::Dead) => {
                (StoreMark::Dead, format!("t{id} dead after {} failures, by {by}", after.retries))
            }
            TaskState::Ready if failed => (
                StoreMark::Failed,
                format!("t{id} failed by {by}: retry {} at {} ms", after.retries, after.retry_at_ms),
            ),
            TaskState::Ready => match lost_holder(change) {
                Some(lost) => (StoreMark::Released, format!("{lost} released by {by}")),
                None => return,
            },
            _ => return,
        };
        self.store(now, what, Some(id), detail);
    }

    pub(super) fn close_txn(&mut self, txn: TxnId, now: u64, cut: Cut, ended_by: &str) {
        let Some(t) = self.txns.remove(&txn) else { return };
        self.txns_ended.insert(txn);
        self.see(txn.owner);
        let mut args = Map::new();
        args.insert("statements".into(), Value::from(t.statements + u32::from(cut == Cut::Normal)));
        let ops: Vec<&str> = t.ops.iter().copied().collect();
        args.insert("did".into(), Value::from(ops.join(", ")));
        if let Some(f) = t.fence {
            args.insert("attempt".into(), Value::from(tag(&f)));
        }
        self.span(NewSpan {
            kind: SpanKind::Transaction,
            owner: txn.owner,
            fence: t.fence.map(|f| (f.task, f.attempt)),
            name: format!("txn {txn}"),
            start_ms: t.start_ms,
            end_ms: now,
            cut,
            ended_by: ended_by.to_string(),
            args,
        });
    }
}
