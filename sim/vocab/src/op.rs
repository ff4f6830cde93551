//! Requests at the store seam, classified in the harness's words, and the
//! store's answers, normalized.
//!
//! An engine's adapter maps each request its processes send (an RPC, a SQL
//! statement) to one [`Op`], and each answer to one [`Response`]. Checkers and
//! coverage points judge these, never an engine's own protocol. New variants
//! go at the end of each enum: a history's hash covers the variant's index.

use crate::ids::{Fence, GroupId, IndexId, Owner, StageRef, TaskId, TxnId};
use crate::task::{MaintenanceKind, TaskError, TaskKind, TaskSpec};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Op {
    /// Create a task. A request with an idempotency key the store has seen
    /// creates nothing and answers the task that key created.
    Enqueue { spec: TaskSpec, key: Option<u64> },
    /// Create a pipeline of `stages` sequential stages; its first is due.
    CreatePipeline { pipeline: GroupId, stages: u32 },
    /// Claim up to `max` due tasks, the store holding the request open up to
    /// `wait_ms` for work. Its answer lists the grants.
    Claim { owner: Owner, max: u32, wait_ms: u64 },
    /// The owner is alive (a holder-liveness lease is extended).
    Heartbeat { owner: Owner },
    /// Extend this attempt's lease.
    Renew { fence: Fence },
    /// Is this attempt's lease still the current, valid one?
    LeaseValid { fence: Fence },
    /// The attempt's outcome: the task is done.
    Complete { fence: Fence },
    /// The attempt's outcome: the task failed (retried later, or dead).
    Fail { fence: Fence, error: TaskError },
    /// First half of a two-step stage completion.
    ClearStageLink { fence: Fence },
    /// Recovery: release the tasks of owners silent past the dead timeout.
    ReleaseDead { by: Owner },
    /// Same-owner recovery: release the tasks leased to `owner` that it is
    /// not running, if granted more than `older_than_ms` before `as_of_ms`.
    ReleaseOrphans { owner: Owner, running: Vec<TaskId>, older_than_ms: u64, as_of_ms: u64 },
    /// Recovery: reclaim expired leases of tasks outside any group.
    ReclaimExpired { by: Owner },
    /// Recovery: repair every group whose repair is due.
    Repair { by: Owner },
    /// One maintenance pass of one kind, under a statement timeout.
    Maintain { owner: Owner, kind: MaintenanceKind, timeout_ms: Option<u64> },
    /// A snapshot of stages that are due and have no task.
    PipelineSnapshot { by: Owner },
    /// Guarded insert of a stage's task.
    EnqueueStage { stage: StageRef },
    /// Wait up to `lag_timeout_ms` for the index to be materialized.
    QueryIndex { index: IndexId, lag_timeout_ms: u64 },
    /// One statement of a transaction that spans round trips (READ
    /// COMMITTED); `commit` sends COMMIT with it.
    Exec { txn: TxnId, stmt: Box<Op>, commit: bool },
    /// Ends a transaction with nothing applied.
    Rollback { txn: TxnId },
    // ---- added for engines beyond the built-in one ----
    /// COMMIT of a transaction, sent on its own.
    Commit { txn: TxnId },
    /// Recovery: release every task held by these owners, which the sender
    /// judged dead (a list it read earlier, perhaps in the same transaction).
    ReleaseOwners { by: Owner, owners: Vec<Owner> },
    /// An owner hands back tasks it holds and will not run (a shutdown).
    /// `interrupted`: their attempts had started and were cut short, so the
    /// return is a recovery (its promised delay applies); otherwise they
    /// were never started and are due again at once.
    ReturnOwn { owner: Owner, tasks: Vec<TaskId>, interrupted: bool },
    /// A request the harness has no concept for: a read, a setup statement,
    /// the engine's own bookkeeping. It must change no task row.
    Other { what: String, by: Option<Owner> },
    /// The owner announces it is leaving (a graceful shutdown): from here on
    /// it keeps nothing alive.
    Deregister { owner: Owner },
}

