//! Fuzz campaigns: many seeds, in parallel, each isolated as in `runner`.
//!
//! Results are folded in seed order into one summary, so the summary of a
//! campaign does not depend on how many jobs ran it or in which order seeds
//! finished.
//!
//! `std::time::Instant` (the wall clock) is read here and in `guided` only
//! outside every world: the summary's wall-clock figures and the `--time`
//! budget (`Campaign::deadline`). No seed ever sees it.

use crate::outcome::Outcome;
use crate::runner::{self, PlanSource, RunError, RunSpec};
use crate::scenario::Scenario;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// A scenario as the campaign runs it, with the name it was given by.
#[derive(Debug, Clone)]
pub struct Target {
    pub arg: String,
    pub scenario: Arc<Scenario>,
}

impl Target {
    /// A built-in scenario by name, or a scenario file by path, its engine
    /// one of `engines`.
    pub fn resolve(name_or_path: &str, engines: &crate::Engines) -> Result<Target, String> {
        let loaded = crate::scenario::resolve(name_or_path, engines)?;
        Ok(Target { arg: name_or_path.to_string(), scenario: Arc::new(loaded.scenario) })
    }
}

/// Seeds run at once unless told otherwise: one per core.
pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// The seeds a campaign runs: `start..end` (unbounded without an end),
/// keeping only those of shard `shard_k` of `shard_n` (seed % n == k - 1), so
/// that n machines with the same range cover each seed exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeedSpace {
    pub start: u64,
    pub end: Option<u64>,
    pub shard_k: u64,
    pub shard_n: u64,
}

impl SeedSpace {
    pub fn range(start: u64, end: Option<u64>) -> Self {
        SeedSpace { start, end, shard_k: 1, shard_n: 1 }
    }

    /// The `i`-th seed of this shard, if it is inside the range.
    pub fn nth(&self, i: u64) -> Option<u64> {
        debug_assert!(self.shard_k >= 1 && self.shard_k <= self.shard_n);
        let n = self.shard_n;
        let want = self.shard_k - 1;
        // In u128: `want + n` overflows u64 for a shard count near u64::MAX.
        let offset = (u128::from(want) + u128::from(n) - u128::from(self.start % n)) % u128::from(n);
        let first = self.start.checked_add(u64::try_from(offset).expect("offset < n"))?;
        let seed = first.checked_add(i.checked_mul(n)?)?;
        match self.end {
            Some(end) if seed >= end => None,
            _ => Some(seed),
        }
    }

    /// How many seeds this shard has (None: unbounded).
    pub fn count(&self) -> Option<u64> {
        let end = self.end?;
        let mut lo = 0;
        let mut hi = end.saturating_sub(self.start) + 1;
        // The smallest i with no seed: binary search keeps this exact and cheap.
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.nth(mid).is_some() {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Some(lo)
    }
}

#[derive(Debug, Clone)]
pub struct Campaign {
    pub targets: Vec<Target>,
    /// Seeds to run, in order (each against every target).
    pub seeds: SeedSpace,
    /// Stop taking new seeds at this wall-clock instant.
    pub deadline: Option<Instant>,
    pub jobs: usize,
    pub plan: PlanSource,
    pub watchdog: Duration,
    /// The engine's defect switches to turn on (names; none: the correct engine).
    pub defects: Vec<String>,
    /// Breaks chosen seeds on purpose (tests of the campaign only).
    pub sabotage: Option<fn(u64) -> Option<crate::world::Sabotage>>,
}

/// One failing seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub scenario: String,
    pub seed: u64,
    /// The violated invariant, or `panic` / `hang` / `resource-limit` when
    /// the seed did not finish (`RunError::kind`).
    pub invariant: String,
    pub message: String,
    pub at_ms: Option<u64>,
    pub replay: String,
}

impl Failure {
    /// The line every campaign prints for this failure (`cargo sim fuzz`,
    /// the fuzz test, [`crate::api::Report`]): scenario, seed, invariant,
    /// message and the command that replays it.
    pub fn line(&self) -> String {
        format!(
            "FAIL {} seed {}: [{}] {}  (replay: {})",
            self.scenario, self.seed, self.invariant, self.message, self.replay
        )
    }
}

