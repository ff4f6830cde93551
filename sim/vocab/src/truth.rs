//! Ground truth: what the harness itself saw at the seams it owns.
//!
//! The engine's own events ([`crate::testimony::Event`]) are testimony: the
//! engine says what it did. A [`Fact`] is recorded by the harness at a seam
//! the engine cannot talk its way past:
//!
//! - the **store seam** (`world::store_node`): every request that reached the
//!   store process, who sent it (as the network saw it, not as the request
//!   claims), what the harness did with it, what the engine's store answered,
//!   and what that answer's transaction changed in the store, read by the
//!   harness itself ([`Commit`], see `world::tap`);
//! - the **task-body seam** (`world::handler`): every execution of a task body
//!   as the body saw it, on which process, and how it ended; and every
//!   completion callback the application received;
//! - the **client seam** (`world::run_client`): every call the application
//!   made and every answer it got;
//! - the **network seam** (`world::net`): every peer note sent and delivered;
//! - **process control** (`world::controller`, `world::store_node`):
//!   partitions and store crashes (worker kills, pauses and restarts are
//!   [`crate::history::WorldEvent`]s).
//!
//! Checkers judge facts; engine events are cross-checked against them.

use crate::faults::FaultKind;
use crate::ids::{Fence, IndexId, Owner, ProcId, StageRef, TaskId, TxnId};
use crate::op::{Op, PeerNote, Response};
use crate::task::{QueueId, QueueRow, Row, StageRow, TaskError, TaskKind, TaskSpec};
use serde::{Deserialize, Serialize};
use std::hash::{Hash, Hasher};

/// Who sent a request, as the network saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sender {
    /// A worker process incarnation.
    Worker(Owner),
    /// One call of the application's client (numbered per run).
    Client(u64),
}

impl Sender {
    pub fn owner(self) -> Option<Owner> {
        match self {
            Sender::Worker(owner) => Some(owner),
            Sender::Client(_) => None,
        }
    }
}

impl std::fmt::Display for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sender::Worker(owner) => write!(f, "{owner}"),
            Sender::Client(call) => write!(f, "client call {call}"),
        }
    }
}

/// One task row changed by a transaction (`before` is `None` for a new row).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TaskChange {
    pub before: Option<Row>,
    pub after: Row,
}

/// One stage row changed by a transaction.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StageChange {
    pub stage: StageRef,
    pub before: Option<StageRow>,
    pub after: StageRow,
}

/// One named queue's lock row changed by a transaction.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct QueueChange {
    pub queue: QueueId,
    pub before: Option<QueueRow>,
    pub after: QueueRow,
}

/// What one answer's transaction changed in the store, row by row.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commit {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<TaskChange>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageChange>,
    /// Indexes that became materialized.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub materialized: Vec<IndexId>,
    /// Named queues whose lock changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<QueueChange>,
}

impl Hash for Commit {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.tasks.hash(state);
        self.stages.hash(state);
        self.materialized.hash(state);
        // Only when there are any: histories of engines without named queues
        // hash as they did before queues were part of the vocabulary.
        if !self.queues.is_empty() {
            self.queues.hash(state);
        }
    }
}

impl Commit {
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty() && self.stages.is_empty() && self.materialized.is_empty() && self.queues.is_empty()
    }

    pub fn task(&self, id: TaskId) -> Option<&TaskChange> {
        self.tasks.iter().find(|c| c.after.id == id)
    }
}

/// What a client sent of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TxnSend {
    /// A statement that leaves the transaction open.
    Statement,
    /// A statement sent with COMMIT: the client ends the transaction.
    Commit,
    /// A rollback: the client ends the transaction.
    Rollback,
}

impl TxnSend {
    /// The kind of send a transaction request is (`None`: not one).
    pub fn of(op: &Op) -> Option<(TxnId, Option<Fence>, TxnSend)> {
        match op {
            Op::Exec { txn, stmt, commit } => {
                let send = if *commit { TxnSend::Commit } else { TxnSend::Statement };
                Some((*txn, stmt.fence().copied(), send))
            }
            Op::Rollback { txn } => Some((*txn, None, TxnSend::Rollback)),
            Op::Commit { txn } => Some((*txn, None, TxnSend::Commit)),
            _ => None,
        }
    }
}

/// What became of an answer once the store had it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reply {
    /// Sent at once.
    Sent,
    /// Lost on the way back: the caller never hears of it (an ambiguous commit
    /// when the transaction changed something).
    Lost,
    /// Held back; a [`Fact::Replied`] says when it left.
    Late,
}

/// A call of the application's client.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClientCall {
    Enqueue { spec: TaskSpec },
    CreatePipeline { pipeline: u64, stages: u32 },
    Query { index: IndexId, lag_timeout_ms: u64 },
}

/// What the application was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClientAnswer {
    /// The enqueue's task id (`None`: the call failed or got no answer).
    Enqueued {
        task: Option<TaskId>,
    },
    PipelineCreated {
        ok: bool,
    },
    Queried {
        materialized: bool,
    },
}

/// The shortest and longest one-way trip between a process and the store
/// over the harness's store link. A pause does not hold a request on its
/// way out (the world pauses a process once what it sent has left); an
/// answer to a paused process waits for it to run again.
pub const HOP_MIN_MS: u64 = 1;
pub const HOP_MAX_MS: u64 = 10;

