//! The wire protocol between processes, and the [`Transport`] seam that
//! carries it. A deployment decides what the network is; the engine only
//! decides how long it is willing to wait for an answer.

use crate::config::MaintenanceKind;
use crate::handler::TaskError;
use crate::ids::{Fence, GroupId, IndexId, Owner, StageRef, TaskId, TxnId};
use crate::task::{TaskKind, TaskSpec};
use serde::{Deserialize, Serialize};
use std::future::Future;

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Request {
    /// Create a task. A request carrying an idempotency key the store has
    /// seen before creates nothing and answers the task that key created,
    /// so a client may send it again after an answer it never got.
    Enqueue {
        spec: TaskSpec,
        key: Option<u64>,
    },
    /// Create a pipeline of `stages` sequential stages; its first stage is due.
    CreatePipeline {
        pipeline: GroupId,
        stages: u32,
    },
    /// Claim up to `max` due tasks; hold the request open up to `wait_ms`.
    Claim {
        owner: Owner,
        max: u32,
        wait_ms: u64,
    },
    /// Process heartbeat: the owner is alive.
    Heartbeat {
        owner: Owner,
    },
    Renew {
        fence: Fence,
    },
    /// Is this attempt's lease still the current, valid one?
    LeaseValid {
        fence: Fence,
    },
    Complete {
        fence: Fence,
    },
    Fail {
        fence: Fence,
        error: TaskError,
    },
    /// First half of a two-step stage completion: clear the stage link and
    /// mark the stage done, leaving the task itself in place.
    ClearStageLink {
        fence: Fence,
    },
    /// Release the tasks of processes silent for longer than the dead timeout.
    ReleaseDead {
        by: Owner,
    },
    /// Same-owner recovery: release the tasks leased to `owner` that it is not
    /// running, if they were granted more than `older_than_ms` before
    /// `as_of_ms`, the owner's time when it listed what it runs (a claim
    /// answer older than that was dropped by its caller). A request the store
    /// applies late must not take a task granted after the list was made.
    ReleaseOrphans {
        owner: Owner,
        running: Vec<TaskId>,
        older_than_ms: u64,
        as_of_ms: u64,
    },
    /// Reclaim expired leases of tasks outside any group.
    ReclaimExpired {
        by: Owner,
    },
    /// Repair every group whose repair is due.
    Repair {
        by: Owner,
    },
    /// One maintenance pass of one kind (index, bucket, tenant). An index
    /// pass finalizes every built index: it becomes materialized. The pass
    /// runs as one transaction under a statement timeout (`None`: none):
    /// past it the store aborts the pass with nothing applied.
    Maintain {
        owner: Owner,
        kind: MaintenanceKind,
        timeout_ms: Option<u64>,
    },
    /// A snapshot of stages that are due and have no task.
    PipelineSnapshot {
        by: Owner,
    },
    /// Guarded insert of a stage's task.
    EnqueueStage {
        stage: StageRef,
    },
    /// Wait up to `lag_timeout_ms` for the index to be materialized.
    QueryIndex {
        index: IndexId,
        lag_timeout_ms: u64,
    },
    /// One statement of a transaction that spans round trips (Read
    /// Committed, as a SQL store runs it). The first statement of a `txn`
    /// the store has not seen opens it; `commit` sends COMMIT with the
    /// statement. Until then nothing it wrote is visible to anyone else and
    /// the rows its fenced statements matched stay locked: other writers
    /// wait for them, claims and recovery passes skip them. A transaction
    /// that stays open past the store's `txn_timeout_ms` (a stalled or dead
    /// client) is aborted with nothing applied; its later statements are
    /// refused with [`Rejection::TxnClosed`]. Only attempt-scoped
    /// statements run in a transaction: a lease check (`SELECT … FOR
    /// UPDATE`), complete, fail and clear-stage-link.
    Exec {
        txn: TxnId,
        stmt: Box<Request>,
        commit: bool,
    },
    /// Ends a transaction with nothing applied (and its locks released).
    Rollback {
        txn: TxnId,
    },
    /// The incarnation is leaving (a graceful stop): from now on it is dead
    /// to the store. Its heartbeats no longer count, its claims get nothing,
    /// and recovery may release whatever it still holds.
    Deregister {
        owner: Owner,
    },
}