impl Op {
    /// Stable kebab-case name of the operation (fault plans, logs, coverage).
    pub fn op_name(&self) -> &'static str {
        match self {
            Op::Enqueue { .. } => "enqueue",
            Op::CreatePipeline { .. } => "create-pipeline",
            Op::Claim { .. } => "claim",
            Op::Heartbeat { .. } => "heartbeat",
            Op::Renew { .. } => "renew",
            Op::LeaseValid { .. } => "lease-valid",
            Op::Complete { .. } => "complete",
            Op::Fail { .. } => "fail",
            Op::ClearStageLink { .. } => "clear-stage-link",
            Op::ReleaseDead { .. } => "release-dead",
            Op::ReleaseOrphans { .. } => "release-orphans",
            Op::ReclaimExpired { .. } => "reclaim-expired",
            Op::Repair { .. } => "repair",
            Op::Maintain { .. } => "maintain",
            Op::PipelineSnapshot { .. } => "pipeline-snapshot",
            Op::EnqueueStage { .. } => "enqueue-stage",
            Op::QueryIndex { .. } => "query-index",
            // A statement keeps its own name: faults and logs aimed at an
            // operation find it inside a transaction too.
            Op::Exec { stmt, .. } => stmt.op_name(),
            Op::Rollback { .. } => "rollback",
            Op::Commit { .. } => "commit",
            Op::ReleaseOwners { .. } => "release-owners",
            Op::ReturnOwn { .. } => "return-own",
            Op::Other { .. } => "other",
            Op::Deregister { .. } => "deregister",
        }
    }

    /// The request itself, or the statement a transaction runs.
    pub fn statement(&self) -> &Op {
        match self {
            Op::Exec { stmt, .. } => stmt,
            other => other,
        }
    }

    /// The attempt a fenced request speaks for (a renewal, a lease check, an
    /// outcome write), a transaction's statement included.
    pub fn fence(&self) -> Option<&Fence> {
        match self.statement() {
            Op::Renew { fence }
            | Op::LeaseValid { fence }
            | Op::Complete { fence }
            | Op::Fail { fence, .. }
            | Op::ClearStageLink { fence } => Some(fence),
            _ => None,
        }
    }

    /// The transaction this request belongs to, if it spans round trips.
    pub fn txn(&self) -> Option<TxnId> {
        match self {
            Op::Exec { txn, .. } | Op::Rollback { txn } | Op::Commit { txn } => Some(*txn),
            _ => None,
        }
    }

    /// Is this an outcome write (complete, fail, stage link) for an attempt?
    pub fn is_outcome_write(&self) -> bool {
        matches!(self.statement(), Op::Complete { .. } | Op::Fail { .. } | Op::ClearStageLink { .. })
    }

    /// A recovery pass that releases other owners' work.
    pub fn is_recovery(&self) -> bool {
        matches!(
            self.statement(),
            Op::ReleaseDead { .. }
                | Op::ReleaseOrphans { .. }
                | Op::ReclaimExpired { .. }
                | Op::Repair { .. }
                | Op::ReleaseOwners { .. }
        )
    }

    /// Who sent it, as the request itself names its owner (if it does).
    pub fn owner(&self) -> Option<Owner> {
        match self.statement() {
            Op::Claim { owner, .. }
            | Op::Heartbeat { owner }
            | Op::ReleaseOrphans { owner, .. }
            | Op::Maintain { owner, .. }
            | Op::ReturnOwn { owner, .. }
            | Op::Deregister { owner } => Some(*owner),
            Op::ReleaseDead { by }
            | Op::ReclaimExpired { by }
            | Op::Repair { by }
            | Op::PipelineSnapshot { by }
            | Op::ReleaseOwners { by, .. } => Some(*by),
            Op::Other { by, .. } => *by,
            Op::Renew { fence }
            | Op::LeaseValid { fence }
            | Op::Complete { fence }
            | Op::Fail { fence, .. }
            | Op::ClearStageLink { fence } => Some(fence.owner),
            Op::Exec { txn, .. } | Op::Rollback { txn } | Op::Commit { txn } => Some(txn.owner),
            Op::Enqueue { .. } | Op::CreatePipeline { .. } | Op::EnqueueStage { .. } | Op::QueryIndex { .. } => None,
        }
    }
}