/// How much later than its deadline a timer's firing may read in the
/// history: records are stamped in whole milliseconds, and the simulator's
/// timer fires at the first whole millisecond at or after its deadline
/// (b-machines seed 8274141446591897013: a body returned at 363241 ms, its
/// 30 s finalization deadline fired at 393242 ms). A span timed by k timers
/// in a row may read up to k ms longer than their sum.
pub const TIMER_ROUNDING_MS: u64 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "fact", rename_all = "kebab-case")]
pub enum Fact {
    // ---- the store seam ----
    /// A request reached the store process.
    Arrived {
        req: u64,
        from: Sender,
        request: Op,
        /// A second delivery of a request the store already had: `from`
        /// sent it once, earlier, and its answer here goes nowhere.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        duplicate: bool,
    },
    /// No answer will come: the harness dropped it before the store saw it
    /// (lost on the way, a dropped heartbeat, the store process down), or
    /// the store process died holding it (nothing applied that was not
    /// already answered).
    Dropped {
        req: u64,
    },
    /// The harness answered for the store (a transaction that timed out or
    /// failed to serialize, a statement timeout): nothing was applied.
    Refused {
        req: u64,
        response: Response,
        /// The fault that refused it (`None`: the request's own statement
        /// timeout).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fault: Option<FaultKind>,
    },
    /// The engine's store took the request (after any stall or delay at the
    /// seam). Recorded when that is later than its arrival, and always for
    /// requests the store holds open (long polls, lag-bounded queries).
    Handed {
        req: u64,
    },
    /// The engine's store answered, and this is what its transaction changed.
    Answered {
        req: u64,
        response: Response,
        commit: Commit,
        reply: Reply,
    },
    /// A late answer left the store process.
    Replied {
        req: u64,
    },
    /// The store changed outside any request's transaction (found before a
    /// request was handed over, or at the end of the run).
    Drift {
        commit: Commit,
    },
    /// The store's whole state at the end of the run, read by the harness.
    Final {
        tasks: Vec<Row>,
        stages: Vec<(StageRef, StageRow)>,
        materialized: Vec<IndexId>,
    },

    // ---- the task-body seam ----
    /// A task body started running on process `on`.
    BodyStarted {
        fence: Fence,
        kind: TaskKind,
        on: Owner,
    },
    /// The body returned (`ok`: it succeeded; else the error it returned).
    BodyEnded {
        fence: Fence,
        on: Owner,
        error: Option<TaskError>,
    },
    /// The body was dropped before it returned (its process died, or the
    /// engine cancelled it).
    BodyStopped {
        fence: Fence,
        on: Owner,
    },
    /// The application received a completion callback on process `on`.
    Callback {
        fence: Fence,
        on: Owner,
    },

    // ---- the client seam ----
    /// The application made a call.
    ClientCalled {
        call: u64,
        /// The application client that made it (a long-lived client makes
        /// many calls; a fresh client's id is the call's own number).
        client: u64,
        what: ClientCall,
    },
    /// ... and got this answer.
    ClientAnswered {
        call: u64,
        answer: ClientAnswer,
    },

    // ---- the network seam ----
    NoteSent {
        from: Owner,
        note: PeerNote,
    },
    NoteDelivered {
        to: Owner,
        note: PeerNote,
    },
    /// A worker sent a statement of a transaction that spans round trips,
    /// or its rollback (in the order it sent them, whatever the network
    /// does to them afterwards).
    TxnSent {
        from: Owner,
        txn: TxnId,
        /// The attempt the statement speaks for (`None`: a rollback).
        fence: Option<Fence>,
        send: TxnSend,
    },

    // ---- process control ----
    /// The process is cut off from the network ...
    Partitioned {
        proc: ProcId,
    },
    /// ... and joined again.
    Rejoined {
        proc: ProcId,
    },
    /// The store process died, holding `held` requests ...
    StoreCrashed {
        held: u64,
    },
    /// ... and came back with its committed state.
    StoreRestarted,

    // ---- added for engines beyond the built-in one ----
    /// The named queues' lock rows at the end of the run (recorded only for
    /// engines with named queues, right after [`Fact::Final`]).
    FinalQueues {
        queues: Vec<(QueueId, QueueRow)>,
    },
}

impl Fact {
    /// Stable kebab-case name of the fact kind.
    pub fn name(&self) -> &'static str {
        match self {
            Fact::Arrived { .. } => "arrived",
            Fact::Dropped { .. } => "dropped",
            Fact::Refused { .. } => "refused",
            Fact::Handed { .. } => "handed",
            Fact::Answered { .. } => "answered",
            Fact::Replied { .. } => "replied",
            Fact::Drift { .. } => "drift",
            Fact::Final { .. } => "final",
            Fact::BodyStarted { .. } => "body-started",
            Fact::BodyEnded { .. } => "body-ended",
            Fact::BodyStopped { .. } => "body-stopped",
            Fact::Callback { .. } => "callback",
            Fact::ClientCalled { .. } => "client-called",
            Fact::ClientAnswered { .. } => "client-answered",
            Fact::NoteSent { .. } => "note-sent",
            Fact::NoteDelivered { .. } => "note-delivered",
            Fact::TxnSent { .. } => "txn-sent",
            Fact::Partitioned { .. } => "partitioned",
            Fact::StoreCrashed { .. } => "store-crashed",
            Fact::StoreRestarted => "store-restarted",
            Fact::Rejoined { .. } => "rejoined",
            Fact::FinalQueues { .. } => "final-queues",
        }
    }
}
