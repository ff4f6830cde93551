//! The lease store: the single source of truth, run as its own process.
//!
//! [`Store`] is the state machine: every request is one transaction, applied
//! at one store time, synchronously. [`server::StoreServer`] wraps it for a
//! process: it holds long polls and lag-bounded queries open and runs
//! maintenance passes that take time.

mod fence;
mod repair;
pub mod server;
mod table;
#[cfg(test)]
mod tests;
mod txn;

use crate::config::{EngineConfig, MaintenanceKind};
use crate::defects::Defect;
use crate::event::{Event, Observer, ReleaseCause, WriteKind};
use crate::handler::TaskError;
use crate::ids::{Fence, GroupId, IndexId, Owner, ProcId, StageRef, TaskId, TxnId};
use crate::proto::{Grant, Rejection, Request, Response};
use crate::task::{Task, TaskKind, TaskSpec, TaskState};
use std::collections::{BTreeMap, BTreeSet};
use table::TaskTable;

/// A pipeline stage row: linked to at most one task; done is absorbing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct StageRow {
    pub task: Option<TaskId>,
    pub done: bool,
}

/// Repair backoff state of one group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct RepairState {
    /// Consecutive "not needed" answers since the group last changed.
    misses: u32,
    next_at_ms: u64,
}

#[derive(Debug, Clone)]
pub struct Store {
    cfg: EngineConfig,
    next_task: TaskId,
    tasks: TaskTable,
    /// Last sign of life per process incarnation: its last heartbeat, or its
    /// first claim if no heartbeat has arrived yet.
    heartbeats: BTreeMap<Owner, u64>,
    /// Newest incarnation seen per process: older ones are dead.
    incarnations: BTreeMap<ProcId, u32>,
    /// Incarnations that deregistered: dead, whatever they send later.
    left: BTreeSet<Owner>,
    stages: BTreeMap<StageRef, StageRow>,
    /// Idempotency keys of enqueues, and the task each created.
    keys: BTreeMap<u64, TaskId>,
    /// The attempt that completed each done task: its retried completion is
    /// answered "applied" again (an idempotent write), nobody else's.
    completions: BTreeMap<TaskId, Fence>,
    /// Indexes whose build completed, waiting for a finalization pass, with
    /// the task that built them.
    built: BTreeMap<IndexId, TaskId>,
    materialized: BTreeSet<IndexId>,
    repair: BTreeMap<GroupId, RepairState>,
    /// Transactions that span round trips, open now (see `txn.rs`).
    txns: BTreeMap<TxnId, txn::OpenTxn>,
    /// Transactions that ended: a late or repeated statement of one is
    /// refused, never opens it again.
    txn_ended: BTreeSet<TxnId>,
    /// Transactions ended so far (a change may release locks).
    txn_ends: u64,
}

impl Store {
    pub fn new(cfg: EngineConfig) -> Self {
        Store {
            cfg,
            next_task: 1,
            tasks: TaskTable::default(),
            heartbeats: BTreeMap::new(),
            incarnations: BTreeMap::new(),
            left: BTreeSet::new(),
            stages: BTreeMap::new(),
            keys: BTreeMap::new(),
            completions: BTreeMap::new(),
            built: BTreeMap::new(),
            materialized: BTreeSet::new(),
            repair: BTreeMap::new(),
            txns: BTreeMap::new(),
            txn_ended: BTreeSet::new(),
            txn_ends: 0,
        }
    }

    pub fn task(&self, id: TaskId) -> Option<&Task> {
        self.tasks.get(&id)
    }

    pub fn tasks(&self) -> impl Iterator<Item = &Task> {
        self.tasks.values()
    }

    /// Tasks with ids from `first` on, in id order.
    pub fn tasks_from(&self, first: TaskId) -> impl Iterator<Item = &Task> {
        self.tasks.range(first..).map(|(_, t)| t)
    }

    /// How many task-row writes the store has made: a position from which
    /// [`Store::tasks_written_since`] reads which rows were written later.
    pub fn task_writes(&self) -> usize {
        self.tasks.writes()
    }

