//! The checkers' own view of the world, rebuilt from the history alone.
//!
//! It follows the committed store events (the truth) and the world's process
//! lifecycle, and never asks the engine anything: no engine logic is called
//! here, only engine types are read. `check()` applies each record to the view
//! *after* every checker has looked at it, so a checker always sees the world
//! as it was just before the record it is judging.

use crate::history::{Entry, Record, WorldEvent};
use leasesim::event::{Event, WriteKind};
use leasesim::ids::{IndexId, Owner, ProcId, StageRef, TaskId};
use leasesim::task::{TaskKind, TaskSpec, TaskState};
use std::collections::{BTreeMap, BTreeSet};

/// One task as the checkers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskView {
    /// `None` when the history never showed the task's creation.
    pub spec: Option<TaskSpec>,
    pub created_ms: Option<u64>,
    pub state: TaskState,
    /// The attempt of the last grant (0 = never granted).
    pub attempt: u32,
    /// Holder of the current lease (only while `Leased`).
    pub owner: Option<Owner>,
    /// Expiry of the current lease; `None` while not leased or heartbeat-owned.
    pub lease_expiry_ms: Option<u64>,
    /// Failures committed so far.
    pub retries: u32,
    /// The committed retry-at: from creation, then from each retried failure.
    pub retry_at_ms: u64,
    /// The committed retry-at of each retried failure, by its failure count.
    pub retry_at_by_retries: BTreeMap<u32, u64>,
    /// When the task last became ready (created, released or failed).
    pub ready_since_ms: u64,
}

impl TaskView {
    fn new(spec: Option<TaskSpec>, created_ms: Option<u64>, retry_at_ms: u64, now_ms: u64) -> Self {
        TaskView {
            spec,
            created_ms,
            state: TaskState::Ready,
            attempt: 0,
            owner: None,
            lease_expiry_ms: None,
            retries: 0,
            retry_at_ms,
            retry_at_by_retries: BTreeMap::new(),
            ready_since_ms: now_ms,
        }
    }

    pub fn kind(&self) -> Option<TaskKind> {
        self.spec.as_ref().map(|s| s.kind)
    }

    pub fn stage(&self) -> Option<StageRef> {
        self.spec.as_ref().and_then(|s| s.stage)
    }

    /// Done and dead are absorbing.
    pub fn terminal(&self) -> bool {
        matches!(self.state, TaskState::Done | TaskState::Dead)
    }

    /// Is the task leased to exactly this attempt of this owner?
    pub fn held_by(&self, attempt: u32, owner: Owner) -> bool {
        self.state == TaskState::Leased && self.attempt == attempt && self.owner == Some(owner)
    }

    /// A short description of who holds the task, for messages.
    pub fn holder(&self) -> String {
        match (self.state, self.owner) {
            (TaskState::Leased, Some(o)) => {
                format!("attempt {} ({o}) holds the task", self.attempt)
            }
            (TaskState::Leased, None) => format!("attempt {} holds the task", self.attempt),
            (TaskState::Ready, _) => {
                format!("the task is not leased (last attempt {})", self.attempt)
            }
            (TaskState::Done, _) => "the task is done".to_string(),
            (TaskState::Dead, _) => "the task is dead".to_string(),
        }
    }
}

/// One worker process incarnation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnerView {
    pub up_ms: Option<u64>,
    pub killed_ms: Option<u64>,
    /// Permits in use (acquired minus released; zero after a kill).
    pub permits: u32,
    /// Since when all permits are in use (`None`: a permit is free).
    pub full_since_ms: Option<u64>,
    /// The last time the owner stopped being at capacity.
    pub last_full_ms: Option<u64>,
}

/// One worker process (over all its incarnations).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcView {
    /// Pause intervals `[paused, resumed)`; an open one has no end yet.
    pub pauses: Vec<(u64, Option<u64>)>,
    pub offset_ms: i64,
}

impl ProcView {
    pub fn paused_now(&self) -> bool {
        self.pauses.last().is_some_and(|(_, end)| end.is_none())
    }

    /// Was the process paused at any instant of `[from, to]`?
    pub fn paused_between(&self, from: u64, to: u64) -> bool {
        self.pauses.iter().any(|&(start, end)| start <= to && end.is_none_or(|e| e > from))
    }
}

#[derive(Debug, Clone, Default)]
pub struct View {
    concurrency: u32,
    pub now_ms: u64,
    pub heal_ms: Option<u64>,
    pub end_ms: Option<u64>,
    pub tasks: BTreeMap<TaskId, TaskView>,
    /// Ids of the tasks that are ready now.
    pub ready: BTreeSet<TaskId>,
    /// Ids of the tasks that are leased now.
    pub leased: BTreeSet<TaskId>,
    pub owners: BTreeMap<Owner, OwnerView>,
    pub procs: BTreeMap<ProcId, ProcView>,
    /// Stage -> (time it was done, the task that did it).
    pub done_stages: BTreeMap<StageRef, (u64, TaskId)>,
    /// Index -> (time it materialized, the task that did it).
    pub materialized: BTreeMap<IndexId, (u64, TaskId)>,
}

impl View {
    pub fn new(concurrency: u32) -> Self {
        View { concurrency, ..View::default() }
    }

    pub fn task(&self, id: TaskId) -> Option<&TaskView> {
        self.tasks.get(&id)
    }

    pub fn owner(&self, owner: Owner) -> Option<&OwnerView> {
        self.owners.get(&owner)
    }

    pub fn permits(&self, owner: Owner) -> u32 {
        self.owners.get(&owner).map_or(0, |o| o.permits)
    }

