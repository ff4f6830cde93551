//! Faults: the kinds the harness injects, and fault plans.
//!
//! A fault plan is an explicit, ordered list of [`FaultEvent`]s. A seed draws
//! its plan (swarm testing: which kinds are on, how often, whom they hit, when)
//! from the seed alone; a corpus entry or a shrink can also give the plan
//! explicitly. Either way the world replays the list, so a plan can be
//! printed, saved, edited and shrunk.

mod draw;
mod mutate;

pub use draw::{draw, draw_one, within_limits, MIN_DELAY_MS, MIN_SPAN_MS};
pub use mutate::{aim, mutate};

use serde::{Deserialize, Serialize};

pub use leasesim_vocab::faults::FaultKind;

/// `magnitude_ms` of a hold that lasts until the heal.
pub const UNTIL_HEAL: i64 = -1;

/// The largest `magnitude_ms` of a plan's event (a day): a longer hold or
/// delay outlasts every phase, a longer clock offset is no longer skew.
pub const MAX_MAGNITUDE_MS: u64 = crate::ranges::DAY_MS;

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
        self.at_ms.saturating_add(self.for_ms)
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
            // The world plays a plan in its order: events out of time order
            // would give another run than the same events sorted.
            if let Some(before) = i.checked_sub(1).map(|j| &self.events[j]) {
                if (e.at_ms, e.kind) < (before.at_ms, before.kind) {
                    return Err(format!(
                        "{at}.at_ms: {} ms comes before plan[{}] ({} ms, {}); list events in time order",
                        e.at_ms,
                        i - 1,
                        before.at_ms,
                        before.kind
                    ));
                }
            }
            let magnitude_ok = match e.kind {
                // A skew either way, up to a day; more is no longer skew.
                FaultKind::ClockOffset => e.magnitude_ms.unsigned_abs() <= MAX_MAGNITUDE_MS,
                _ => e.magnitude_ms == UNTIL_HEAL || (0..=MAX_MAGNITUDE_MS as i64).contains(&e.magnitude_ms),
            };
            if !magnitude_ok {
                return Err(format!(
                    "{at}.magnitude_ms: {} is out of range (0 to {MAX_MAGNITUDE_MS} ms, -1 for until the heal; a clock offset may be negative)",
                    e.magnitude_ms
                ));
            }
            if e.end_ms() > fault_phase_ms {
                // Name the field that carried it past the phase.
                let field = if e.at_ms > fault_phase_ms { "at_ms" } else { "for_ms" };
                return Err(format!(
                    "{at}.{field}: the event ends at {} ms ({at}.at_ms + {at}.for_ms), after the fault phase ({fault_phase_ms} ms)",
                    e.end_ms()
                ));
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
                    | FaultKind::GracefulStop
            );
            if needs_proc && e.proc.is_none() {
                return Err(format!("{at}.proc: a {} fault needs a target process", e.kind));
            }
        }
        Ok(())
    }
}
