//! Transactions that span round trips, as a SQL store runs them under Read
//! Committed.
//!
//! A transaction is opened by its first statement and ends by a statement
//! sent with COMMIT, a rollback, or the store aborting it: it stayed open
//! past `txn_timeout_ms` (a client that stalled or died between statements),
//! its process was replaced by a newer incarnation, or the store process
//! restarted. Until it commits, nothing it wrote is visible to anyone else.
//!
//! Each statement runs at its own time against the committed rows plus the
//! transaction's own writes. A fenced statement whose fence holds locks its
//! task row (and with it the task's stage row), as `SELECT … FOR UPDATE` or
//! `UPDATE … WHERE attempt = $ AND owner = $` does: other writers of that
//! row wait for the lock (`Store::blocked_until`), claims and recovery
//! passes skip it (`SKIP LOCKED`). COMMIT writes the rows exactly as the
//! statements computed them, which is what running them at their own times
//! would have done, because nobody else could change a locked row.

use super::Store;
use crate::event::{Event, Observer};
use crate::ids::{Fence, IndexId, Owner, StageRef, TaskId, TxnId};
use crate::proto::{Rejection, Request, Response};
use crate::task::Task;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// One open transaction: its deadline, the rows it locked (as they were
/// committed when it locked them, and as it has written them), and the
/// events its writes will report once it commits.
#[derive(Debug, Clone, Default)]
pub(super) struct OpenTxn {
    deadline_ms: u64,
    rows: BTreeMap<TaskId, (RowVersion, RowVersion)>,
    events: Vec<Event>,
}

/// Everything a statement on one task may write, as this transaction sees
/// it: the task row, its stage row, its completion and the index it built.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RowVersion {
    task: Task,
    stage: Option<(StageRef, super::StageRow)>,
    completion: Option<Fence>,
    built: Option<(IndexId, Option<TaskId>)>,
}

/// Collects a statement's events until its transaction commits.
#[derive(Default)]
struct Deferred(Mutex<Vec<Event>>);

impl Observer for Deferred {
    fn emit(&self, event: Event) {
        self.0.lock().expect("deferred events").push(event);
    }
}

impl Store {
    /// Has the store seen a newer incarnation of this owner's process?
    pub(super) fn superseded(&self, owner: Owner) -> bool {
        self.incarnations.get(&owner.proc).is_some_and(|&n| n > owner.incarnation)
    }

    /// The transaction holding a lock on this task row, if any.
    pub(super) fn lock_holder(&self, task: TaskId) -> Option<TxnId> {
        self.txns.iter().find(|(_, t)| t.rows.contains_key(&task)).map(|(id, _)| *id)
    }

    pub(super) fn locked(&self, task: TaskId) -> bool {
        !self.txns.is_empty() && self.lock_holder(task).is_some()
    }

    /// If `req` must wait for a lock held by another transaction: the store
    /// time at which that transaction times out. Transactions past their
    /// deadline are aborted first. A statement waits only if it would run
    /// (its transaction is open, or new) and its `WHERE` selects the row.
    pub fn blocked_until(&mut self, now_ms: u64, req: &Request) -> Option<u64> {
        self.expire_txns(now_ms);
        if let Request::Exec { txn, .. } = req {
            let superseded = self.superseded(txn.owner);
            if !self.txns.contains_key(txn) && (self.txn_ended.contains(txn) || superseded) {
                return None;
            }
        }
        let stmt = req.statement();
        let fence = req.fence()?;
        if !self.selects(now_ms, stmt) {
            return None;
        }
        let own = req.txn();
        let holder =
            self.lock_holder(fence.task).filter(|&h| Some(h) != own).or_else(|| self.built_holder(stmt, own))?;
        Some(self.txns[&holder].deadline_ms)
    }

    /// The open transaction (other than `own`) whose uncommitted completion
    /// built the index this completion would record as built: the second
    /// insert of the same key waits for the first (`built_indexes` has one
    /// row per index).
    fn built_holder(&self, stmt: &Request, own: Option<TxnId>) -> Option<TxnId> {
        let Request::Complete { fence } = stmt else { return None };
        let task = self.tasks.get(&fence.task)?;
        let index = task.spec.index.filter(|_| task.spec.kind == crate::task::TaskKind::IndexBuild)?;
        if self.materialized.contains(&index) || self.built.contains_key(&index) {
            return None;
        }
        let inserted = |t: &OpenTxn| {
            t.rows.values().any(|(base, written)| {
                matches!(written.built, Some((i, Some(_))) if i == index) && base.built != written.built
            })
        };
        self.txns.iter().find(|(id, t)| Some(**id) != own && inserted(t)).map(|(id, _)| *id)
    }

