//! Tasks as the harness sees them: what the application asks for
//! ([`TaskSpec`]), and a stored row normalized from whatever the engine
//! keeps ([`Row`]).

use crate::ids::{GroupId, IndexId, Owner, StageRef, TaskId};
use serde::{Deserialize, Serialize};
use std::hash::{Hash, Hasher};

/// A named queue (its name is `q{id}` where an engine names queues).
pub type QueueId = u32;

/// What a task does, in the workload's terms. The kind picks the lease term
/// an engine promises for it and the effects of its completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskKind {
    /// Builds an index; its completion makes the index built (system A).
    IndexBuild,
    /// Materializes authorization data; may fail on write conflicts (system A).
    AuthzMaterialization,
    /// A plain background job (system B, and any job queue).
    Job,
    /// A pipeline stage task, linked to its stage (system B).
    Stage,
    /// A workflow task of a workflow run: short lease (system C).
    WorkflowTask,
    /// An activity of a workflow run: long lease (system C).
    Activity,
}

impl TaskKind {
    pub const ALL: [TaskKind; 6] = [
        TaskKind::IndexBuild,
        TaskKind::AuthzMaterialization,
        TaskKind::Job,
        TaskKind::Stage,
        TaskKind::WorkflowTask,
        TaskKind::Activity,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TaskKind::IndexBuild => "index-build",
            TaskKind::AuthzMaterialization => "authz-materialization",
            TaskKind::Job => "job",
            TaskKind::Stage => "stage",
            TaskKind::WorkflowTask => "workflow-task",
            TaskKind::Activity => "activity",
        }
    }

    pub fn from_name(name: &str) -> Option<TaskKind> {
        TaskKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// A row's state, normalized. `Done` and `Dead` are absorbing. An engine
/// that deletes a finished row reports it `Done` (its adapter says which).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskState {
    Ready,
    Leased,
    Done,
    Dead,
}

impl TaskState {
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskState::Done | TaskState::Dead)
    }

    pub fn name(self) -> &'static str {
        match self {
            TaskState::Ready => "ready",
            TaskState::Leased => "leased",
            TaskState::Done => "done",
            TaskState::Dead => "dead",
        }
    }
}

/// What the application asks the store to create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSpec {
    pub kind: TaskKind,
    pub group: Option<GroupId>,
    pub stage: Option<StageRef>,
    pub index: Option<IndexId>,
    /// Not claimable before this store time (a scheduled task).
    pub not_before_ms: u64,
    /// The named queue it runs in (serially, one task of a queue at a time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueId>,
}

impl TaskSpec {
    /// A plain job: no group, pipeline stage, index or named queue (the
    /// notions only some engines have), due from `not_before_ms`.
    pub fn job(not_before_ms: u64) -> TaskSpec {
        TaskSpec { kind: TaskKind::Job, group: None, stage: None, index: None, not_before_ms, queue: None }
    }
}

impl Hash for TaskSpec {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.kind.hash(state);
        self.group.hash(state);
        self.stage.hash(state);
        self.index.hash(state);
        self.not_before_ms.hash(state);
        // Hashed only when set, so that histories of engines without named
        // queues hash as they did before queues were part of the vocabulary.
        if let Some(queue) = self.queue {
            queue.hash(state);
        }
    }
}

/// One stored task row, normalized from the engine's own.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Row {
    pub id: TaskId,
    pub spec: TaskSpec,
    pub state: TaskState,
    /// Who holds the current attempt while leased.
    pub owner: Option<Owner>,
    /// The attempt number or fencing token of the current (or last) grant.
    pub attempt: u32,
    /// Store time at which the current lease expires; `None` while not
    /// leased or when ownership rests on the holder's liveness (heartbeats).
    pub lease_expiry_ms: Option<u64>,
    /// Failures spent so far.
    pub retries: u32,
    /// Committed time before which the task must not be claimed.
    pub retry_at_ms: u64,
    /// Store time of the last committed state change (claim, fail, release).
    pub updated_ms: u64,
    /// How many times group repair reclaimed this task.
    pub repair_count: u32,
}

impl Row {
    /// A ready row never granted, failed or repaired: an adapter sets what
    /// its store says with struct update syntax (`Row { state, owner,
    /// ..Row::ready(id, spec) }`), naming no field its engine lacks
    /// (`repair_count` is group repair's).
    pub fn ready(id: TaskId, spec: TaskSpec) -> Row {
        Row {
            id,
            spec,
            state: TaskState::Ready,
            owner: None,
            attempt: 0,
            lease_expiry_ms: None,
            retries: 0,
            retry_at_ms: 0,
            updated_ms: 0,
            repair_count: 0,
        }
    }
}

/// One pipeline stage row.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StageRow {
    pub task: Option<TaskId>,
    pub done: bool,
}

/// One named queue's lock row: who holds the queue (runs its current task).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct QueueRow {
    pub holder: Option<Owner>,
    /// Store time the holder took the queue.
    pub locked_ms: Option<u64>,
}

/// Why a task body failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskError {
    /// A write conflict (an MVCC predicate conflict): worth retrying.
    Conflict,
    /// The body gave up; retrying will not help.
    Fatal,
}

/// A maintenance pass kind. Passes of one kind never overlap on one worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MaintenanceKind {
    /// Index finalization (system A).
    Index,
    /// Bucket finalization (system A).
    Bucket,
    /// Tenant finalization (system A).
    Tenant,
    /// Pipeline poller: reads a snapshot of pipelines and creates the task of
    /// every stage that is due (system B).
    Pipeline,
}

impl MaintenanceKind {
    pub const ALL: [MaintenanceKind; 4] =
        [MaintenanceKind::Index, MaintenanceKind::Bucket, MaintenanceKind::Tenant, MaintenanceKind::Pipeline];

    pub fn name(self) -> &'static str {
        match self {
            MaintenanceKind::Index => "index",
            MaintenanceKind::Bucket => "bucket",
            MaintenanceKind::Tenant => "tenant",
            MaintenanceKind::Pipeline => "pipeline",
        }
    }
}
