//! Defect switches: each re-creates one real production bug (described in
//! docs/real-bugs.md) so the harness can prove it catches it. All are off by
//! default, nothing but an explicit request turns one on, and each is read in
//! exactly one place in the engine: one `defects.on(Defect::...)` call, named
//! in the variant's doc below. `grep -rn 'defects.on(' src/` lists them all;
//! a test below holds the one-place rule.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Defect {
    /// A1: outcome persistence has no deadline; the permit is held while it
    /// hangs. Read in `worker::attempt::persist_outcome`.
    UnboundedFinalize,
    /// A2: maintenance passes are awaited inside the claim loop, ahead of
    /// claims. Read in `worker::maintenance::Maintenance::poll`.
    InlineMaintenance,
    /// A3: concurrency drops to 1 when fewer than two shard targets exist.
    /// Read in `worker::effective_concurrency`.
    SingleShardSerialization,
    /// B1: complete and fail are applied by task id alone, without the
    /// attempt fence. Read in `store::fence` (`check_outcome_fence`).
    UnfencedCompletion,
    /// B2: a peer note's committed retry time is dropped and the receiver
    /// waits a backoff from receipt time. Read in `worker::background::plan_wake`.
    RetryClockReset,
    /// B3: stage success clears the stage link and deletes the task in two
    /// transactions. Read in `worker::attempt::complete`.
    NonatomicStageComplete,
    /// B4: the stage enqueue guard checks only that no task is linked, not
    /// that the stage is not done. Read in `store::Store::stage_guard`.
    StaleSnapshotEnqueue,
    /// C2: group repair judges only the oldest leased task of a group.
    /// Read in `store::repair` (`Store::repair_groups`, which hands it to
    /// `expired_tasks`).
    RepairHidesExpiredLease,
    /// A fix3: maintenance passes are single-flight and polled by the claim
    /// loop, but never timeout-cancelled: a pass that hangs stays in flight
    /// forever and its kind never runs again. Read in
    /// `worker::maintenance::run_pass`.
    UncancelledMaintenance,
}

impl Defect {
    pub const ALL: [Defect; 9] = [
        Defect::UnboundedFinalize,
        Defect::InlineMaintenance,
        Defect::SingleShardSerialization,
        Defect::UnfencedCompletion,
        Defect::RetryClockReset,
        Defect::NonatomicStageComplete,
        Defect::StaleSnapshotEnqueue,
        Defect::RepairHidesExpiredLease,
        Defect::UncancelledMaintenance,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Defect::UnboundedFinalize => "unbounded-finalize",
            Defect::InlineMaintenance => "inline-maintenance",
            Defect::SingleShardSerialization => "single-shard-serialization",
            Defect::UnfencedCompletion => "unfenced-completion",
            Defect::RetryClockReset => "retry-clock-reset",
            Defect::NonatomicStageComplete => "nonatomic-stage-complete",
            Defect::StaleSnapshotEnqueue => "stale-snapshot-enqueue",
            Defect::RepairHidesExpiredLease => "repair-hides-expired-lease",
            Defect::UncancelledMaintenance => "uncancelled-maintenance",
        }
    }

    /// Where the real bug came from: its id and section in docs/real-bugs.md.
    pub fn source(self) -> &'static str {
        match self {
            Defect::UnboundedFinalize => "A1, docs/real-bugs.md#a1: hung failure write holds the worker permit forever",
            Defect::InlineMaintenance => "A2, docs/real-bugs.md#a2: inline finalization passes stop all claiming",
            Defect::SingleShardSerialization => "A3, docs/real-bugs.md#a3: one shard target forces concurrency 1",
            Defect::UnfencedCompletion => "B1, docs/real-bugs.md#b1: stale completion after missed heartbeats",
            Defect::RetryClockReset => "B2, docs/real-bugs.md#b2: peer note drops the committed retry time",
            Defect::NonatomicStageComplete => "B3, docs/real-bugs.md#b3: orphan stage task between two transactions",
            Defect::StaleSnapshotEnqueue => "B4, docs/real-bugs.md#b4: delayed snapshot re-creates a done stage's task",
            Defect::RepairHidesExpiredLease => "C2, docs/real-bugs.md#c2: repair sees only the oldest leased task",
            Defect::UncancelledMaintenance => {
                "A fix3, docs/real-bugs.md#a-fix3: a finalization pass stays in flight forever"
            }
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Defect::UnboundedFinalize => "outcome persistence has no deadline; the permit is held while it hangs",
            Defect::InlineMaintenance => "maintenance passes are awaited inside the claim loop, ahead of claims",
            Defect::SingleShardSerialization => "concurrency drops to 1 when fewer than two shard targets exist",
            Defect::UnfencedCompletion => "complete and fail writes are applied by task id alone",
            Defect::RetryClockReset => "a peer note loses the committed retry time; the receiver uses receipt time",
            Defect::NonatomicStageComplete => "stage link cleared and task deleted in two transactions",
            Defect::StaleSnapshotEnqueue => "the stage enqueue guard checks only that no task is linked",
            Defect::RepairHidesExpiredLease => "group repair judges only the oldest leased task",
            Defect::UncancelledMaintenance => {
                "maintenance passes are never timeout-cancelled: a hung pass blocks its kind for good"
            }
        }
    }

    pub fn from_name(name: &str) -> Option<Defect> {
        Defect::ALL.into_iter().find(|d| d.name() == name)
    }
}

impl std::fmt::Display for Defect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The set of defect switches that are on. Empty (the correct engine) by default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Defects(pub BTreeSet<Defect>);

impl Defects {
    pub fn none() -> Self {
        Defects::default()
    }

    pub fn on(&self, defect: Defect) -> bool {
        self.0.contains(&defect)
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.0.iter().map(|d| d.name()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Defect;

    /// Every `.rs` file under `dir`, recursively, but this one (it names
    /// the call without making it).
    fn sources(dir: &std::path::Path, out: &mut Vec<(std::path::PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).expect("src/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("defects.rs") {
                let text = std::fs::read_to_string(&path).expect("a source file is readable");
                out.push((path, text));
            }
        }
    }

    #[test]
    fn each_switch_is_read_in_exactly_one_place() {
        let mut files = Vec::new();
        sources(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
        let reads = |defect: Defect| -> Vec<String> {
            let call = format!("defects.on(Defect::{defect:?})");
            files.iter().flat_map(|(path, text)| text.matches(&call).map(move |_| path.display().to_string())).collect()
        };
        for defect in Defect::ALL {
            let places = reads(defect);
            assert_eq!(places.len(), 1, "{defect} is read in {} places: {places:?}", places.len());
        }
        let all: usize = files.iter().map(|(_, text)| text.matches("defects.on(").count()).sum();
        assert_eq!(all, Defect::ALL.len(), "a `defects.on(` call that names no switch directly");
    }
}
