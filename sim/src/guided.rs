//! Guided campaigns (`fuzz --guided`): beside fresh swarm seeds, keep the
//! runs that reached rare coverage points and try their neighbours.
//!
//! The campaign runs in batches of [`BATCH`] runs. Each run of a batch is
//! either a fresh seed of the seed space (its plan drawn from the seed, as in
//! a plain campaign) or a mutation of a kept run: its fault plan changed a
//! little (`faults::mutate`), on its own seed or on a new one (another
//! workload and other task bodies). Parents are picked for the rarest point
//! any kept run reached, so more runs go to what the campaign reached least.
//! After each batch the results are folded in run order and the pool of kept
//! runs is updated; every choice comes from one seeded RNG, so a guided
//! campaign is as deterministic as a plain one, whatever the number of jobs.
//! Every run is still (scenario, seed, explicit plan): a failure is saved
//! with its plan and replays on its own.

use crate::faults::{self, FaultPlan};
use crate::fuzz::{Campaign, Progress, Summary, Tally};
use crate::runner::{PlanSource, RunSpec};
use crate::world::mix;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Runs per batch (fixed, so results do not depend on the number of jobs;
/// small, so that what a batch reached steers the next one soon).
pub const BATCH: u64 = 16;
/// A run joins the pool when it reached a point fewer runs than this reached.
const RARE_RUNS: u64 = 8;
/// The share of runs that are fresh seeds once the pool has parents.
const FRESH_SHARE: f64 = 0.5;
/// At most this many runs are kept.
const POOL_MAX: usize = 512;
/// The stream of the campaign's own choices ("guided").
const GUIDED_STREAM: u64 = 0x6775_6964_6564;

/// A kept run: where it ran, its plan, and the points it reached.
#[derive(Debug, Clone)]
struct Parent {
    target: usize,
    seed: u64,
    plan: FaultPlan,
    points: Vec<String>,
}

/// What a guided campaign did, beside its summary.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GuidedStats {
    pub fresh: u64,
    pub mutated: u64,
    pub pool: u64,
}

#[derive(Default)]
struct Guide {
    pool: Vec<Parent>,
    /// Runs that reached each point so far.
    counts: BTreeMap<String, u64>,
    /// Fresh seeds taken from the seed space so far.
    fresh_taken: u64,
    stats: GuidedStats,
}

impl Guide {
    /// The next run: a fresh seed, or a mutation of a kept run.
    fn next(&mut self, campaign: &Campaign, rng: &mut ChaCha8Rng) -> Option<(RunSpec, usize)> {
        let n = campaign.targets.len() as u64;
        if self.pool.is_empty() || rng.gen_bool(FRESH_SHARE) {
            let index = self.fresh_taken;
            self.fresh_taken += 1;
            let seed = campaign.seeds.nth(index / n)?;
            let target = (index % n) as usize;
            self.stats.fresh += 1;
            return Some((self.spec(campaign, target, seed, PlanSource::Swarm), target));
        }
        let parent = self.pick(rng).clone();
        let scenario = &campaign.targets[parent.target].scenario;
        let plan = faults::mutate(&parent.plan, rng, scenario);
        let seed = if rng.gen_bool(0.7) { parent.seed } else { mix(parent.seed, GUIDED_STREAM, rng.gen()) };
        self.stats.mutated += 1;
        Some((self.spec(campaign, parent.target, seed, PlanSource::Explicit(plan)), parent.target))
    }

    fn spec(&self, campaign: &Campaign, target: usize, seed: u64, plan: PlanSource) -> RunSpec {
        let t = &campaign.targets[target];
        RunSpec::new(t.scenario.clone(), t.arg.clone(), seed).with_plan(plan).with_defects(campaign.defects.iter())
    }

    /// A parent, drawn with a weight that grows as the points it reached are
    /// rare: a run that alone reached something gets the most tries, but
    /// every kept run gets some (a rare point near a common one is found by
    /// trying the common one's neighbours too).
    fn pick(&self, rng: &mut ChaCha8Rng) -> &Parent {
        let weight = |p: &Parent| -> f64 {
            p.points.iter().map(|pt| 1.0 / self.counts.get(pt).copied().unwrap_or(1).max(1) as f64).sum::<f64>()
        };
        let weights: Vec<f64> = self.pool.iter().map(weight).collect();
        let total: f64 = weights.iter().sum();
        let mut at = rng.gen_range(0.0..total.max(f64::MIN_POSITIVE));
        for (parent, w) in self.pool.iter().zip(&weights) {
            if at < *w {
                return parent;
            }
            at -= w;
        }
        self.pool.last().expect("a parent is picked from a pool that is not empty")
    }