/// The line printed once a failure is saved as the corpus entry `path`.
pub fn saved_line(path: &std::path::Path) -> String {
    format!("saved {} (replay: cargo sim replay {})", path.display(), path.display())
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Runs (seed x scenario) completed.
    pub seeds: u64,
    /// The distinct seeds that ran, sorted (shards of one range partition it).
    pub seeds_run: Vec<u64>,
    pub failures: Vec<Failure>,
    pub fault_counts: BTreeMap<String, u64>,
    pub checks: BTreeMap<String, u64>,
    /// Losses the checkers excused, per invariant, over the campaign: wasted
    /// executions (outcomes) and callbacks a fault explains.
    #[serde(default)]
    pub excused: BTreeMap<String, u64>,
    pub events: u64,
    pub sim_seconds: f64,
    pub wall_seconds: f64,
    pub seeds_per_second: f64,
    pub events_per_second: f64,
    /// The campaign process's peak resident set size, in MiB (0: unknown).
    #[serde(default)]
    pub peak_rss_mib: f64,
    /// Invariants no run of the campaign evaluated even once.
    pub never_evaluated: Vec<String>,
    /// Per coverage point: how many runs reached it (every point present).
    pub coverage: BTreeMap<String, u64>,
    /// Per coverage point reached: the first seed (in campaign order) that did.
    pub coverage_first_seed: BTreeMap<String, u64>,
    /// The coverage points no run reached (of those some run's engine can).
    pub never_reached: Vec<String>,
    /// Invariants and coverage points that applied to no run's engine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_applicable: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub coverage_not_applicable: Vec<String>,
    /// Per scenario: required coverage points it never reached (judged only
    /// once the scenario ran its `min_seeds`).
    pub coverage_missing: BTreeMap<String, Vec<String>>,
    /// Scenario -> (its runs, its `min_seeds`): required coverage not
    /// judged, because this campaign ran too few of its seeds.
    #[serde(default)]
    pub coverage_not_judged: BTreeMap<String, (u64, u64)>,
    /// What a guided campaign did (`fuzz --guided`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guided: Option<crate::guided::GuidedStats>,
    /// One hash of every run's scenario, seed and trace hash, in campaign
    /// order: two builds (or machines) that ran the same campaign the same
    /// way print the same digest, whatever their `--jobs`.
    #[serde(default)]
    pub trace_digest: String,
    /// Runs (seed x scenario) completed: what `seeds` has always counted,
    /// under its right name.
    #[serde(default)]
    pub runs: u64,
    /// Stopped by Ctrl-C or SIGTERM before its seeds or its time ran out:
    /// the summary covers the runs done (`cargo sim fuzz`).
    #[serde(default)]
    pub interrupted: bool,
}

/// What a finished run reports to whoever watches the campaign.
pub struct Progress<'a> {
    /// This run's place in the campaign (0-based; the order results fold in).
    pub index: u64,
    pub done: u64,
    /// Runs in the campaign (None: bounded only by time).
    pub total: Option<u64>,
    pub failures: u64,
    pub last: &'a Result<Outcome, RunError>,
    pub spec: &'a RunSpec,
}

impl Campaign {
    pub fn total_runs(&self) -> Option<u64> {
        self.seeds.count().map(|n| n * self.targets.len() as u64)
    }

    fn spec(&self, index: u64) -> Option<RunSpec> {
        let n = self.targets.len() as u64;
        let target = &self.targets[(index % n) as usize];
        let seed = self.seeds.nth(index / n)?;
        let sabotage = self.sabotage.and_then(|choose| choose(seed));
        Some(
            RunSpec::new(target.scenario.clone(), target.arg.clone(), seed)
                .with_plan(self.plan.clone())
                .with_defects(self.defects.iter())
                .with_sabotage(sabotage),
        )
    }
}

/// Runs the campaign; `stop` ends it early (runs in flight finish and count).
pub fn run(campaign: &Campaign, stop: &AtomicBool, mut on_progress: impl FnMut(Progress<'_>)) -> Summary {
    let started = Instant::now();
    let total = campaign.total_runs();
    let mut tally = Tally::default();
    let deadline = campaign.deadline;
    let out_of_time = || stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d);
    run_specs(
        |index| if out_of_time() { None } else { campaign.spec(index) },
        campaign,
        |index, spec, result| {
            let failures = tally.failures() + failed(&result) as u64;
            on_progress(Progress { index, done: tally.runs() + 1, total, failures, last: &result, spec: &spec });
            tally.add(index, spec, result);
        },
    );
    tally.finish(&campaign.targets, started)
}

