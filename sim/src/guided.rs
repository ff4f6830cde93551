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
//!
//! Before anything reached a rare point, mutation has nothing to start
//! from. So a run also reports *aims* (`coverage`, `Aim`): faults its own
//! history suggests toward a point it did not reach, placed at the moment
//! that point needs (a pause just before a lease check that came in time, a
//! stall that ends at the millisecond a lease expired, a pause that keeps a
//! transaction open across its lease's expiry). A run with aims at points
//! the campaign never reached is kept too, and a mutation of it may add one
//! of its aims to its plan on its own seed: the history before the added
//! fault is the same, so the moment is still there.

use crate::faults::{self, FaultPlan};
use crate::fuzz::{Campaign, Progress, Summary, Tally};
use crate::runner::{PlanSource, RunSpec};
use crate::world::mix;
use leasesim_vocab::faults::Aim;
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
/// Kept runs with aims at one point the campaign never reached, at most.
const AIM_PARENTS: usize = 16;
/// The chance that a mutation of a run with open aims adds one of them.
const AIM_SHARE: f64 = 0.6;

/// A kept run: where it ran, its plan, and the points it reached.
#[derive(Debug, Clone)]
struct Parent {
    target: usize,
    seed: u64,
    plan: FaultPlan,
    points: Vec<String>,
    /// Faults its history suggested toward points it did not reach.
    aims: Vec<Aim>,
}

