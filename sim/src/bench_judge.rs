//! `bench judge`: what each part of judgement costs. The same histories are
//! judged part by part (the shared view alone, then the view with one
//! checker, then the view with the coverage points); a part's cost is its
//! time less the view's. What a speed change to the checkers is measured by.
//!
//! Wall-clock time (`std::time::Instant`) is read only here, outside every
//! world: no seed's run depends on it.

use crate::bench::median;
use crate::check::{self, Part};
use crate::fuzz::Target;
use crate::runner::{self, RunSpec, DEFAULT_WATCHDOG};
use leasesim_vocab::history::Record;
use serde::Serialize;
use std::time::Instant;

/// One part's cost, in microseconds per seed.
#[derive(Debug, Clone, Serialize)]
pub struct PartCost {
    pub part: String,
    pub us_per_seed: f64,
    /// Its share of the whole judgement (`check::check` over the same runs).
    pub share: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct JudgeProfile {
    pub scenario: String,
    pub seeds: u64,
    pub records_per_seed: f64,
    /// `check::check` as a campaign runs it, per seed.
    pub whole_us_per_seed: f64,
    /// The view alone (every part below includes it and has it taken off).
    pub view_us_per_seed: f64,
    /// Costliest first.
    pub parts: Vec<PartCost>,
}

/// What a part produced, summed so that none of its work is optimized away.
fn produced(run: check::PartRun) -> usize {
    run.violations.len() + run.reached.len() + run.tasks
}

/// Runs seeds 1..=seeds of `target` once, then times each part of their
/// judgement (the median of `repeats` passes over every history).
pub fn profile(target: &Target, seeds: u64, repeats: usize) -> JudgeProfile {
    assert!(seeds > 0 && repeats > 0, "at least one seed and one repeat");
    let runs: Vec<(check::Spec, Vec<Record>)> = (1..=seeds)
        .filter_map(|seed| {
            let spec = RunSpec::new(target.scenario.clone(), target.arg.clone(), seed);
            let result = runner::run_world(&spec, DEFAULT_WATCHDOG).ok()?;
            Some((spec.scenario.judge_spec(), result.history))
        })
        .collect();
    let per_seed = |us: f64| us / runs.len().max(1) as f64;
    let time = |f: &dyn Fn(&check::Spec, &[Record]) -> usize| {
        let mut passes = Vec::with_capacity(repeats);
        for _ in 0..repeats {
            let start = Instant::now();
            let produced: usize = runs.iter().map(|(spec, history)| f(spec, history)).sum();
            std::hint::black_box(produced);
            passes.push(start.elapsed().as_secs_f64() * 1e6);
        }
        per_seed(median(&passes))
    };
    let whole = time(&|spec, history| check::check(spec, history).violations.len());
    let view = time(&|spec, history| produced(check::run_part(spec, history, Part::View)));
    let caps = runs.first().map(|(spec, _)| spec.caps);
    let mut parts: Vec<PartCost> = check::checkers()
        .iter()
        .enumerate()
        .filter(|(_, c)| caps.is_some_and(|caps| c.applies(&caps)))
        .map(|(i, c)| (c.name().to_string(), Part::Checker(i)))
        .chain(std::iter::once(("coverage".to_string(), Part::Coverage)))
        .map(|(name, part)| {
            let us = (time(&|spec, history| produced(check::run_part(spec, history, part))) - view).max(0.0);
            PartCost { part: name, us_per_seed: us, share: us / whole.max(f64::MIN_POSITIVE) }
        })
        .collect();
    parts.sort_by(|a, b| b.us_per_seed.total_cmp(&a.us_per_seed));
    let records: usize = runs.iter().map(|(_, h)| h.len()).sum();
    JudgeProfile {
        scenario: target.arg.clone(),
        seeds: runs.len() as u64,
        records_per_seed: records as f64 / runs.len().max(1) as f64,
        whole_us_per_seed: whole,
        view_us_per_seed: view,
        parts,
    }
}