fn failed(result: &Result<Outcome, RunError>) -> bool {
    !passed(result)
}

/// Did the run finish without a violation?
pub fn passed(result: &Result<Outcome, RunError>) -> bool {
    matches!(result, Ok(o) if o.violations.is_empty())
}

/// Runs the specs `spec(0)`, `spec(1)`, ... (until it answers `None`) on the
/// campaign's jobs, each seed on a fresh thread; hands each result to
/// `done` as it comes (in any order; the index says where it belongs).
pub fn run_specs(
    spec: impl Fn(u64) -> Option<RunSpec> + Sync,
    campaign: &Campaign,
    mut done: impl FnMut(u64, RunSpec, Result<Outcome, RunError>),
) {
    let next = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel::<(u64, RunSpec, Result<Outcome, RunError>)>();
    let spec = &spec;
    std::thread::scope(|scope| {
        for _ in 0..campaign.jobs.max(1) {
            let (tx, next) = (tx.clone(), next.clone());
            scope.spawn(move || loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(spec) = spec(index) else { return };
                let result = runner::run_seed(&spec, campaign.watchdog);
                if tx.send((index, spec, result)).is_err() {
                    return;
                }
            });
        }
        drop(tx);
        for (index, spec, result) in rx {
            done(index, spec, result);
        }
    });
}

/// Folds results into a summary in index order, whatever order they come
/// in, and keeps only those that came early: a campaign of any length holds
/// a bounded number of outcomes at once.
#[derive(Default)]
pub struct Tally {
    summary: Summary,
    /// Per scenario: runs folded and the coverage points they reached.
    per_scenario: BTreeMap<String, (u64, BTreeSet<String>)>,
    /// The next index to fold, and results that came before it.
    next: u64,
    early: BTreeMap<u64, (RunSpec, Result<Outcome, RunError>)>,
    failures: u64,
    runs: u64,
    /// The trace digest of the runs folded so far.
    digest: crate::history::Fnv64,
    /// What applied to no run folded so far (`None`: no run yet).
    not_applicable: Option<(BTreeSet<String>, BTreeSet<String>)>,
}

impl Tally {
    pub fn runs(&self) -> u64 {
        self.runs
    }

    pub fn failures(&self) -> u64 {
        self.failures
    }

    pub fn add(&mut self, index: u64, spec: RunSpec, result: Result<Outcome, RunError>) {
        self.runs += 1;
        self.failures += failed(&result) as u64;
        self.early.insert(index, (spec, result));
        while let Some((spec, result)) = self.early.remove(&self.next) {
            self.fold(&spec, &result);
            self.next += 1;
        }
    }

    /// Skips an index that will never come (a run not started).
    pub fn skip_to(&mut self, index: u64) {
        while self.next < index && !self.early.contains_key(&self.next) {
            self.next += 1;
        }
    }

    fn fold(&mut self, spec: &RunSpec, result: &Result<Outcome, RunError>) {
        let summary = &mut self.summary;
        if summary.coverage.is_empty() {
            summary.coverage = crate::check::coverage::POINTS.iter().map(|p| (p.name.to_string(), 0)).collect();
        }
        if let Ok(o) = result {
            let seen = self.per_scenario.entry(spec.scenario.name.clone()).or_default();
            seen.0 += 1;
            seen.1.extend(o.coverage.iter().cloned());
            let run: (BTreeSet<String>, BTreeSet<String>) =
                (o.not_applicable.iter().cloned().collect(), o.coverage_not_applicable.iter().cloned().collect());
            self.not_applicable = Some(match self.not_applicable.take() {
                None => run,
                Some((inv, cov)) => (&inv & &run.0, &cov & &run.1),
            });
        }
        summary.seeds += 1;
        let trace = result.as_ref().map_or("no trace", |o| o.trace_hash.as_str());
        (spec.scenario.name.as_str(), spec.seed, trace).hash(&mut self.digest);
        if summary.seeds_run.last() != Some(&spec.seed) {
            summary.seeds_run.push(spec.seed);
        }
        fold(summary, spec, result);
    }

