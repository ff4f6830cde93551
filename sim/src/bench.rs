//! The project's own benchmarks: throughput (seeds per second) and time to
//! find each real defect (seeds the fuzzer needs before the invariant that
//! the real bug broke is reported).

use crate::fuzz::{self, Campaign, SeedSpace, Target};
use crate::runner::{PlanSource, DEFAULT_WATCHDOG};
use leasesim::defects::{Defect, Defects};
use serde::{Deserialize, Serialize};
use std::sync::atomic::AtomicBool;

/// The invariant each real bug broke (docs/real-bugs.md, docs/design.md#invariants).
pub fn invariant_of(defect: Defect) -> &'static str {
    match defect {
        Defect::UnboundedFinalize => "no-permit-leak",
        Defect::InlineMaintenance => "claim-progress",
        Defect::SingleShardSerialization => "claim-progress",
        Defect::UnfencedCompletion => "fenced-completion",
        Defect::RetryClockReset => "retry-clock",
        Defect::NonatomicStageComplete => "no-resurrection",
        Defect::StaleSnapshotEnqueue => "no-resurrection",
        Defect::RepairHidesExpiredLease => "expired-lease-recovery",
    }
}

/// The built-in scenario of the system each defect came from.
pub fn home_scenario(defect: Defect) -> &'static str {
    match defect {
        Defect::UnboundedFinalize | Defect::InlineMaintenance | Defect::SingleShardSerialization => "a-index-builds",
        Defect::UnfencedCompletion
        | Defect::RetryClockReset
        | Defect::NonatomicStageComplete
        | Defect::StaleSnapshotEnqueue => "b-machines",
        Defect::RepairHidesExpiredLease => "c-workflows",
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FindResult {
    pub defect: String,
    pub scenario: String,
    pub invariant: String,
    /// Seeds needed from each starting seed (None: not found within the cap).
    pub seeds_needed: Vec<Option<u64>>,
    pub median: Option<u64>,
    pub found: usize,
    pub starts: usize,
    pub wall_seconds: f64,
}

/// From each of `starts` independent starting seeds, how many consecutive
/// seeds run before `defect`'s invariant is reported (at most `cap`).
pub fn time_to_find(defect: Defect, target: &Target, starts: u64, cap: u64, jobs: usize) -> FindResult {
    let invariant = invariant_of(defect);
    let started = std::time::Instant::now();
    let batch = (jobs as u64 * 4).max(4);
    let mut needed = Vec::new();
    for k in 0..starts {
        // Independent starting points far apart in the seed space.
        let start = 1_000_003 * (k + 1);
        let mut found = None;
        let mut offset = 0;
        while found.is_none() && offset < cap {
            let n = batch.min(cap - offset);
            let campaign = Campaign {
                targets: vec![target.clone()],
                seeds: SeedSpace::range(start + offset, Some(start + offset + n)),
                deadline: None,
                jobs,
                plan: PlanSource::Swarm,
                watchdog: DEFAULT_WATCHDOG,
                defects: Defects([defect].into_iter().collect()),
                sabotage: None,
            };
            let summary = fuzz::run(&campaign, &AtomicBool::new(false), |_| {});
            found = summary.failures.iter().filter(|f| f.invariant == invariant).map(|f| f.seed - start + 1).min();
            offset += n;
        }
        needed.push(found);
    }
    let mut sorted: Vec<u64> = needed.iter().flatten().copied().collect();
    sorted.sort_unstable();
    // Seeds that found nothing count as "more than the cap" for the median.
    let median = if sorted.len() * 2 > needed.len() {
        let mut all: Vec<u64> = needed.iter().map(|n| n.unwrap_or(u64::MAX)).collect();
        all.sort_unstable();
        Some(all[all.len() / 2])
    } else {
        None
    };
    FindResult {
        defect: defect.name().to_string(),
        scenario: target.arg.clone(),
        invariant: invariant.to_string(),
        found: sorted.len(),
        starts: needed.len(),
        seeds_needed: needed,
        median,
        wall_seconds: started.elapsed().as_secs_f64(),
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    pub scenario: String,
    pub jobs: usize,
    pub seeds: u64,
    pub repeats: usize,
    /// Seeds per second of each repeat, and their median.
    pub seeds_per_second: Vec<f64>,
    pub median_seeds_per_second: f64,
    pub median_events_per_second: f64,
}

/// Runs `seeds` seeds `repeats` times with `jobs` jobs; medians of the rates.
pub fn throughput(target: &Target, seeds: u64, repeats: usize, jobs: usize) -> Throughput {
    let mut rates = Vec::new();
    let mut event_rates = Vec::new();
    for _ in 0..repeats {
        let campaign = Campaign {
            targets: vec![target.clone()],
            seeds: SeedSpace::range(1, Some(1 + seeds)),
            deadline: None,
            jobs,
            plan: PlanSource::Swarm,
            watchdog: DEFAULT_WATCHDOG,
            defects: Defects::none(),
            sabotage: None,
        };
        let s = fuzz::run(&campaign, &AtomicBool::new(false), |_| {});
        rates.push(s.seeds_per_second);
        event_rates.push(s.events_per_second);
    }
    Throughput {
        scenario: target.arg.clone(),
        jobs,
        seeds,
        repeats,
        median_seeds_per_second: median(&rates),
        median_events_per_second: median(&event_rates),
        seeds_per_second: rates,
    }
}

pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        0.0
    } else {
        v[v.len() / 2]
    }
}
