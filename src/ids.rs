//! Identities. Every write made on behalf of an attempt carries a [`Fence`].

use serde::{Deserialize, Serialize};

/// A task's identity in the store.
pub type TaskId = u64;
/// A worker process's stable identity (survives restarts).
pub type ProcId = u32;
/// A group of tasks: a workflow run or a pipeline.
pub type GroupId = u64;
/// An index that an index build materializes.
pub type IndexId = u64;

/// One incarnation of one process. A restarted process gets a new incarnation,
/// so writes of its previous life are distinguishable from its current ones.
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

/// The attempt identity captured at claim: (task, attempt, owner).
///
/// The store applies a complete, fail, heartbeat-for-task or renewal only if
/// this is still the task's current attempt and the task is still leased to
/// this owner. Anything else is a terminal no-op, reported as rejected.
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
/// (one session of its connection pool): the `seq`-th transaction its
/// incarnation began. Never reused, so a late or repeated statement of a
/// transaction that ended cannot open it again.
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