    /// Learns from one finished run (in run order).
    fn learn(&mut self, spec: &RunSpec, target: usize, points: &[String]) {
        let rare = points.iter().any(|p| self.counts.get(p).copied().unwrap_or(0) < RARE_RUNS);
        for p in points {
            *self.counts.entry(p.clone()).or_default() += 1;
        }
        if !rare {
            return;
        }
        self.pool.push(Parent { target, seed: spec.seed, plan: spec.fault_plan(), points: points.to_vec() });
        if self.pool.len() > POOL_MAX {
            // Forget the kept run whose rarest point is now the most common.
            let counts = &self.counts;
            let rarity = |p: &Parent| p.points.iter().map(|pt| counts.get(pt).copied().unwrap_or(0)).min().unwrap_or(0);
            let (worst, _) = self.pool.iter().enumerate().max_by_key(|(i, p)| (rarity(p), *i)).expect("a full pool");
            self.pool.remove(worst);
        }
        self.stats.pool = self.pool.len() as u64;
    }
}

/// Runs a guided campaign; `stop` ends it early (the batch in flight
/// finishes and counts).
pub fn run(
    campaign: &Campaign,
    stop: &AtomicBool,
    mut on_progress: impl FnMut(Progress<'_>),
) -> (Summary, GuidedStats) {
    let started = Instant::now();
    let total = campaign.total_runs();
    let mut rng = ChaCha8Rng::seed_from_u64(mix(campaign.seeds.start, GUIDED_STREAM, campaign.seeds.shard_k));
    let mut guide = Guide::default();
    let mut tally = Tally::default();
    let mut base = 0;
    loop {
        let out_of_time = stop.load(Ordering::Relaxed) || campaign.deadline.is_some_and(|d| Instant::now() >= d);
        let left = total.map_or(BATCH, |t| t.saturating_sub(base).min(BATCH));
        if out_of_time || left == 0 {
            break;
        }
        let batch: Vec<(RunSpec, usize)> = (0..left).map_while(|_| guide.next(campaign, &mut rng)).collect();
        if batch.is_empty() {
            break;
        }
        let mut results: BTreeMap<u64, (RunSpec, _)> = BTreeMap::new();
        crate::fuzz::run_specs(
            |i| batch.get(i as usize).map(|(spec, _)| spec.clone()),
            campaign,
            |i, spec, result| {
                let failed_here = results.values().filter(|(_, r)| !crate::fuzz::passed(r)).count() as u64;
                let failures = tally.failures() + failed_here + !crate::fuzz::passed(&result) as u64;
                let done = tally.runs() + results.len() as u64 + 1;
                on_progress(Progress { index: base + i, done, total, failures, last: &result, spec: &spec });
                results.insert(i, (spec, result));
            },
        );
        for (i, (spec, result)) in results {
            let points = result.as_ref().map(|o| o.coverage.clone()).unwrap_or_default();
            guide.learn(&spec, batch[i as usize].1, &points);
            tally.add(base + i, spec, result);
        }
        base += batch.len() as u64;
    }
    (tally.finish(&campaign.targets, started), guide.stats)
}

#[cfg(test)]
mod mutation_tests {
    use crate::faults::mutate;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// (The mutation lives in `leasesim-world`; it is tested here, where an
    /// engine is known to configure the scenario with.)
    #[test]
    fn mutated_plans_are_valid_and_deterministic() {
        let s = crate::scenario::resolve("swarm").expect("swarm loads").scenario;
        let mut plan = crate::faults::draw(7, &s);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut again = ChaCha8Rng::seed_from_u64(1);
        for _ in 0..500 {
            let next = mutate(&plan, &mut rng, &s);
            assert_eq!(next, mutate(&plan, &mut again, &s), "same RNG, same mutation");
            next.validate(s.topology.workers, s.phases.fault_phase_ms).expect("a mutated plan is valid");
            plan = next;
        }
    }
}
