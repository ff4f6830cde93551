//! Identities the harness names things by. An engine's own identities (a
//! worker id string, a job id, a lease token) are mapped onto these by its
//! adapter at the seams.

use serde::{Deserialize, Serialize};

/// A task's identity in the store (a row's primary key).
pub type TaskId = u64;
/// A worker process's stable identity (survives restarts).
pub type ProcId = u32;
/// A group of tasks: a workflow run or a pipeline.
pub type GroupId = u64;
/// An index that an index build materializes.
pub type IndexId = u64;

/// One incarnation of one process. A restarted process gets a new
/// incarnation, so what it did in its previous life stays distinguishable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Owner {
    pub proc: ProcId,
    pub incarnation: u32,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "p{}.{}", self.proc, self.incarnation)
    }
}

/// One attempt: (task, attempt, owner). `attempt` is the attempt number or
/// fencing token the engine's row carries for the grant (for an engine
/// whose rows carry none, the adapter numbers the grants it saw).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Fence {
    pub task: TaskId,
    pub attempt: u32,
    pub owner: Owner,
}

impl std::fmt::Display for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "t{}#{}@{}", self.task, self.attempt, self.owner)
    }
}

/// A pipeline stage: stage `index` of pipeline `pipeline`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct StageRef {
    pub pipeline: GroupId,
    pub index: u32,
}

impl std::fmt::Display for StageRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pipe{}/s{}", self.pipeline, self.index)
    }
}

/// A transaction that spans round trips between one process and the store
/// (one session of its connection pool): the `seq`-th its incarnation began.
/// Never reused, so a late statement of an ended one cannot reopen it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TxnId {
    pub owner: Owner,
    pub seq: u64,
}

impl std::fmt::Display for TxnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "x{}@{}", self.seq, self.owner)
    }
}