    /// The summary, once every result is in.
    pub fn finish(mut self, targets: &[Target], started: Instant) -> Summary {
        let rest: Vec<_> = std::mem::take(&mut self.early).into_values().collect();
        for (spec, result) in &rest {
            self.fold(spec, result);
        }
        let mut summary = self.summary;
        if summary.coverage.is_empty() {
            summary.coverage = crate::check::coverage::POINTS.iter().map(|p| (p.name.to_string(), 0)).collect();
        }
        summary.seeds_run.sort_unstable();
        summary.seeds_run.dedup();
        let (na_inv, na_cov) = self.not_applicable.clone().unwrap_or_default();
        summary.not_applicable = na_inv.iter().cloned().collect();
        summary.coverage_not_applicable = na_cov.iter().cloned().collect();
        summary.never_reached =
            summary.coverage.iter().filter(|(k, n)| **n == 0 && !na_cov.contains(*k)).map(|(k, _)| k.clone()).collect();
        for target in targets {
            let need = &target.scenario.coverage;
            let (runs, seen) = self.per_scenario.get(&target.scenario.name).cloned().unwrap_or_default();
            let missing: Vec<String> = need.require.iter().filter(|p| !seen.contains(*p)).cloned().collect();
            if need.require.is_empty() {
                continue;
            }
            if runs < need.min_seeds {
                // Too few runs of it (a shard, a time budget) to judge: said,
                // not failed.
                summary.coverage_not_judged.insert(target.scenario.name.clone(), (runs, need.min_seeds));
            } else if !missing.is_empty() {
                summary.coverage_missing.insert(target.scenario.name.clone(), missing);
            }
        }
        summary.never_evaluated = crate::check::invariants()
            .into_iter()
            .filter(|(name, _)| summary.checks.get(*name).copied().unwrap_or(0) == 0 && !na_inv.contains(*name))
            .map(|(name, _)| name.to_string())
            .collect();
        summary.trace_digest = format!("{:016x}", self.digest.finish());
        summary.wall_seconds = started.elapsed().as_secs_f64();
        summary.peak_rss_mib = crate::mem::peak_rss_bytes().map_or(0.0, crate::mem::mib);
        if summary.wall_seconds > 0.0 {
            summary.seeds_per_second = summary.seeds as f64 / summary.wall_seconds;
            summary.events_per_second = summary.events as f64 / summary.wall_seconds;
        }
        summary
    }
}

fn fold(summary: &mut Summary, spec: &RunSpec, result: &Result<Outcome, RunError>) {
    if let Ok(o) = result {
        summary.events += o.events as u64;
        summary.sim_seconds += o.sim_seconds;
        for (k, n) in &o.fault_counts {
            *summary.fault_counts.entry(k.clone()).or_default() += n;
        }
        for (k, n) in &o.checks {
            *summary.checks.entry(k.clone()).or_default() += n;
        }
        for (k, n) in &o.excused {
            *summary.excused.entry(k.clone()).or_default() += n;
        }
        for point in &o.coverage {
            *summary.coverage.entry(point.clone()).or_default() += 1;
            summary.coverage_first_seed.entry(point.clone()).or_insert(o.seed);
        }
    }
    summary.failures.extend(failure_of(spec, result));
}

/// The failure a run is, if any: one per seed, named by its first violation,
/// or by its kind when the seed did not finish.
pub fn failure_of(spec: &RunSpec, result: &Result<Outcome, RunError>) -> Option<Failure> {
    match result {
        Ok(o) => o.violations.first().map(|v| Failure {
            scenario: o.scenario.clone(),
            seed: o.seed,
            invariant: v.invariant.clone(),
            message: v.message.clone(),
            at_ms: Some(v.at_ms),
            replay: o.replay.clone(),
        }),
        Err(e) => Some(Failure {
            scenario: spec.scenario.name.clone(),
            seed: spec.seed,
            invariant: e.kind().to_string(),
            message: e.to_string(),
            at_ms: None,
            replay: spec.replay_command(),
        }),
    }
}
