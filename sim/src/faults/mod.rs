//! Faults: the kinds the harness injects, and fault plans.
//!
//! A fault plan is an explicit, ordered list of [`FaultEvent`]s. A seed draws
//! its plan (swarm testing: which kinds are on, how often, whom they hit, when)
//! from the seed alone; a corpus entry or a shrink can also give the plan
//! explicitly. Either way the world replays the list, so a plan can be
//! printed, saved, edited and shrunk.

mod draw;
mod mutate;

pub use draw::{draw, draw_one, MIN_DELAY_MS, MIN_SPAN_MS};
pub use mutate::mutate;

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

/// `magnitude_ms` of a hold that lasts until the heal.
pub const UNTIL_HEAL: i64 = -1;

/// One fault in a plan. Fields a kind does not use are zero / `None`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultEvent {
    pub kind: FaultKind,
    /// When the fault starts (simulated ms since start).
    pub at_ms: u64,
    /// How long its window (or pause, partition, downtime) lasts.
    #[serde(default)]
    pub for_ms: u64,
    /// The worker process it hits (process faults).
    #[serde(default)]
    pub proc: Option<u32>,
    /// Chance per request or attempt inside the window (rate faults).
    #[serde(default)]
    pub rate: f64,
    /// How long a hold or delay lasts (`-1`: until heal), or a clock offset.
    #[serde(default)]
    pub magnitude_ms: i64,
}

impl FaultEvent {
    pub fn end_ms(&self) -> u64 {
        self.at_ms + self.for_ms
    }

    /// Is the window of this event open at `now_ms`?
    pub fn covers(&self, now_ms: u64) -> bool {
        self.at_ms <= now_ms && now_ms < self.end_ms()
    }

    /// One line for plans printed at the start of a run.
    pub fn describe(&self) -> String {
        let mut s = format!("{:>8} ms  {}", self.at_ms, self.kind);
        if let Some(p) = self.proc {
            s += &format!(" p{p}");
        }
        if self.for_ms > 0 {
            s += &format!(" for {} ms", self.for_ms);
        }
        if self.rate > 0.0 {
            s += &format!(" rate {:.2}", self.rate);
        }
        match self.magnitude_ms {
            0 => {}
            UNTIL_HEAL => s += " until heal",
            m => s += &format!(" magnitude {m} ms"),
        }
        s
    }
}

/// The plan of one run: its fault events in time order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultPlan {
    pub events: Vec<FaultEvent>,
}

impl FaultPlan {
    pub fn none() -> Self {
        FaultPlan::default()
    }

    pub fn kinds(&self) -> std::collections::BTreeSet<FaultKind> {
        self.events.iter().map(|e| e.kind).collect()
    }

    /// Checks an explicit plan against a world: times inside the fault phase,
    /// processes that exist, rates that are probabilities.
    pub fn validate(&self, workers: u32, fault_phase_ms: u64) -> Result<(), String> {
        for (i, e) in self.events.iter().enumerate() {
            let at = format!("plan[{i}]");
            if e.end_ms() > fault_phase_ms {
                return Err(format!("{at}: ends at {} ms, after the fault phase ({fault_phase_ms} ms)", e.end_ms()));
            }
            if let Some(p) = e.proc {
                if p == 0 || p > workers {
                    return Err(format!("{at}.proc: no worker p{p} (workers are p1..p{workers})"));
                }
            }
            if !(0.0..=1.0).contains(&e.rate) {
                return Err(format!("{at}.rate: must be between 0 and 1"));
            }
            let needs_proc = matches!(
                e.kind,
                FaultKind::ProcessKill
                    | FaultKind::ProcessPause
                    | FaultKind::Partition
                    | FaultKind::MissedHeartbeat
                    | FaultKind::ClockOffset
            );
            if needs_proc && e.proc.is_none() {
                return Err(format!("{at}.proc: a {} fault needs a target process", e.kind));
            }
        }
        Ok(())
    }
}
