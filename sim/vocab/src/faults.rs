//! The fault kinds the harness injects, by their stable names. Plans and
//! their events belong to the world; the kinds are vocabulary, because a
//! fact may say which fault refused a request.

use serde::{Deserialize, Serialize};

/// Every fault kind, with a stable kebab-case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    HungFinalization,
    ProcessKill,
    StalePoll,
    MissedHeartbeat,
    ProcessPause,
    Partition,
    MessageLoss,
    MessageDelay,
    StoreStall,
    TxnTimeout,
    WriteConflict,
    ClockOffset,
    SlowPreparation,
    HungMaintenance,
    StoreCrash,
    DuplicateDelivery,
    SerializationFailure,
    LockTimeout,
    GracefulStop,
}

impl FaultKind {
    // New kinds go at the end: plans draw a coin per kind in this order, so
    // a kind added in the middle would reshuffle every plan after it.
    pub const ALL: [FaultKind; 19] = [
        FaultKind::HungFinalization,
        FaultKind::ProcessKill,
        FaultKind::StalePoll,
        FaultKind::MissedHeartbeat,
        FaultKind::ProcessPause,
        FaultKind::Partition,
        FaultKind::MessageLoss,
        FaultKind::MessageDelay,
        FaultKind::StoreStall,
        FaultKind::TxnTimeout,
        FaultKind::WriteConflict,
        FaultKind::ClockOffset,
        FaultKind::SlowPreparation,
        FaultKind::HungMaintenance,
        FaultKind::StoreCrash,
        FaultKind::DuplicateDelivery,
        FaultKind::SerializationFailure,
        FaultKind::LockTimeout,
        FaultKind::GracefulStop,
    ];

    /// The kinds a scenario allows when it names none: every kind but the
    /// ones a scenario must ask for by name. A graceful stop needs an engine
    /// that can stop (`Capabilities::graceful_stop`), and a kind added to
    /// the default would change the plan of every seed of every scenario
    /// that names no kinds.
    pub fn default_kinds() -> Vec<FaultKind> {
        FaultKind::ALL.into_iter().filter(|k| *k != FaultKind::GracefulStop).collect()
    }

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::HungFinalization => "hung-finalization",
            FaultKind::ProcessKill => "process-kill",
            FaultKind::StalePoll => "stale-poll",
            FaultKind::MissedHeartbeat => "missed-heartbeat",
            FaultKind::ProcessPause => "process-pause",
            FaultKind::Partition => "partition",
            FaultKind::MessageLoss => "message-loss",
            FaultKind::MessageDelay => "message-delay",
            FaultKind::StoreStall => "store-stall",
            FaultKind::TxnTimeout => "txn-timeout",
            FaultKind::WriteConflict => "write-conflict",
            FaultKind::ClockOffset => "clock-offset",
            FaultKind::SlowPreparation => "slow-preparation",
            FaultKind::HungMaintenance => "hung-maintenance",
            FaultKind::StoreCrash => "store-crash",
            FaultKind::DuplicateDelivery => "duplicate-delivery",
            FaultKind::SerializationFailure => "serialization-failure",
            FaultKind::LockTimeout => "lock-timeout",
            FaultKind::GracefulStop => "graceful-stop",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            FaultKind::HungFinalization => {
                "an outcome write (complete, fail, lease check) is held far past the deadline, or until heal"
            }
            FaultKind::ProcessKill => "a worker process is killed and later restarted with a new incarnation",
            FaultKind::StalePoll => {
                "a poll or snapshot is answered late, or its caller is killed while its long poll is open"
            }
            FaultKind::MissedHeartbeat => "one process's heartbeats are dropped for a while",
            FaultKind::ProcessPause => "a process stops (possibly past the dead timeout) and resumes as a zombie",
            FaultKind::Partition => "a process is cut off from the network for a while",
            FaultKind::MessageLoss => {
                "requests or replies are lost; a lost reply after the write is an ambiguous commit"
            }
            FaultKind::MessageDelay => "replies arrive late",
            FaultKind::StoreStall => "the store answers nothing for a while, then everything at once",
            FaultKind::TxnTimeout => "a write's transaction times out: nothing applied, the caller is told it failed",
            FaultKind::WriteConflict => "a task body fails on a write conflict",
            FaultKind::ClockOffset => "a process's clock is ahead of or behind the store's",
            FaultKind::SlowPreparation => "a task takes long to prepare before its body runs",
            FaultKind::HungMaintenance => "a maintenance pass's store work never finishes (until its statement timeout)",
            FaultKind::StoreCrash => {
                "the store process dies and restarts: committed state survives, held requests and open transactions are lost, calls meanwhile go unanswered"
            }
            FaultKind::DuplicateDelivery => "a request is delivered to the store a second time, a little later",
            FaultKind::SerializationFailure => "a write's transaction fails with a retryable conflict: nothing applied",
            FaultKind::LockTimeout => {
                "a write waits on a row lock past the store's lock timeout: its transaction aborts, nothing applied (SQLSTATE 55P03)"
            }
            FaultKind::GracefulStop => {
                "a worker process is asked to stop (SIGTERM): it stops claiming, ends its attempts, gives back what it holds and exits; killed if still up when its window ends, then restarted"
            }
        }
    }

    /// What the store answers a request a fault of this kind aborts with,
    /// for the kinds that abort one: what PostgreSQL answers in the
    /// situation the fault stands for (`tests/store_answers.rs` provokes
    /// each on a real server). An engine at READ COMMITTED may answer a
    /// serialization failure as the deadlock it is there (its adapter's
    /// `refuse` says so).
    pub fn answer(self) -> Option<crate::op::Refusal> {
        use crate::op::Refusal;
        match self {
            FaultKind::TxnTimeout => Some(Refusal::TimedOut),
            FaultKind::LockTimeout => Some(Refusal::LockTimeout),
            FaultKind::SerializationFailure => Some(Refusal::Conflict),
            _ => None,
        }
    }

    pub fn from_name(name: &str) -> Option<FaultKind> {
        FaultKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// A fault a run's history suggests toward a coverage point the run did not
/// reach: "a pause of p2 from 41200 ms for 9 s would have had its lease
/// check arrive after its lease ran out". Coverage proposes it from what it
/// saw (a lease's expiry, a repair just too late, an open transaction);
/// guided campaigns add it to the run's own plan, on the run's own seed, so
/// the history up to the fault is the same and the moment is still there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Aim {
    /// The coverage point it aims at.
    pub point: String,
    pub kind: FaultKind,
    /// The process it hits (faults of one process).
    pub proc: Option<u32>,
    pub at_ms: u64,
    pub for_ms: u64,
    /// The side of the window that matters: the other may be moved.
    pub anchor: Anchor,
    /// The chance per request in thousandths, for a rate fault (`None`:
    /// drawn as usual).
    pub rate_permille: Option<u32>,
}

/// Which edge of an aimed fault's window is the point of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Anchor {
    /// It must start at `at_ms` (a pause before a request is sent).
    Start,
    /// It must end at `at_ms + for_ms` (a stall that lets requests go at
    /// a lease's expiry).
    End,
    /// Both edges matter: it starts at `at_ms` and ends a little (at most a
    /// tenth of `for_ms`) after `at_ms + for_ms` (a pause from a grant that
    /// must end inside its lease's renewal margin).
    Both,
}

impl std::fmt::Display for FaultKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
