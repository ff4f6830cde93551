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
}

impl FaultKind {
    // New kinds go at the end: plans draw a coin per kind in this order, so
    // a kind added in the middle would reshuffle every plan after it.
    pub const ALL: [FaultKind; 17] = [
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
    ];

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
        }
    }

    pub fn from_name(name: &str) -> Option<FaultKind> {
        FaultKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl std::fmt::Display for FaultKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