impl Request {
    /// Stable kebab-case name of the operation (used by fault plans and logs).
    pub fn op_name(&self) -> &'static str {
        match self {
            Request::Enqueue { .. } => "enqueue",
            Request::CreatePipeline { .. } => "create-pipeline",
            Request::Claim { .. } => "claim",
            Request::Heartbeat { .. } => "heartbeat",
            Request::Renew { .. } => "renew",
            Request::LeaseValid { .. } => "lease-valid",
            Request::Complete { .. } => "complete",
            Request::Fail { .. } => "fail",
            Request::ClearStageLink { .. } => "clear-stage-link",
            Request::ReleaseDead { .. } => "release-dead",
            Request::ReleaseOrphans { .. } => "release-orphans",
            Request::ReclaimExpired { .. } => "reclaim-expired",
            Request::Repair { .. } => "repair",
            Request::Maintain { .. } => "maintain",
            Request::PipelineSnapshot { .. } => "pipeline-snapshot",
            Request::EnqueueStage { .. } => "enqueue-stage",
            Request::QueryIndex { .. } => "query-index",
            // A statement keeps its own name: faults and logs aimed at an
            // operation find it inside a transaction too.
            Request::Exec { stmt, .. } => stmt.op_name(),
            Request::Rollback { .. } => "rollback",
            Request::Deregister { .. } => "deregister",
        }
    }

    /// The request itself, or the statement a transaction runs.
    pub fn statement(&self) -> &Request {
        match self {
            Request::Exec { stmt, .. } => stmt,
            other => other,
        }
    }

    /// The attempt a fenced request speaks for (a renewal, a lease check,
    /// an outcome write), a transaction's statement included.
    pub fn fence(&self) -> Option<&Fence> {
        match self.statement() {
            Request::Renew { fence }
            | Request::LeaseValid { fence }
            | Request::Complete { fence }
            | Request::Fail { fence, .. }
            | Request::ClearStageLink { fence } => Some(fence),
            _ => None,
        }
    }

    /// The transaction this request belongs to, if it spans round trips.
    pub fn txn(&self) -> Option<TxnId> {
        match self {
            Request::Exec { txn, .. } | Request::Rollback { txn } => Some(*txn),
            _ => None,
        }
    }

    /// May this request run as a statement of a transaction?
    pub fn runs_in_txn(&self) -> bool {
        matches!(
            self,
            Request::LeaseValid { .. }
                | Request::Complete { .. }
                | Request::Fail { .. }
                | Request::ClearStageLink { .. }
        )
    }

    /// Is this an outcome write (complete or fail) made for an attempt?
    pub fn is_outcome_write(&self) -> bool {
        matches!(self.statement(), Request::Complete { .. } | Request::Fail { .. } | Request::ClearStageLink { .. })
    }
}

/// One claimed attempt.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Grant {
    pub fence: Fence,
    pub kind: TaskKind,
    /// Store time at which the lease expires (`None`: heartbeat ownership).
    pub lease_expiry_ms: Option<u64>,
}

/// Why the store refused a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rejection {
    /// No such task (never existed).
    Missing,
    /// The task has a newer attempt than the fence.
    Superseded,
    /// Same attempt, but the task is no longer leased to this owner.
    NotOwner,
    /// The task is already done or dead.
    Terminal,
    /// The lease has expired.
    Expired,
    /// The stage is already done, or already has a task.
    StageGuard,
    /// A write conflict aborted the transaction.
    Conflict,
    /// The statement timed out: the transaction is no longer open and
    /// nothing was applied.
    TimedOut,
    /// The transaction is no longer open (it timed out, its client was
    /// replaced, the store restarted, or it already ended): nothing it wrote
    /// applies, and the statement did not run.
    TxnClosed,
    /// A lock wait gave up (another transaction held the row): the
    /// transaction is aborted and nothing was applied; retry it.
    LockTimeout,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Response {
    Enqueued {
        task: TaskId,
    },
    Claimed {
        grants: Vec<Grant>,
    },
    Ack,
    Renewed {
        lease_expiry_ms: u64,
    },
    Valid {
        valid: bool,
    },
    /// A fenced write took effect. For a fail, `retry_at_ms` is the committed
    /// retry time (`None` when the task died) and `retries` the failures spent.
    Applied {
        retries: u32,
        retry_at_ms: Option<u64>,
    },
    Rejected {
        reason: Rejection,
    },
    Released {
        tasks: u32,
    },
    Snapshot {
        due: Vec<StageRef>,
    },
    Query {
        materialized: bool,
    },
}

/// The call could not be delivered (process or link gone).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RpcError {
    Unavailable,
}

/// A notification between worker processes: the task is ready again.
/// It carries the committed retry time, which receivers must keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PeerNote {
    pub task: TaskId,
    pub retries: u32,
    pub retry_at_ms: u64,
    pub from: Owner,
}

/// What carries calls to the store and notes between peers. Implementations
/// never time out on their own: a call whose answer never comes stays pending
/// until the caller's deadline (if it set one).
pub trait Transport: Clone + Send + Sync + 'static {
    fn call(&self, req: Request) -> impl Future<Output = Result<Response, RpcError>> + Send;
    /// Best effort: a note may be delayed or lost.
    fn notify_peers(&self, note: PeerNote) -> impl Future<Output = ()> + Send;
    /// The next note addressed to this process; `None` when no more will come.
    fn recv_note(&self) -> impl Future<Output = Option<PeerNote>> + Send;
}
