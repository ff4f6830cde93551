//! The project's own benchmarks: throughput (seeds per second) and time to
//! find each real defect (seeds the fuzzer needs before the invariant that
//! the real bug broke is reported).

use crate::fuzz::{self, Campaign, Progress, SeedSpace, Target};
use crate::runner::{PlanSource, DEFAULT_WATCHDOG};
use leasesim::defects::Defect;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

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
        Defect::UncancelledMaintenance => "materialization",
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
        Defect::UncancelledMaintenance => "a-index-builds",
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FindResult {
    pub defect: String,
    pub scenario: String,
    pub invariant: String,
    /// `plain` or `guided`.
    pub mode: String,
    /// Seeds needed from each starting seed (None: not found within the cap).
    pub seeds_needed: Vec<Option<u64>>,
    pub median: Option<u64>,
    pub found: usize,
    pub starts: usize,
    pub wall_seconds: f64,
}

/// How a measured campaign picks its runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Plain,
    Guided,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain",
            Mode::Guided => "guided",
        }
    }
}

/// The `k`-th independent starting seed (far apart in the seed space).
fn start_of(k: u64) -> u64 {
    1_000_003 * (k + 1)
}

/// A measured campaign: `seeds` seeds from `start` over `targets`, faults
/// drawn per seed, no time budget.
pub fn campaign(targets: &[Target], start: u64, seeds: u64, jobs: usize, defects: Vec<String>) -> Campaign {
    Campaign {
        targets: targets.to_vec(),
        seeds: SeedSpace::range(start, Some(start + seeds)),
        deadline: None,
        jobs,
        plan: PlanSource::Swarm,
        watchdog: DEFAULT_WATCHDOG,
        defects,
        sabotage: None,
    }
}

/// Runs a campaign of at most `seeds` seeds from `start` over `targets` in
/// `mode`, handing every run to `seen` until it answers "stop".
fn campaign_from(
    targets: &[Target],
    start: u64,
    seeds: u64,
    jobs: usize,
    defects: Vec<String>,
    mode: Mode,
    mut seen: impl FnMut(&Progress<'_>) -> bool,
) {
    let campaign = campaign(targets, start, seeds, jobs, defects);
    let stop = AtomicBool::new(false);
    let on_progress = |p: Progress<'_>| {
        if seen(&p) {
            stop.store(true, Ordering::Relaxed);
        }
    };
    match mode {
        Mode::Plain => {
            fuzz::run(&campaign, &stop, on_progress);
        }
        Mode::Guided => {
            crate::guided::run(&campaign, &stop, on_progress);
        }
    }
}

/// The median of `needed`, counting a miss as more than any hit; `None`
/// when half or more missed.
fn median_needed(needed: &[Option<u64>]) -> Option<u64> {
    let hits = needed.iter().flatten().count();
    if hits * 2 <= needed.len() {
        return None;
    }
    let mut all: Vec<u64> = needed.iter().map(|n| n.unwrap_or(u64::MAX)).collect();
    all.sort_unstable();
    Some(all[all.len() / 2])
}

/// From each of `starts` independent starting seeds, how many runs the
/// fuzzer needs before `defect`'s invariant is reported (at most `cap`).
pub fn time_to_find(defect: Defect, target: &Target, starts: u64, cap: u64, jobs: usize, mode: Mode) -> FindResult {
    let invariant = invariant_of(defect);
    let started = std::time::Instant::now();
    let mut needed = Vec::new();
    for k in 0..starts {
        let mut first: Option<u64> = None;
        campaign_from(
            std::slice::from_ref(target),
            start_of(k),
            cap,
            jobs,
            vec![defect.name().to_string()],
            mode,
            |p| {
                let hit = matches!(p.last, Ok(o) if o.violations.iter().any(|v| v.invariant == invariant));
                if hit {
                    first = Some(first.map_or(p.index + 1, |f| f.min(p.index + 1)));
                }
                hit
            },
        );
        needed.push(first);
    }
    FindResult {
        defect: defect.name().to_string(),
        scenario: target.arg.clone(),
        invariant: invariant.to_string(),
        mode: mode.name().to_string(),
        found: needed.iter().flatten().count(),
        starts: needed.len(),
        median: median_needed(&needed),
        seeds_needed: needed,
        wall_seconds: started.elapsed().as_secs_f64(),
    }
}

