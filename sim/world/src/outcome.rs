//! The outcome of one seed: what a run reports and what JSON carries.

use crate::check::Violation;
use crate::faults::{FaultEvent, FaultKind};
use crate::history::{Entry, Record, WorldEvent};
use crate::world::WorldResult;
use leasesim_vocab::ids::Owner;
use leasesim_vocab::task::TaskState;
use leasesim_vocab::testimony::Event;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub scenario: String,
    pub seed: u64,
    /// Defect switches that were on.
    pub defects: Vec<String>,
    /// Hex of the stable hash of the canonical event history.
    pub trace_hash: String,
    pub events: usize,
    pub sim_seconds: f64,
    pub violations: Vec<Violation>,
    /// Final task counts by state (ready, leased, done, dead).
    pub tasks: BTreeMap<String, u64>,
    /// Tasks still leased at the end.
    pub leftover_leases: u64,
    /// Permits still held at the end by processes that are alive.
    pub leftover_permits: u64,
    /// Evaluations per invariant.
    pub checks: BTreeMap<String, u64>,
    /// Losses excused per invariant (wasted work with a reason).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub excused: BTreeMap<String, u64>,
    /// Invariants that do not apply to the engine (what they judge is
    /// something it cannot do): neither passed nor failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_applicable: Vec<String>,
    /// Coverage points the engine cannot reach.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub coverage_not_applicable: Vec<String>,
    /// The coverage points the run reached.
    #[serde(default)]
    pub coverage: Vec<String>,
    /// Injections per fault kind (every kind present, zero or not).
    pub fault_counts: BTreeMap<String, u64>,
    /// The fault plan the run played.
    pub fault_plan: Vec<FaultEvent>,
    /// The command that replays this run.
    pub replay: String,
    /// Faults its history suggests toward points it did not reach (for
    /// guided campaigns; never written out).
    #[serde(skip)]
    pub aims: Vec<leasesim_vocab::faults::Aim>,
}

pub fn state_name(state: TaskState) -> &'static str {
    match state {
        TaskState::Ready => "ready",
        TaskState::Leased => "leased",
        TaskState::Done => "done",
        TaskState::Dead => "dead",
    }
}

/// Counts tasks by final state (every state present, zero or not).
pub fn task_counts(result: &WorldResult) -> BTreeMap<String, u64> {
    let mut counts: BTreeMap<String, u64> =
        ["ready", "leased", "done", "dead"].iter().map(|s| (s.to_string(), 0)).collect();
    for (_, state) in result.tasks.values() {
        *counts.get_mut(state_name(*state)).expect("every state is counted") += 1;
    }
    counts
}

/// Permits held at the end by incarnations that were not killed, rebuilt
/// from the history.
pub fn leftover_permits(history: &[Record]) -> u64 {
    let mut held: BTreeMap<Owner, i64> = BTreeMap::new();
    for rec in history {
        match &rec.entry {
            Entry::Engine(Event::PermitAcquired { owner, .. }) => *held.entry(*owner).or_default() += 1,
            Entry::Engine(Event::PermitReleased { owner, .. }) => *held.entry(*owner).or_default() -= 1,
            // Killed or exited: its permits went with it.
            Entry::World(w) => {
                if let Some(owner) = w.gone() {
                    held.remove(&owner);
                }
            }
            _ => {}
        }
    }
    held.values().map(|&n| n.max(0) as u64).sum()
}

/// Injections per fault kind, counted from the history's fault records.
pub fn fault_counts(history: &[Record]) -> BTreeMap<String, u64> {
    let mut counts: BTreeMap<String, u64> = FaultKind::ALL.iter().map(|k| (k.name().to_string(), 0)).collect();
    for rec in history {
        if let Entry::World(WorldEvent::Fault { kind, .. }) = &rec.entry {
            *counts.entry(kind.clone()).or_default() += 1;
        }
    }
    counts
}