    /// The ids of the task rows written since the store had made `from`
    /// writes (with repeats, in write order). A row not among them has not
    /// changed since then.
    pub fn tasks_written_since(&self, from: usize) -> &[TaskId] {
        self.tasks.written_since(from)
    }

    pub fn stage(&self, stage: StageRef) -> Option<&StageRow> {
        self.stages.get(&stage)
    }

    pub fn stages(&self) -> impl Iterator<Item = (&StageRef, &StageRow)> {
        self.stages.iter()
    }

    pub fn is_materialized(&self, index: IndexId) -> bool {
        self.materialized.contains(&index)
    }

    pub fn materialized(&self) -> impl Iterator<Item = IndexId> + '_ {
        self.materialized.iter().copied()
    }

    /// Last sign of life per process incarnation, in owner order. Every
    /// incarnation the store has seen has one, so the newest incarnation of a
    /// process is the largest one listed here.
    pub fn heartbeats(&self) -> impl Iterator<Item = (Owner, u64)> + '_ {
        self.heartbeats.iter().map(|(&owner, &last_ms)| (owner, last_ms))
    }

    /// Group repair schedule, in group order: (group, consecutive misses,
    /// store time of the next look).
    pub fn repair_schedule(&self) -> impl Iterator<Item = (GroupId, u32, u64)> + '_ {
        self.repair.iter().map(|(&group, state)| (group, state.misses, state.next_at_ms))
    }

    /// Idempotency keys of enqueues and the task each created, in key order.
    pub fn enqueue_keys(&self) -> impl Iterator<Item = (u64, TaskId)> + '_ {
        self.keys.iter().map(|(&key, &task)| (key, task))
    }

    /// The attempt that completed each done task, in task order.
    pub fn completions(&self) -> impl Iterator<Item = Fence> + '_ {
        self.completions.values().copied()
    }

    /// Built indexes waiting for a finalization pass and the task that built
    /// each, in index order.
    pub fn built_by(&self) -> impl Iterator<Item = (IndexId, TaskId)> + '_ {
        self.built.iter().map(|(&index, &task)| (index, task))
    }

    /// The earliest store time after `now_ms` at which a ready task becomes due.
    pub fn next_due_ms(&self, now_ms: u64) -> Option<u64> {
        self.tasks.next_ready_after_ms(now_ms)
    }

    /// Applies one request at store time `now_ms`: one transaction, or one
    /// statement of a transaction that spans round trips. A request that
    /// still waits for a row lock another transaction holds has waited as
    /// long as it may (the server waits before it applies): it times out,
    /// and a statement's transaction aborts with it.
    pub fn apply(&mut self, now_ms: u64, req: &Request, obs: &dyn Observer) -> Response {
        if self.blocked_until(now_ms, req).is_some() {
            if let Some(txn) = req.txn() {
                self.rollback(txn);
            }
            return Response::Rejected { reason: Rejection::TimedOut };
        }
        self.apply_request(now_ms, req, obs)
    }

    /// Applies one request that holds every lock it needs.
    fn apply_request(&mut self, now_ms: u64, req: &Request, obs: &dyn Observer) -> Response {
        match req {
            Request::Exec { txn, stmt, commit } => self.exec(now_ms, *txn, stmt, *commit, obs),
            Request::Rollback { txn } => self.rollback(*txn),
            Request::Enqueue { spec, key } => match key.and_then(|k| self.keys.get(&k)) {
                Some(&task) => Response::Enqueued { task },
                None => {
                    let resp = self.enqueue(now_ms, spec.clone(), obs);
                    if let (Some(k), Response::Enqueued { task }) = (key, &resp) {
                        self.keys.insert(*k, *task);
                    }
                    resp
                }
            },
            Request::CreatePipeline { pipeline, stages } => {
                for index in 0..*stages {
                    self.stages.entry(StageRef { pipeline: *pipeline, index }).or_default();
                }
                obs.emit(Event::PipelineCreated { pipeline: *pipeline, stages: *stages });
                Response::Ack
            }
            Request::Claim { owner, .. } if self.left.contains(owner) => {
                // It said it is leaving: a claim it sent before (delayed on
                // the way) must not hand it tasks nobody will run.
                self.observe_incarnation(*owner);
                Response::Claimed { grants: Vec::new() }
            }
            Request::Claim { owner, max, .. } => {
                // A process that claims is alive: a newer incarnation supersedes
                // the older ones, and a first claim counts as a sign of life.
                self.observe_incarnation(*owner);
                self.heartbeats.entry(*owner).or_insert(now_ms);
                self.claim(now_ms, *owner, *max, obs)
            }
            Request::Heartbeat { owner } if self.left.contains(owner) => {
                // Late on the way: it no longer makes the owner alive.
                self.observe_incarnation(*owner);
                Response::Ack
            }
            Request::Deregister { owner } => {
                self.heartbeats.remove(owner);
                self.left.insert(*owner);
                Response::Ack
            }
            Request::Heartbeat { owner } => {
                self.observe_incarnation(*owner);
                self.heartbeats.insert(*owner, now_ms);
                obs.emit(Event::HeartbeatApplied { owner: *owner });
                Response::Ack
            }
            Request::Renew { fence } => self.renew(now_ms, *fence, obs),
            Request::LeaseValid { fence } => {
                let valid = self.check_fence(fence).is_ok()
                    && self.tasks[&fence.task].lease_expiry_ms.is_none_or(|e| e > now_ms);
                obs.emit(Event::LeaseChecked { fence: *fence, valid });
                Response::Valid { valid }
            }
            Request::Complete { fence } => self.complete(now_ms, *fence, obs),
            Request::Fail { fence, error } => self.fail(now_ms, *fence, *error, obs),
            Request::ClearStageLink { fence } => self.clear_stage_link(now_ms, *fence, obs),
            Request::ReleaseDead { .. } => self.release_dead(now_ms, obs),
            Request::ReleaseOrphans { owner, running, older_than_ms, as_of_ms } => {
                self.release_orphans(now_ms, *owner, running, (*older_than_ms, *as_of_ms), obs)
            }
            Request::ReclaimExpired { .. } => self.reclaim_expired(now_ms, obs),
            Request::Repair { .. } => self.repair_groups(now_ms, obs),
            Request::Maintain { owner, kind, .. } => {
                if *kind == MaintenanceKind::Index {
                    self.finalize_indexes(obs);
                }
                obs.emit(Event::MaintenanceApplied { owner: *owner, kind: *kind });
                Response::Ack
            }
            Request::PipelineSnapshot { by } => {
                let due = self.due_stages();
                obs.emit(Event::PipelineSnapshotTaken { by: *by, due: due.clone() });
                Response::Snapshot { due }
            }
            Request::EnqueueStage { stage } => self.enqueue_stage(now_ms, *stage, obs),
            Request::QueryIndex { index, .. } => Response::Query { materialized: self.materialized.contains(index) },
        }
    }

    fn enqueue(&mut self, now_ms: u64, spec: TaskSpec, obs: &dyn Observer) -> Response {
        let id = self.next_task;
        self.next_task += 1;
        let retry_at_ms = spec.not_before_ms;
        obs.emit(Event::TaskCreated { task: id, spec: spec.clone(), retry_at_ms });
        self.tasks.insert(id, Task::new(id, spec, now_ms));
        Response::Enqueued { task: id }
    }

    fn claim(&mut self, now_ms: u64, owner: Owner, max: u32, obs: &dyn Observer) -> Response {
        // Oldest due first (by due time, then id); rows a transaction holds
        // are skipped (SKIP LOCKED). Picked before any is written: granting
        // one changes no other row's eligibility.
        let due: Vec<TaskId> = self.tasks.ready_due(now_ms).filter(|&id| !self.locked(id)).take(max as usize).collect();
        let mut grants = Vec::new();
        for id in due {
            let mut task = self.tasks.get_mut(&id).expect("due task exists");
            task.attempt += 1;
            task.state = TaskState::Leased;
            task.owner = Some(owner);
            task.lease_expiry_ms = self.cfg.lease_ttl.for_kind(task.spec.kind).map(|ttl| now_ms + ttl);
            task.updated_ms = now_ms;
            let fence = Fence { task: id, attempt: task.attempt, owner };
            obs.emit(Event::LeaseGranted {
                fence,
                kind: task.spec.kind,
                lease_expiry_ms: task.lease_expiry_ms,
                retry_at_ms: task.retry_at_ms,
            });
            grants.push(Grant { fence, kind: task.spec.kind, lease_expiry_ms: task.lease_expiry_ms });
            if let Some(group) = task.spec.group {
                // The group changed: its next repair look is not backed off.
                self.repair.insert(group, RepairState { misses: 0, next_at_ms: now_ms });
            }
        }
        Response::Claimed { grants }
    }

    fn renew(&mut self, now_ms: u64, fence: Fence, obs: &dyn Observer) -> Response {
        if let Err(reason) = self.check_fence(&fence) {
            obs.emit(Event::WriteRejected { fence, write: WriteKind::Renew, reason });
            return Response::Rejected { reason };
        }
        let mut task = self.tasks.get_mut(&fence.task).expect("fenced task exists");
        let Some(ttl) = self.cfg.lease_ttl.for_kind(task.spec.kind) else {
            // Heartbeat-owned: nothing to renew, the owner's heartbeat is the lease.
            return Response::Renewed { lease_expiry_ms: u64::MAX };
        };
        let lease_expiry_ms = now_ms + ttl;
        task.lease_expiry_ms = Some(lease_expiry_ms);
        obs.emit(Event::LeaseRenewed { fence, lease_expiry_ms });
        Response::Renewed { lease_expiry_ms }
    }

    fn complete(&mut self, now_ms: u64, fence: Fence, obs: &dyn Observer) -> Response {
        if self.completions.get(&fence.task) == Some(&fence) {
            // The same attempt again (its first answer was lost): applied once.
            let retries = self.tasks[&fence.task].retries;
            return Response::Applied { retries, retry_at_ms: None };
        }
        if let Err(reason) = self.check_outcome_fence(&fence) {
            obs.emit(Event::WriteRejected { fence, write: WriteKind::Complete, reason });
            tracing::info!(%fence, ?reason, "store: complete rejected");
            return Response::Rejected { reason };
        }
        self.completions.insert(fence.task, fence);
        let mut task = self.tasks.get_mut(&fence.task).expect("fenced task exists");
        task.state = TaskState::Done;
        task.owner = None;
        task.lease_expiry_ms = None;
        task.updated_ms = now_ms;
        let retries = task.retries;
        let (index, stage, kind) = (task.spec.index, task.spec.stage, task.spec.kind);
        obs.emit(Event::WriteApplied { fence, write: WriteKind::Complete, retries, retry_at_ms: None, terminal: true });
        // Completion effects commit in the same transaction as the task change.
        // A built index waits for the next finalization pass.
        if let (TaskKind::IndexBuild, Some(index)) = (kind, index) {
            if !self.materialized.contains(&index) {
                self.built.entry(index).or_insert(fence.task);
            }
        }
        if let Some(stage) = stage {
            if let Some(row) = self.stages.get_mut(&stage).filter(|row| row.task == Some(fence.task)) {
                row.task = None;
                row.done = true;
                obs.emit(Event::StageDone { stage, task: fence.task });
            }
        }
        Response::Applied { retries, retry_at_ms: None }
    }

    fn fail(&mut self, now_ms: u64, fence: Fence, error: TaskError, obs: &dyn Observer) -> Response {
        if let Err(reason) = self.check_outcome_fence(&fence) {
            obs.emit(Event::WriteRejected { fence, write: WriteKind::Fail, reason });
            tracing::info!(%fence, ?reason, "store: fail rejected");
            return Response::Rejected { reason };
        }
        let backoff_cfg = self.cfg.clone();
        let mut task = self.tasks.get_mut(&fence.task).expect("fenced task exists");
        task.retries += 1;
        task.owner = None;
        task.lease_expiry_ms = None;
        task.updated_ms = now_ms;
        let dead = error == TaskError::Fatal || task.retries > backoff_cfg.max_retries;
        let retry_at_ms = if dead {
            task.state = TaskState::Dead;
            None
        } else {
            task.state = TaskState::Ready;
            task.retry_at_ms = now_ms + backoff_cfg.retry_backoff_ms(task.retries);
            Some(task.retry_at_ms)
        };
        obs.emit(Event::WriteApplied {
            fence,
            write: WriteKind::Fail,
            retries: task.retries,
            retry_at_ms,
            terminal: dead,
        });
        Response::Applied { retries: task.retries, retry_at_ms }
    }

    fn clear_stage_link(&mut self, _now_ms: u64, fence: Fence, obs: &dyn Observer) -> Response {
        if self.completions.get(&fence.task) == Some(&fence) {
            // This attempt completed the task (and cleared the link with it):
            // its transaction is being tried again after a lost answer.
            let retries = self.tasks[&fence.task].retries;
            return Response::Applied { retries, retry_at_ms: None };
        }
        // Part of the completion: fenced as complete and fail are.
        if let Err(reason) = self.check_outcome_fence(&fence) {
            obs.emit(Event::WriteRejected { fence, write: WriteKind::ClearStageLink, reason });
            return Response::Rejected { reason };
        }
        let task = &self.tasks[&fence.task];
        let retries = task.retries;
        if let Some(stage) = task.spec.stage {
            if let Some(row) = self.stages.get_mut(&stage).filter(|row| row.task == Some(fence.task)) {
                row.task = None;
                row.done = true;
                obs.emit(Event::StageDone { stage, task: fence.task });
            }
        }
        obs.emit(Event::WriteApplied {
            fence,
            write: WriteKind::ClearStageLink,
            retries,
            retry_at_ms: None,
            terminal: false,
        });
        Response::Applied { retries, retry_at_ms: None }
    }

    /// An index finalization pass: every built index becomes materialized.
    /// Idempotent: a pass that finds nothing to do changes nothing.
    fn finalize_indexes(&mut self, obs: &dyn Observer) {
        for (index, task) in std::mem::take(&mut self.built) {
            if self.materialized.insert(index) {
                obs.emit(Event::IndexMaterialized { index, task });
            }
        }
    }

    /// Indexes built and not yet finalized.
    pub fn built(&self) -> impl Iterator<Item = IndexId> + '_ {
        self.built.keys().copied()
    }

    fn observe_incarnation(&mut self, owner: Owner) {
        let newest = self.incarnations.entry(owner.proc).or_insert(owner.incarnation);
        if owner.incarnation > *newest {
            *newest = owner.incarnation;
            self.abort_txns_before(owner);
        }
    }

    /// Is this process incarnation dead: superseded by a restart, or silent
    /// for longer than `dead_after_ms` since its last sign of life?
    fn owner_dead(&self, owner: Owner, now_ms: u64) -> bool {
        let superseded = self.superseded(owner) || self.left.contains(&owner);
        let silent = match self.heartbeats.get(&owner) {
            Some(&last) => now_ms.saturating_sub(last) > self.cfg.dead_after_ms,
            None => true,
        };
        superseded || silent
    }

    /// Releases heartbeat-owned tasks (kinds without a lease TTL) of dead
    /// owners. Leased kinds are left to lease expiry and repair.
    fn release_dead(&mut self, now_ms: u64, obs: &dyn Observer) -> Response {
        let victims: Vec<TaskId> = self
            .tasks
            .leased()
            .filter(|t| t.lease_expiry_ms.is_none() && !self.locked(t.id))
            .filter(|t| t.owner.is_some_and(|o| self.owner_dead(o, now_ms)))
            .map(|t| t.id)
            .collect();
        for id in &victims {
            self.release(now_ms, *id, ReleaseCause::DeadOwner, obs);
        }
        Response::Released { tasks: victims.len() as u32 }
    }

    /// Same-owner recovery: the owner says which tasks it still runs; every
    /// other task leased to it long enough before it made that list goes back
    /// to ready, and its next claim is a new attempt that fences off whatever
    /// the old one still sends. The list's time is the owner's clock, never
    /// later than the store's.
    fn release_orphans(
        &mut self,
        now_ms: u64,
        owner: Owner,
        running: &[TaskId],
        (older_than_ms, as_of_ms): (u64, u64),
        obs: &dyn Observer,
    ) -> Response {
        let listed_ms = as_of_ms.min(now_ms);
        let victims: Vec<TaskId> = self
            .tasks
            .leased()
            .filter(|t| t.owner == Some(owner) && !self.locked(t.id))
            .filter(|t| !running.contains(&t.id) && listed_ms.saturating_sub(t.updated_ms) > older_than_ms)
            .map(|t| t.id)
            .collect();
        for id in &victims {
            self.release(now_ms, *id, ReleaseCause::Orphaned, obs);
        }
        Response::Released { tasks: victims.len() as u32 }
    }

    /// Reclaims expired leases of tasks outside any group; grouped tasks are
    /// the business of group repair.
    fn reclaim_expired(&mut self, now_ms: u64, obs: &dyn Observer) -> Response {
        let victims: Vec<TaskId> = self
            .tasks
            .leased()
            .filter(|t| t.spec.group.is_none() && !self.locked(t.id))
            .filter(|t| t.lease_expiry_ms.is_some_and(|e| e <= now_ms))
            .map(|t| t.id)
            .collect();
        for id in &victims {
            self.release(now_ms, *id, ReleaseCause::Expired, obs);
        }
        Response::Released { tasks: victims.len() as u32 }
    }

    /// Puts a leased task back to ready without an outcome. The next claim
    /// makes a new attempt, so the old owner's writes are fenced off.
    fn release(&mut self, now_ms: u64, id: TaskId, cause: ReleaseCause, obs: &dyn Observer) {
        let mut task = self.tasks.get_mut(&id).expect("released task exists");
        debug_assert_eq!(task.state, TaskState::Leased);
        let owner = task.owner.take().expect("leased task has an owner");
        let fence = Fence { task: id, attempt: task.attempt, owner };
        task.state = TaskState::Ready;
        task.lease_expiry_ms = None;
        task.updated_ms = now_ms;
        if cause == ReleaseCause::Repair {
            task.repair_count += 1;
        }
        let recovered = matches!(cause, ReleaseCause::DeadOwner | ReleaseCause::Expired);
        if recovered && self.cfg.recovery_delay_ms > 0 {
            task.retry_at_ms = task.retry_at_ms.max(now_ms + self.cfg.recovery_delay_ms);
        }
        obs.emit(Event::LeaseReleased { fence, cause });
        tracing::info!(%fence, ?cause, "store: lease released");
    }

    fn due_stages(&self) -> Vec<StageRef> {
        self.stages
            .iter()
            .filter(|(stage, row)| !row.done && row.task.is_none() && self.previous_stage_done(**stage))
            .map(|(stage, _)| *stage)
            .collect()
    }

    fn previous_stage_done(&self, stage: StageRef) -> bool {
        stage.index == 0
            || self
                .stages
                .get(&StageRef { pipeline: stage.pipeline, index: stage.index - 1 })
                .is_some_and(|row| row.done)
    }

    fn enqueue_stage(&mut self, now_ms: u64, stage: StageRef, obs: &dyn Observer) -> Response {
        if let Err(reason) = self.stage_guard(stage) {
            obs.emit(Event::StageEnqueueRefused { stage, reason });
            return Response::Rejected { reason };
        }
        let spec = TaskSpec {
            kind: TaskKind::Stage,
            group: Some(stage.pipeline),
            stage: Some(stage),
            index: None,
            not_before_ms: now_ms,
        };
        let resp = self.enqueue(now_ms, spec, obs);
        if let Response::Enqueued { task } = resp {
            // Linked atomically with the creation.
            self.stages.entry(stage).or_default().task = Some(task);
        }
        resp
    }

    /// The guarded insert of a stage task: the stage exists, is due, has no
    /// task linked, and is not done.
    fn stage_guard(&self, stage: StageRef) -> Result<(), Rejection> {
        let row = self.stages.get(&stage).ok_or(Rejection::Missing)?;
        if self.cfg.defects.on(Defect::StaleSnapshotEnqueue) {
            // B4: re-checks only "no task linked"; a stale snapshot re-creates
            // the task of a stage that is already done.
            return if row.task.is_some() { Err(Rejection::StageGuard) } else { Ok(()) };
        }
        if row.task.is_some() || row.done || !self.previous_stage_done(stage) {
            return Err(Rejection::StageGuard);
        }
        Ok(())
    }
}