    /// Does a fenced statement's `WHERE` match its row as this store (or
    /// transaction) sees it at `now_ms`? Only then does it lock the row, or
    /// wait for another's lock: a fence that matches nothing selects nothing
    /// (a completion retried by its own attempt reads a done row, unlocked;
    /// a lease check of a lease that ran out finds no valid row).
    fn selects(&self, now_ms: u64, stmt: &Request) -> bool {
        match stmt {
            Request::Renew { fence } => self.check_fence(fence).is_ok(),
            Request::LeaseValid { fence } => {
                self.check_fence(fence).is_ok() && self.tasks[&fence.task].lease_expiry_ms.is_none_or(|e| e > now_ms)
            }
            Request::Complete { fence } | Request::Fail { fence, .. } | Request::ClearStageLink { fence } => {
                self.check_outcome_fence(fence).is_ok()
            }
            _ => false,
        }
    }

    /// Open transactions, in id order.
    pub fn open_txns(&self) -> impl Iterator<Item = TxnId> + '_ {
        self.txns.keys().copied()
    }

    /// The earliest deadline of an open transaction.
    pub fn next_txn_deadline_ms(&self) -> Option<u64> {
        self.txns.values().map(|t| t.deadline_ms).min()
    }

    /// How many transactions have ended (committed, rolled back, aborted):
    /// a change here may release locks someone waits for.
    pub fn txn_ends(&self) -> u64 {
        self.txn_ends
    }

    /// Ends the open transactions `doomed` picks, with nothing applied.
    fn abort_where(&mut self, doomed: impl Fn(&TxnId, &OpenTxn) -> bool) {
        let ended: Vec<TxnId> = self.txns.iter().filter(|(id, t)| doomed(id, t)).map(|(id, _)| *id).collect();
        for txn in ended {
            self.abort_txn(txn);
        }
    }

    /// Aborts the transactions open past their deadline.
    pub(super) fn expire_txns(&mut self, now_ms: u64) {
        if self.txns.values().any(|t| t.deadline_ms <= now_ms) {
            self.abort_where(|_, t| t.deadline_ms <= now_ms);
        }
    }

    /// Aborts the open transactions of incarnations of `owner.proc` older
    /// than `owner`: their client is gone (its connection with it). Their
    /// statements are refused from now on anyway (superseded owners), so
    /// the record of their ended transactions can go.
    pub(super) fn abort_txns_before(&mut self, owner: Owner) {
        let older = |id: &TxnId| id.owner.proc == owner.proc && id.owner.incarnation < owner.incarnation;
        self.abort_where(|id, _| older(id));
        self.txn_ended.retain(|id| !older(id));
    }

    /// The store process died: every open transaction is lost with it.
    pub fn abort_all_txns(&mut self) {
        self.abort_where(|_, _| true);
    }

    /// One statement of `txn` (see [`Request::Exec`]).
    pub(super) fn exec(
        &mut self,
        now_ms: u64,
        txn: TxnId,
        stmt: &Request,
        commit: bool,
        obs: &dyn Observer,
    ) -> Response {
        let superseded = self.superseded(txn.owner);
        let open = self.txns.contains_key(&txn);
        if !open && !superseded && !self.txn_ended.contains(&txn) {
            let deadline_ms = now_ms + self.cfg.txn_timeout_ms;
            self.txns.insert(txn, OpenTxn { deadline_ms, ..OpenTxn::default() });
        }
        let open = self.txns.contains_key(&txn);
        if !open || superseded {
            self.abort_txn(txn);
            return Response::Rejected { reason: Rejection::TxnClosed };
        }
        if !stmt.runs_in_txn() {
            // Not a statement the protocol runs in a transaction: refused,
            // and the transaction aborted (as a SQL error aborts it).
            self.abort_txn(txn);
            return Response::Rejected { reason: Rejection::TxnClosed };
        }
        let resp = self.run_statement(now_ms, txn, stmt, obs);
        if commit {
            self.commit_txn(txn, obs);
        }
        resp
    }

    /// Ends `txn` with nothing applied. A rollback of a transaction the
    /// store has not seen yet (its first statement still on the way) ends
    /// it too: that statement is refused when it comes.
    pub(super) fn rollback(&mut self, txn: TxnId) -> Response {
        let superseded = self.superseded(txn.owner);
        let was_open = self.abort_txn(txn);
        if !superseded {
            self.txn_ended.insert(txn);
        }
        if was_open {
            Response::Ack
        } else {
            Response::Rejected { reason: Rejection::TxnClosed }
        }
    }

    fn abort_txn(&mut self, txn: TxnId) -> bool {
        let ended = self.txns.remove(&txn).is_some();
        if ended {
            self.txn_ends += 1;
            self.txn_ended.insert(txn);
        }
        ended
    }

    /// Runs one statement against the committed rows plus the transaction's
    /// own writes, and keeps what it wrote (and its lock) in the transaction.
    fn run_statement(&mut self, now_ms: u64, txn: TxnId, stmt: &Request, obs: &dyn Observer) -> Response {
        let task = stmt.fence().unwrap_or_else(|| unreachable!("{} is not fenced", stmt.op_name())).task;
        if !self.tasks.contains_key(&task) {
            return self.apply_request(now_ms, stmt, &crate::event::NullObserver);
        }
        let own = self.txns[&txn].rows.get(&task).map(|(_, written)| written.clone());
        let committed = self.row_version(task);
        if let Some(own) = &own {
            self.install(own);
        }
        let selects = self.selects(now_ms, stmt);
        // A read reports what it saw at once; writes report at commit.
        let deferred = Deferred::default();
        let resp = match stmt {
            Request::LeaseValid { .. } => self.apply_request(now_ms, stmt, obs),
            _ => self.apply_request(now_ms, stmt, &deferred),
        };
        let written = self.row_version(task);
        self.install(&committed);
        // A lease check locks only a row it found valid (`… AND lease not
        // expired FOR UPDATE`); a write, the row its fence selected.
        let matched = match &resp {
            Response::Valid { valid } => *valid,
            _ => selects,
        };
        let open = self.txns.get_mut(&txn).expect("statement of an open transaction");
        if matched || own.is_some() {
            match open.rows.get_mut(&task) {
                Some(row) => row.1 = written,
                None => {
                    open.rows.insert(task, (committed, written));
                }
            }
        }
        open.events.extend(deferred.0.into_inner().expect("deferred events"));
        resp
    }

    /// Makes the transaction's writes the committed rows and reports them.
    fn commit_txn(&mut self, txn: TxnId, obs: &dyn Observer) {
        let open = self.txns.remove(&txn).expect("committed transaction is open");
        self.txn_ends += 1;
        self.txn_ended.insert(txn);
        for (base, written) in open.rows.values() {
            self.install_changes(base, written);
        }
        for event in open.events {
            obs.emit(event);
        }
    }

    /// The committed version of everything a statement on `task` may write.
    fn row_version(&self, task: TaskId) -> RowVersion {
        let row = self.tasks[&task].clone();
        let stage = row.spec.stage.and_then(|s| self.stages.get(&s).map(|r| (s, r.clone())));
        let built = row.spec.index.map(|i| (i, self.built.get(&i).copied()));
        RowVersion { completion: self.completions.get(&task).copied(), stage, built, task: row }
    }

    /// Writes what a transaction changed in a task's rows. The task and
    /// stage rows were locked; a completion and a built index are written
    /// only if the transaction wrote them (an index finalized since is not
    /// built again).
    fn install_changes(&mut self, base: &RowVersion, written: &RowVersion) {
        let id = written.task.id;
        self.tasks.insert(id, written.task.clone());
        if let Some((stage, row)) = &written.stage {
            self.stages.insert(*stage, row.clone());
        }
        if written.completion != base.completion {
            if let Some(fence) = written.completion {
                self.completions.insert(id, fence);
            }
        }
        if let (Some((index, Some(by))), false) = (written.built, written.built == base.built) {
            if !self.materialized.contains(&index) {
                self.built.entry(index).or_insert(by);
            }
        }
    }

    /// Writes a version of a task's rows into the store's tables (to show a
    /// statement its transaction's rows, and to put the committed ones back).
    fn install(&mut self, v: &RowVersion) {
        let id = v.task.id;
        self.tasks.insert(id, v.task.clone());
        if let Some((stage, row)) = &v.stage {
            self.stages.insert(*stage, row.clone());
        }
        match v.completion {
            Some(fence) => self.completions.insert(id, fence),
            None => self.completions.remove(&id),
        };
        if let Some((index, built)) = v.built {
            match built {
                Some(by) => self.built.insert(index, by),
                None => self.built.remove(&index),
            };
        }
    }
}
