//! The task record as the store keeps it.

use crate::ids::{GroupId, IndexId, Owner, StageRef, TaskId};
use serde::{Deserialize, Serialize};

/// What a task does. The kind picks its lease TTL and its completion effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskKind {
    /// Builds an index; its completion materializes the index (system A).
    IndexBuild,
    /// Materializes authorization data; may fail on write conflicts (system A).
    AuthzMaterialization,
    /// A plain background job owned by a machine (system B).
    Job,
    /// A pipeline stage task (system B); linked to its stage.
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
}

/// `Done` and `Dead` are absorbing.
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
}

/// What the client asks the store to create.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TaskSpec {
    pub kind: TaskKind,
    pub group: Option<GroupId>,
    pub stage: Option<StageRef>,
    pub index: Option<IndexId>,
    /// Not claimable before this store time (a scheduled task).
    pub not_before_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Task {
    pub id: TaskId,
    pub spec: TaskSpec,
    pub state: TaskState,
    /// Owner of the current attempt while leased.
    pub owner: Option<Owner>,
    /// +1 on every claim, also on same-owner recovery. 0 = never claimed.
    pub attempt: u32,
    /// Store time at which the current lease expires; `None` while not leased
    /// or for kinds whose ownership is heartbeat-based (no lease TTL).
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

impl Task {
    /// A task row as its enqueue creates it at `now_ms`: ready, never
    /// claimed, due at its not-before time.
    pub fn new(id: TaskId, spec: TaskSpec, now_ms: u64) -> Task {
        let retry_at_ms = spec.not_before_ms;
        Task {
            id,
            spec,
            state: TaskState::Ready,
            owner: None,
            attempt: 0,
            lease_expiry_ms: None,
            retries: 0,
            retry_at_ms,
            updated_ms: now_ms,
            repair_count: 0,
        }
    }
}