    pub fn killed(&self, owner: Owner) -> Option<u64> {
        self.owners.get(&owner).and_then(|o| o.killed_ms)
    }

    pub fn paused_between(&self, proc: ProcId, from: u64, to: u64) -> bool {
        self.procs.get(&proc).is_some_and(|p| p.paused_between(from, to))
    }

    /// The heal time, or `end_ms` when the history has no heal.
    pub fn heal_or(&self, end_ms: u64) -> u64 {
        self.heal_ms.unwrap_or(end_ms)
    }

    /// Applies one record.
    pub fn apply(&mut self, rec: &Record) {
        let now = rec.at_ms;
        self.now_ms = now;
        match &rec.entry {
            Entry::World(w) => self.apply_world(now, w),
            Entry::Engine(e) => self.apply_engine(now, e),
        }
    }

    fn apply_world(&mut self, now: u64, w: &WorldEvent) {
        match w {
            WorldEvent::ProcessUp { owner } => {
                let o = self.owners.entry(*owner).or_default();
                o.up_ms.get_or_insert(now);
                self.procs.entry(owner.proc).or_default();
            }
            WorldEvent::ProcessKilled { owner } => {
                let o = self.owners.entry(*owner).or_default();
                o.killed_ms.get_or_insert(now);
                o.permits = 0;
                if o.full_since_ms.take().is_some() {
                    o.last_full_ms = Some(now);
                }
            }
            WorldEvent::ProcessPaused { proc } => {
                let p = self.procs.entry(*proc).or_default();
                if !p.paused_now() {
                    p.pauses.push((now, None));
                }
            }
            WorldEvent::ProcessResumed { proc } => {
                let p = self.procs.entry(*proc).or_default();
                if let Some((_, end @ None)) = p.pauses.last_mut() {
                    *end = Some(now);
                }
            }
            WorldEvent::ClockOffset { proc, offset_ms } => {
                self.procs.entry(*proc).or_default().offset_ms = *offset_ms;
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

    /// The task's view, created on first sight if the history never showed
    /// its creation (hand-built or truncated histories).
    fn task_mut(&mut self, id: TaskId, now: u64) -> &mut TaskView {
        self.tasks.entry(id).or_insert_with(|| TaskView::new(None, None, 0, now))
    }

    fn set_state(&mut self, id: TaskId, state: TaskState, now: u64) {
        let t = self.task_mut(id, now);
        if state == TaskState::Ready && t.state != TaskState::Ready {
            t.ready_since_ms = now;
        }
        t.state = state;
        if state != TaskState::Leased {
            t.owner = None;
            t.lease_expiry_ms = None;
        }
        if state == TaskState::Ready {
            self.ready.insert(id);
        } else {
            self.ready.remove(&id);
        }
        if state == TaskState::Leased {
            self.leased.insert(id);
        } else {
            self.leased.remove(&id);
        }
    }

    fn apply_engine(&mut self, now: u64, e: &Event) {
        match e {
            Event::TaskCreated { task, spec, retry_at_ms } => {
                self.tasks.insert(*task, TaskView::new(Some(spec.clone()), Some(now), *retry_at_ms, now));
                self.leased.remove(task);
                self.ready.insert(*task);
            }
            Event::LeaseGranted { fence, lease_expiry_ms, .. } => {
                self.set_state(fence.task, TaskState::Leased, now);
                let t = self.task_mut(fence.task, now);
                t.attempt = fence.attempt;
                t.owner = Some(fence.owner);
                t.lease_expiry_ms = *lease_expiry_ms;
            }
            Event::LeaseRenewed { fence, lease_expiry_ms } => {
                let t = self.task_mut(fence.task, now);
                if t.state == TaskState::Leased {
                    t.lease_expiry_ms = Some(*lease_expiry_ms);
                }
            }
            Event::LeaseReleased { fence, .. } => {
                // A release of a task that is not leased changes nothing.
                let leased = self.task_mut(fence.task, now).state == TaskState::Leased;
                if leased {
                    self.set_state(fence.task, TaskState::Ready, now);
                }
            }
            Event::WriteApplied { fence, write, retries, retry_at_ms, terminal } => match write {
                WriteKind::Complete => self.set_state(fence.task, TaskState::Done, now),
                WriteKind::Fail => {
                    if *terminal {
                        self.set_state(fence.task, TaskState::Dead, now);
                    } else {
                        self.set_state(fence.task, TaskState::Ready, now);
                    }
                    let t = self.task_mut(fence.task, now);
                    t.retries = *retries;
                    if let Some(at) = retry_at_ms {
                        t.retry_at_ms = *at;
                        t.retry_at_by_retries.insert(*retries, *at);
                    }
                }
                WriteKind::Renew | WriteKind::ClearStageLink => {}
            },
            Event::StageDone { stage, task } => {
                self.done_stages.entry(*stage).or_insert((now, *task));
            }
            Event::IndexMaterialized { index, task } => {
                self.materialized.entry(*index).or_insert((now, *task));
            }
            Event::PermitAcquired { owner, .. } => {
                let concurrency = self.concurrency;
                let o = self.owners.entry(*owner).or_default();
                o.permits += 1;
                if o.permits >= concurrency && o.full_since_ms.is_none() {
                    o.full_since_ms = Some(now);
                }
            }
            Event::PermitReleased { owner, .. } => {
                let concurrency = self.concurrency;
                let o = self.owners.entry(*owner).or_default();
                o.permits = o.permits.saturating_sub(1);
                if o.permits < concurrency && o.full_since_ms.take().is_some() {
                    o.last_full_ms = Some(now);
                }
            }
            _ => {}
        }
    }
}