/// One claimed attempt, as the store's answer names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Grant {
    pub fence: Fence,
    pub kind: TaskKind,
    /// Store time at which the lease expires (`None`: holder-liveness).
    pub lease_expiry_ms: Option<u64>,
}

/// Why the store refused a request (nothing it asked for was applied).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Refusal {
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
    /// A write conflict or serialization failure aborted the transaction
    /// (SQLSTATE 40001): retry it.
    Conflict,
    /// The statement timed out (SQLSTATE 57014): the transaction is no
    /// longer open and nothing was applied.
    TimedOut,
    /// The transaction is no longer open (it timed out, its connection was
    /// replaced, the store restarted, or it already ended).
    TxnClosed,
    // ---- added for engines beyond the built-in one ----
    /// A lock wait gave up (SQLSTATE 55P03, `lock_timeout`).
    LockTimeout,
    /// A deadlock was broken by aborting this transaction (SQLSTATE 40P01).
    Deadlock,
    /// The connection to the store was lost or refused (SQLSTATE class 08).
    Unavailable,
    /// Any other error the store answered.
    Error,
    /// The store does not have the code the request runs (Redis's
    /// NOSCRIPT: the script is not loaded, as after a restart): nothing ran,
    /// and the client loads it and sends the request again.
    NotLoaded,
}

impl Refusal {
    pub fn name(self) -> &'static str {
        match self {
            Refusal::Missing => "missing",
            Refusal::Superseded => "superseded",
            Refusal::NotOwner => "not-owner",
            Refusal::Terminal => "terminal",
            Refusal::Expired => "expired",
            Refusal::StageGuard => "stage-guard",
            Refusal::Conflict => "conflict",
            Refusal::TimedOut => "timed-out",
            Refusal::TxnClosed => "txn-closed",
            Refusal::LockTimeout => "lock-timeout",
            Refusal::Deadlock => "deadlock",
            Refusal::Unavailable => "unavailable",
            Refusal::Error => "error",
            Refusal::NotLoaded => "not-loaded",
        }
    }

    /// The refusal a SQLSTATE stands for (an engine's driver error, named).
    pub fn of_sqlstate(code: Option<&str>) -> Refusal {
        match code {
            Some("40001") => Refusal::Conflict,
            Some("57014") => Refusal::TimedOut,
            Some("55P03") => Refusal::LockTimeout,
            Some("40P01") => Refusal::Deadlock,
            // idle_in_transaction_session_timeout ends the session too.
            Some("25P02") | Some("25P03") => Refusal::TxnClosed,
            Some(code) if code.starts_with("08") => Refusal::Unavailable,
            _ => Refusal::Error,
        }
    }

    /// The SQLSTATE PostgreSQL answers with for this refusal, if it is one
    /// of the store's own (the rest are an engine's own verdicts on its
    /// rows). `tests/store_answers.rs` provokes each on a real server.
    pub fn sqlstate(self) -> Option<&'static str> {
        match self {
            Refusal::Conflict => Some("40001"),
            Refusal::TimedOut => Some("57014"),
            Refusal::LockTimeout => Some("55P03"),
            Refusal::Deadlock => Some("40P01"),
            // in_failed_sql_transaction: a statement of a transaction an
            // earlier error ended.
            Refusal::TxnClosed => Some("25P02"),
            Refusal::Unavailable => Some("08006"),
            Refusal::Missing
            | Refusal::Superseded
            | Refusal::NotOwner
            | Refusal::Terminal
            | Refusal::Expired
            | Refusal::StageGuard
            | Refusal::Error
            | Refusal::NotLoaded => None,
        }
    }
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
        reason: Refusal,
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
    // ---- added for engines beyond the built-in one ----
    /// A statement ran and answered this many rows (or changed this many),
    /// with nothing more the harness knows how to read from it.
    Rows {
        count: u64,
    },
}

/// A notification between worker processes: the task is ready again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PeerNote {
    pub task: TaskId,
    pub retries: u32,
    pub retry_at_ms: u64,
    pub from: Owner,
}