/// The coverage points a plain campaign of `seeds` seeds reached least
/// often (but at least once), rarest first, with their counts.
pub fn rarest_points(targets: &[Target], seeds: u64, jobs: usize, how_many: usize) -> Vec<(String, u64)> {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    campaign_from(targets, 1, seeds, jobs, Vec::new(), Mode::Plain, |p| {
        if let Ok(o) = p.last {
            for point in &o.coverage {
                *counts.entry(point.clone()).or_default() += 1;
            }
        }
        false
    });
    let mut ranked: Vec<(String, u64)> = counts.into_iter().collect();
    ranked.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
    ranked.truncate(how_many);
    ranked
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoverResult {
    pub point: String,
    pub mode: String,
    /// Runs needed from each start before the point was first reached.
    pub runs_needed: Vec<Option<u64>>,
    pub median: Option<u64>,
    /// Runs that reached the point, from each start (over the whole budget).
    pub runs_reaching: Vec<u64>,
    pub median_reaching: u64,
}

/// From each of `starts` independent starting seeds, how many runs a
/// campaign in `mode` needs before it first reaches each of `points` (at
/// most `cap` seeds over all targets).
pub fn time_to_cover(
    targets: &[Target],
    points: &[String],
    starts: u64,
    cap: u64,
    jobs: usize,
    mode: Mode,
) -> Vec<CoverResult> {
    let mut needed: Vec<Vec<Option<u64>>> = vec![Vec::new(); points.len()];
    let mut reaching: Vec<Vec<u64>> = vec![Vec::new(); points.len()];
    for k in 0..starts {
        let mut first: Vec<Option<u64>> = vec![None; points.len()];
        let mut hits = vec![0; points.len()];
        campaign_from(targets, start_of(k), cap, jobs, Vec::new(), mode, |p| {
            if let Ok(o) = p.last {
                for (i, point) in points.iter().enumerate() {
                    if o.coverage.contains(point) {
                        first[i] = Some(first[i].map_or(p.index + 1, |f| f.min(p.index + 1)));
                        hits[i] += 1;
                    }
                }
            }
            false
        });
        for (i, f) in first.into_iter().enumerate() {
            needed[i].push(f);
            reaching[i].push(hits[i]);
        }
    }
    points
        .iter()
        .zip(needed.into_iter().zip(reaching))
        .map(|(point, (runs, hits))| {
            let mut sorted = hits.clone();
            sorted.sort_unstable();
            CoverResult {
                point: point.clone(),
                mode: mode.name().to_string(),
                median: median_needed(&runs),
                runs_needed: runs,
                median_reaching: sorted.get(sorted.len() / 2).copied().unwrap_or(0),
                runs_reaching: hits,
            }
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    /// What `--scenario` said: one scenario, or a group (`all`,
    /// `graphile-all`) whose every scenario runs each seed.
    pub scenario: String,
    /// The scenarios run (one for a single scenario).
    #[serde(default)]
    pub scenarios: Vec<String>,
    pub jobs: usize,
    pub seeds: u64,
    pub repeats: usize,
    /// Runs (seeds x scenarios) per second of each repeat, and their median.
    /// Named "seeds" as it always was: for one scenario the two agree.
    pub seeds_per_second: Vec<f64>,
    pub median_seeds_per_second: f64,
    pub median_events_per_second: f64,
    /// Simulated seconds per wall-clock second of each repeat.
    #[serde(default)]
    pub sim_seconds_per_wall_second: Vec<f64>,
    #[serde(default)]
    pub median_sim_seconds_per_wall_second: f64,
    /// Recorded events per run (the same every repeat: the runs are).
    #[serde(default)]
    pub events_per_run: f64,
    /// Wall-clock microseconds per recorded event (at `jobs` jobs: per
    /// event of the whole machine), the cost of a world's events whatever
    /// the engine.
    #[serde(default)]
    pub median_us_per_event: f64,
}

/// Runs `seeds` seeds of every scenario of `targets` (one campaign, as
/// `fuzz --scenario` runs them) `repeats` times with `jobs` jobs; medians
/// of the rates.
pub fn throughput(arg: &str, targets: &[Target], seeds: u64, repeats: usize, jobs: usize) -> Throughput {
    let (mut rates, mut event_rates, mut sim_rates) = (Vec::new(), Vec::new(), Vec::new());
    let mut events_per_run = 0.0;
    for _ in 0..repeats {
        let campaign = campaign(targets, 1, seeds, jobs, Vec::new());
        let s = fuzz::run(&campaign, &AtomicBool::new(false), |_| {});
        rates.push(s.seeds_per_second);
        event_rates.push(s.events_per_second);
        sim_rates.push(s.sim_seconds / s.wall_seconds.max(1e-9));
        // `seeds` counts runs (seed x scenario).
        events_per_run = s.events as f64 / s.seeds.max(1) as f64;
    }
    let median_events_per_second = median(&event_rates);
    Throughput {
        scenario: arg.to_string(),
        scenarios: targets.iter().map(|t| t.scenario.name.clone()).collect(),
        jobs,
        seeds,
        repeats,
        median_seeds_per_second: median(&rates),
        median_events_per_second,
        seeds_per_second: rates,
        median_sim_seconds_per_wall_second: median(&sim_rates),
        sim_seconds_per_wall_second: sim_rates,
        events_per_run,
        median_us_per_event: 1e6 / median_events_per_second.max(f64::MIN_POSITIVE),
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