/// What a guided campaign did, beside its summary.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GuidedStats {
    pub fresh: u64,
    pub mutated: u64,
    pub pool: u64,
    /// Mutations that added an aim of their parent.
    #[serde(default)]
    pub aimed: u64,
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
        if let Some(plan) = self.aimed(&parent, rng, scenario) {
            self.stats.mutated += 1;
            self.stats.aimed += 1;
            return Some((self.spec(campaign, parent.target, parent.seed, PlanSource::Explicit(plan)), parent.target));
        }
        let plan = faults::mutate(&parent.plan, rng, scenario);
        let seed = if rng.gen_bool(0.7) { parent.seed } else { mix(parent.seed, GUIDED_STREAM, rng.gen()) };
        self.stats.mutated += 1;
        Some((self.spec(campaign, parent.target, seed, PlanSource::Explicit(plan)), parent.target))
    }

    /// The parent's plan with one of its aims at a point the campaign never
    /// reached, sometimes (`AIM_SHARE`), if it has one.
    fn aimed(&self, parent: &Parent, rng: &mut ChaCha8Rng, scenario: &crate::scenario::Scenario) -> Option<FaultPlan> {
        let open: Vec<&Aim> = parent.aims.iter().filter(|a| self.unreached(&a.point)).collect();
        if open.is_empty() || !rng.gen_bool(AIM_SHARE) {
            return None;
        }
        let aim = open[rng.gen_range(0..open.len())];
        faults::aim(&parent.plan, aim, rng, scenario)
    }

    fn unreached(&self, point: &str) -> bool {
        self.counts.get(point).copied().unwrap_or(0) == 0
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
        // An aim at a point nobody reached weighs as much as reaching a
        // point alone.
        let weight = |p: &Parent| -> f64 {
            let reached =
                p.points.iter().map(|pt| 1.0 / self.counts.get(pt).copied().unwrap_or(1).max(1) as f64).sum::<f64>();
            reached + p.aims.iter().filter(|a| self.unreached(&a.point)).count() as f64
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
    fn learn(&mut self, spec: &RunSpec, target: usize, points: &[String], aims: &[Aim]) {
        let rare = points.iter().any(|p| self.counts.get(p).copied().unwrap_or(0) < RARE_RUNS);
        for p in points {
            *self.counts.entry(p.clone()).or_default() += 1;
        }
        let holders = |point: &str| self.pool.iter().filter(|p| p.aims.iter().any(|a| a.point == point)).count();
        let aims: Vec<Aim> =
            aims.iter().filter(|a| self.unreached(&a.point) && holders(&a.point) < AIM_PARENTS).cloned().collect();
        if !rare && aims.is_empty() {
            return;
        }
        let plan = spec.fault_plan();
        self.pool.push(Parent { target, seed: spec.seed, plan, points: points.to_vec(), aims });
        if self.pool.len() > POOL_MAX {
            // Forget the kept run whose rarest point is now the most common.
            let counts = &self.counts;
            // A run kept for aims whose points were reached since is the first to go.
            let open_aims = |p: &Parent| p.aims.iter().any(|a| counts.get(&a.point).copied().unwrap_or(0) == 0);
            let rarity = |p: &Parent| {
                let rarest = p.points.iter().map(|pt| counts.get(pt).copied().unwrap_or(0)).min();
                if open_aims(p) {
                    0
                } else {
                    rarest.unwrap_or(u64::MAX)
                }
            };
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
            let aims = result.as_ref().map(|o| o.aims.clone()).unwrap_or_default();
            guide.learn(&spec, batch[i as usize].1, &points, &aims);
            tally.add(base + i, spec, result);
        }
        base += batch.len() as u64;
    }
    (tally.finish(&campaign.targets, started), guide.stats)
}

#[cfg(test)]
mod mutation_tests {
    use crate::faults::{aim, mutate};
    use leasesim_vocab::faults::{Aim, Anchor, FaultKind};
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// (The mutation lives in `leasesim-world`; it is tested here, where an
    /// engine is known to configure the scenario with.)
    #[test]
    fn mutated_plans_are_valid_and_deterministic() {
        let s = crate::scenario::resolve("swarm", &crate::engines()).expect("swarm loads").scenario;
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

    /// An aim adds one event with the aim's anchored edge where the aim put
    /// it, keeps every other event, and is refused outside the fault phase.
    #[test]
    fn aimed_plans_keep_their_anchor_and_the_rest_of_the_plan() {
        let s = crate::scenario::resolve("swarm", &crate::engines()).expect("swarm loads").scenario;
        let plan = crate::faults::draw(7, &s);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let pause = Aim {
            point: "lease-check-after-expiry".into(),
            kind: FaultKind::ProcessPause,
            proc: Some(2),
            at_ms: 50_000,
            for_ms: 10_000,
            anchor: Anchor::Start,
            rate_permille: None,
        };
        let stall = Aim {
            kind: FaultKind::StoreStall,
            proc: None,
            at_ms: 20_000,
            for_ms: 4_000,
            anchor: Anchor::End,
            ..pause.clone()
        };
        let both = Aim { anchor: Anchor::Both, ..pause.clone() };
        for _ in 0..50 {
            let paused = aim(&plan, &pause, &mut rng, &s).expect("inside the phase");
            paused.validate(s.topology.workers, s.phases.fault_phase_ms).expect("an aimed plan is valid");
            let added: Vec<_> = paused.events.iter().filter(|e| !plan.events.contains(e)).collect();
            assert_eq!(added.len(), 1, "one event added: {added:?}");
            let e = added[0];
            assert_eq!((e.kind, e.proc, e.at_ms), (FaultKind::ProcessPause, Some(2), 50_000));
            assert!((10_000..=20_000).contains(&e.for_ms), "the pause is stretched, never cut: {}", e.for_ms);
            let stalled = aim(&plan, &stall, &mut rng, &s).expect("inside the phase");
            let e = stalled.events.iter().find(|e| !plan.events.contains(e)).expect("one event added");
            assert_eq!((e.kind, e.at_ms + e.for_ms), (FaultKind::StoreStall, 24_000), "the stall ends at the aim");
            let held = aim(&plan, &both, &mut rng, &s).expect("inside the phase");
            let e = held.events.iter().find(|e| !plan.events.contains(e)).expect("one event added");
            assert_eq!((e.kind, e.at_ms), (FaultKind::ProcessPause, 50_000), "the pause starts at the aim");
            assert!((10_000..11_000).contains(&e.for_ms), "and ends within a tenth after it: {}", e.for_ms);
        }
        let late = Aim { at_ms: s.phases.fault_phase_ms, ..pause };
        assert_eq!(aim(&plan, &late, &mut rng, &s), None, "past the fault phase");
    }
}
