//! Testimony: what an engine says it did, through its own observer seam,
//! in the harness's words. An engine's adapter translates its own events
//! into these; an engine that reports nothing has no testimony, and the
//! invariants that cross-check it do not apply to it.
//!
//! Testimony never changes the checkers' model of the world: ground truth
//! ([`crate::truth::Fact`]) does. New variants go at the end.

use crate::ids::{Fence, GroupId, IndexId, Owner, StageRef, TaskId};
use crate::op::Refusal;
use crate::task::{MaintenanceKind, TaskError, TaskKind, TaskSpec};
use serde::{Deserialize, Serialize};

/// Why a lease ended without an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReleaseCause {
    /// The lease expired and recovery reclaimed it.
    Expired,
    /// The owner was declared dead (missed heartbeats).
    DeadOwner,
    /// Group repair reclaimed an expired lease.
    Repair,
    /// Same-owner recovery: the owner is alive but no longer runs the attempt.
    Orphaned,
}

/// Which fenced write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WriteKind {
    Complete,
    Fail,
    Renew,
    ClearStageLink,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "kebab-case")]
pub enum Event {
    // ---- store: the committed state changes ----
    /// A task was created.
    TaskCreated {
        task: TaskId,
        spec: TaskSpec,
        retry_at_ms: u64,
    },
    /// A guarded stage insert was refused.
    StageEnqueueRefused {
        stage: StageRef,
        reason: Refusal,
    },
    PipelineCreated {
        pipeline: GroupId,
        stages: u32,
    },
    /// A claim: the task is leased to `fence.owner` at attempt `fence.attempt`.
    LeaseGranted {
        fence: Fence,
        kind: TaskKind,
        lease_expiry_ms: Option<u64>,
        retry_at_ms: u64,
    },
    LeaseRenewed {
        fence: Fence,
        lease_expiry_ms: u64,
    },
    /// The task went back to ready without an outcome.
    LeaseReleased {
        fence: Fence,
        cause: ReleaseCause,
    },
    /// A fenced write took effect. `retry_at_ms` is set for a retried failure.
    WriteApplied {
        fence: Fence,
        write: WriteKind,
        retries: u32,
        retry_at_ms: Option<u64>,
        terminal: bool,
    },
    /// A fenced write was refused; nothing changed.
    WriteRejected {
        fence: Fence,
        write: WriteKind,
        reason: Refusal,
    },
    /// A lease check (before recording a failure).
    LeaseChecked {
        fence: Fence,
        valid: bool,
    },
    HeartbeatApplied {
        owner: Owner,
    },
    /// Group repair looked at a group. `reclaimed` lists what it reclaimed.
    RepairDecision {
        group: GroupId,
        needed: bool,
        reclaimed: Vec<TaskId>,
    },
    IndexMaterialized {
        index: IndexId,
        task: TaskId,
    },
    StageDone {
        stage: StageRef,
        task: TaskId,
    },
    QueryAnswered {
        index: IndexId,
        materialized: bool,
        waited_ms: u64,
    },
    MaintenanceApplied {
        owner: Owner,
        kind: MaintenanceKind,
    },
    PipelineSnapshotTaken {
        by: Owner,
        due: Vec<StageRef>,
    },

    // ---- worker processes ----
    ProcessStarted {
        owner: Owner,
        concurrency: u32,
    },
    PermitAcquired {
        owner: Owner,
        task: TaskId,
        attempt: u32,
    },
    PermitReleased {
        owner: Owner,
        task: TaskId,
        attempt: u32,
    },
    ExecutionStarted {
        fence: Fence,
    },
    /// A claimed attempt was not started: its lease ran out before it could
    /// (the claim answer came late), and the store did not renew it.
    AttemptDropped {
        fence: Fence,
    },
    ExecutionFinished {
        fence: Fence,
        error: Option<TaskError>,
    },
    /// Outcome persistence hit its deadline; the permit is dropped.
    FinalizeTimedOut {
        fence: Fence,
    },
    /// A completion callback was published to the application.
    CallbackPublished {
        fence: Fence,
    },
    HeartbeatSent {
        owner: Owner,
    },
    MaintenanceStarted {
        owner: Owner,
        kind: MaintenanceKind,
        pass: u64,
    },
    MaintenanceEnded {
        owner: Owner,
        kind: MaintenanceKind,
        pass: u64,
    },
    /// The claim loop found a pass of this kind still running and went on.
    MaintenanceStillRunning {
        owner: Owner,
        kind: MaintenanceKind,
        pass: u64,
        age_ms: u64,
    },
    /// A peer note was received; the task is planned to be claimed at `wake_at_ms`
    /// (in this process's clock).
    RetryPlanned {
        owner: Owner,
        task: TaskId,
        retries: u32,
        wake_at_ms: u64,
    },
    NoteSent {
        owner: Owner,
        task: TaskId,
        retry_at_ms: u64,
    },

    // ---- client ----
    QueryResult {
        index: IndexId,
        materialized: bool,
    },
}

impl Event {
    /// Stable kebab-case name of the event kind.
    pub fn name(&self) -> &'static str {
        match self {
            Event::TaskCreated { .. } => "task-created",
            Event::StageEnqueueRefused { .. } => "stage-enqueue-refused",
            Event::PipelineCreated { .. } => "pipeline-created",
            Event::LeaseGranted { .. } => "lease-granted",
            Event::LeaseRenewed { .. } => "lease-renewed",
            Event::LeaseReleased { .. } => "lease-released",
            Event::WriteApplied { .. } => "write-applied",
            Event::WriteRejected { .. } => "write-rejected",
            Event::LeaseChecked { .. } => "lease-checked",
            Event::HeartbeatApplied { .. } => "heartbeat-applied",
            Event::RepairDecision { .. } => "repair-decision",
            Event::IndexMaterialized { .. } => "index-materialized",
            Event::StageDone { .. } => "stage-done",
            Event::QueryAnswered { .. } => "query-answered",
            Event::MaintenanceApplied { .. } => "maintenance-applied",
            Event::PipelineSnapshotTaken { .. } => "pipeline-snapshot-taken",
            Event::ProcessStarted { .. } => "process-started",
            Event::PermitAcquired { .. } => "permit-acquired",
            Event::PermitReleased { .. } => "permit-released",
            Event::ExecutionStarted { .. } => "execution-started",
            Event::AttemptDropped { .. } => "attempt-dropped",
            Event::ExecutionFinished { .. } => "execution-finished",
            Event::FinalizeTimedOut { .. } => "finalize-timed-out",
            Event::CallbackPublished { .. } => "callback-published",
            Event::HeartbeatSent { .. } => "heartbeat-sent",
            Event::MaintenanceStarted { .. } => "maintenance-started",
            Event::MaintenanceEnded { .. } => "maintenance-ended",
            Event::MaintenanceStillRunning { .. } => "maintenance-still-running",
            Event::RetryPlanned { .. } => "retry-planned",
            Event::NoteSent { .. } => "note-sent",
            Event::QueryResult { .. } => "query-result",
        }
    }
}
