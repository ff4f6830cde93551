//! Shrinking: from a failing run, find a smaller one that violates the same
//! invariant: fewer fault events, weaker faults (a hang becomes a delay,
//! windows and rates shrink), fewer tasks and processes, a shorter run.
//!
//! Greedy and deterministic: each step proposes smaller candidates in a fixed
//! order and keeps the first that still fails; it stops when a whole round
//! finds nothing smaller, or the run budget is spent.

use crate::faults::{FaultEvent, FaultKind, FaultPlan, UNTIL_HEAL};
use crate::runner::{self, PlanSource, RunSpec};
use crate::scenario::Scenario;
use std::sync::Arc;

/// A world and its fault plan: what shrinking makes smaller.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    pub scenario: Scenario,
    pub plan: FaultPlan,
}

/// The size of a case, as reported before and after.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Size {
    pub fault_events: usize,
    pub tasks: u64,
    pub processes: u32,
    pub sim_seconds: u64,
}

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} fault events, {} tasks, {} processes, {} simulated s",
            self.fault_events, self.tasks, self.processes, self.sim_seconds
        )
    }
}

impl Case {
    /// Tasks the workload asks for (pipelines count their stages).
    pub fn tasks(&self) -> u64 {
        let w = &self.scenario.workload;
        (w.index_builds + w.authz_materializations + w.jobs) as u64
            + w.pipelines as u64 * w.stages_per_pipeline as u64
            + w.workflow_runs as u64 * (1 + w.workflow_tasks_per_run as u64)
            + w.script.len() as u64
    }

    pub fn size(&self) -> Size {
        Size {
            fault_events: self.plan.events.len(),
            tasks: self.tasks(),
            processes: self.scenario.topology.workers,
            sim_seconds: self.scenario.phases.duration_ms() / 1000,
        }
    }
}

pub struct Shrinker {
    pub seed: u64,
    pub defects: Vec<String>,
    pub invariant: String,
    pub budget: usize,
    pub runs: usize,
    /// Say on stderr how it goes: each smaller case that still fails, and
    /// every [`PROGRESS_EVERY`] runs (a shrink takes minutes).
    pub progress: bool,
}

/// Runs between two progress lines when nothing smaller was found.
pub const PROGRESS_EVERY: usize = 25;

impl Shrinker {
    /// Does this case still violate the invariant?
    pub fn fails(&mut self, case: &Case) -> bool {
        if self.runs >= self.budget {
            return false;
        }
        self.runs += 1;
        let s = &case.scenario;
        if crate::scenario::validate(s).is_err()
            || case.plan.validate(s.topology.workers, s.phases.fault_phase_ms).is_err()
        {
            return false;
        }
        let spec = RunSpec::new(Arc::new(case.scenario.clone()), case.scenario.name.clone(), self.seed)
            .with_plan(PlanSource::Explicit(case.plan.clone()))
            .with_defects(self.defects.iter());
        let still = match runner::run_seed(&spec, runner::DEFAULT_WATCHDOG) {
            Ok(o) => o.violations.iter().any(|v| v.invariant == self.invariant),
            Err(e) => e.kind() == self.invariant,
        };
        if self.progress && (still || self.runs.is_multiple_of(PROGRESS_EVERY)) {
            let what = if still { format!("still fails with {}", case.size()) } else { "trying smaller cases".into() };
            eprintln!("shrink: run {} of at most {}: {what}", self.runs, self.budget);
        }
        still
    }

    /// What `case` reports for the invariant (its first violation's message),
    /// for the shrunk entry's comment; a run outside the budget.
    pub fn message(&self, case: &Case) -> Option<String> {
        let spec = RunSpec::new(Arc::new(case.scenario.clone()), case.scenario.name.clone(), self.seed)
            .with_plan(PlanSource::Explicit(case.plan.clone()))
            .with_defects(self.defects.iter());
        match runner::run_seed(&spec, runner::DEFAULT_WATCHDOG) {
            Ok(o) => o.violations.into_iter().find(|v| v.invariant == self.invariant).map(|v| v.message),
            Err(e) => Some(e.to_string()),
        }
    }

    /// Shrinks `case` (which must fail) as far as the budget allows.
    pub fn shrink(&mut self, mut case: Case) -> Case {
        loop {
            let before = case.clone();
            // Cheapest wins first: whole events, then the world, then the
            // strength of what is left.
            case = self.drop_events(case);
            case = self.first_smaller(case, smaller_world);
            case = self.first_smaller(case, weaken_events);
            if case == before || self.runs >= self.budget {
                return case;
            }
        }
    }

    /// Removes fault events: halves, then quarters, ... then single events.
    fn drop_events(&mut self, mut case: Case) -> Case {
        let mut chunk = case.plan.events.len().div_ceil(2).max(1);
        while chunk >= 1 && !case.plan.events.is_empty() {
            let mut i = 0;
            let mut progressed = false;
            while i < case.plan.events.len() {
                let mut candidate = case.clone();
                let end = (i + chunk).min(candidate.plan.events.len());
                candidate.plan.events.drain(i..end);
                if self.fails(&candidate) {
                    case = candidate;
                    progressed = true;
                } else {
                    i += chunk;
                }
            }
            if !progressed {
                if chunk == 1 {
                    break;
                }
                chunk = chunk.div_ceil(2);
            }
        }
        case
    }

    /// Walks the proposals once, keeping each smaller candidate that still
    /// fails; after a success the proposals are made again from the smaller
    /// case and the walk goes on from the same position (not from the top,
    /// which would make a round quadratic in the number of proposals).
    fn first_smaller(&mut self, mut case: Case, propose: fn(&Case) -> Vec<Case>) -> Case {
        let mut i = 0;
        loop {
            let candidates = propose(&case);
            let Some(candidate) = candidates.into_iter().nth(i) else { return case };
            // A proposal that changes nothing (a count already at its
            // floor) would "still fail" forever and spend the budget.
            if candidate != case && self.fails(&candidate) {
                case = candidate;
            } else {
                i += 1;
            }
            if self.runs >= self.budget {
                return case;
            }
        }
    }
}

/// Weaker versions of each event, one change at a time.
fn weaken_events(case: &Case) -> Vec<Case> {
    let deadline_ms = case.scenario.engine.get().promises().finalize_deadline_ms as i64;
    let mut out = Vec::new();
    for (i, e) in case.plan.events.iter().enumerate() {
        let mut weaker: Vec<FaultEvent> = Vec::new();
        if e.magnitude_ms == UNTIL_HEAL {
            // A hang becomes a delay just past the finalization deadline.
            weaker.push(FaultEvent { magnitude_ms: deadline_ms * 3 / 2, ..e.clone() });
        } else if e.kind != FaultKind::ClockOffset && e.magnitude_ms.abs() >= 200 {
            weaker.push(FaultEvent { magnitude_ms: e.magnitude_ms / 2, ..e.clone() });
        }
        if e.for_ms >= 2_000 {
            weaker.push(FaultEvent { for_ms: e.for_ms / 2, ..e.clone() });
        }
        if e.rate > 0.05 && e.rate < 1.0 {
            weaker.push(FaultEvent { rate: (e.rate / 2.0 * 100.0).round() / 100.0, ..e.clone() });
        }
        for w in weaker {
            let mut c = case.clone();
            c.plan.events[i] = w;
            out.push(c);
        }
    }
    out
}

/// Sets one workload count of a scenario.
type SetCount = fn(&mut Scenario, u32);

/// Smaller worlds: fewer tasks, fewer processes, shorter phases.
fn smaller_world(case: &Case) -> Vec<Case> {
    let mut out = Vec::new();
    let with = |f: &dyn Fn(&mut Scenario)| {
        let mut c = case.clone();
        f(&mut c.scenario);
        c
    };
    let w = &case.scenario.workload;
    let counts: [(u32, SetCount); 6] = [
        (w.index_builds, |s, n| s.workload.index_builds = n),
        (w.authz_materializations, |s, n| s.workload.authz_materializations = n),
        (w.jobs, |s, n| s.workload.jobs = n),
        (w.pipelines, |s, n| s.workload.pipelines = n),
        (w.workflow_runs, |s, n| s.workload.workflow_runs = n),
        (w.stages_per_pipeline, |s, n| s.workload.stages_per_pipeline = n.max(1)),
    ];
    for (n, set) in counts {
        if n > 0 {
            out.push(with(&|s| set(s, 0)));
            if n > 1 {
                out.push(with(&|s| set(s, n / 2)));
                out.push(with(&|s| set(s, n - 1)));
            }
        }
    }
    for i in 0..w.script.len() {
        out.push(with(&|s| {
            s.workload.script.remove(i);
        }));
    }
    // One worker fewer: the last one, and every fault aimed at it.
    let workers = case.scenario.topology.workers;
    if workers > 1 {
        let mut c = with(&|s| s.topology.workers = workers - 1);
        c.plan.events.retain(|e| e.proc != Some(workers));
        out.push(c);
    }
    // Shorter phases (faults that no longer fit are dropped).
    let p = &case.scenario.phases;
    for fault_ms in [p.fault_phase_ms / 2, p.fault_phase_ms * 3 / 4] {
        if fault_ms >= 1_000 && fault_ms >= case.scenario.workload.enqueue_window_ms.min(fault_ms) {
            let mut c = with(&|s| {
                s.phases.fault_phase_ms = fault_ms;
                s.workload.enqueue_window_ms = s.workload.enqueue_window_ms.min(fault_ms);
            });
            c.plan.events.retain(|e| e.end_ms() <= fault_ms);
            out.push(c);
        }
    }
    for heal_ms in [p.heal_phase_ms / 2, p.heal_phase_ms * 3 / 4] {
        if heal_ms >= 1_000 {
            out.push(with(&|s| s.phases.heal_phase_ms = heal_ms));
        }
    }
    // A quiet end where the world has none (one pinned before quiet ends
    // existed): its liveness phase then stops once the world has settled,
    // as today's built-in scenarios do.
    if p.quiet_end_ms.is_none() && p.heal_phase_ms >= 4 * QUIET_END_MIN_MS {
        let quiet_ms = (p.heal_phase_ms / 5).clamp(QUIET_END_MIN_MS, QUIET_END_MAX_MS);
        out.push(with(&|s| s.phases.quiet_end_ms = Some(quiet_ms)));
    }
    out
}

/// The quiet period shrink gives a world without one: a fifth of its
/// liveness phase, within these (the built-in scenarios use 60 s to 300 s).
const QUIET_END_MIN_MS: u64 = 60_000;
const QUIET_END_MAX_MS: u64 = 300_000;

#[cfg(test)]
mod tests {
    use super::*;

    fn swarm() -> Case {
        let scenario = crate::scenario::resolve("swarm", &crate::engines()).expect("swarm").scenario;
        Case { scenario, plan: FaultPlan::none() }
    }

    /// A proposal equal to the case (a count already at its floor) is
    /// never run: it would "still fail" on every pass and spend the whole
    /// budget without shrinking anything (it once did, on B1's entry).
    #[test]
    fn a_proposal_that_changes_nothing_costs_no_run() {
        let mut shrinker = Shrinker {
            seed: 1,
            defects: Vec::new(),
            invariant: "fenced-completion".into(),
            budget: 10,
            runs: 0,
            progress: false,
        };
        let case = swarm();
        let same = shrinker.first_smaller(case.clone(), |c| vec![c.clone(), c.clone()]);
        assert_eq!((same == case, shrinker.runs), (true, 0));
    }

    /// A world without a quiet end is offered one; a world with one is not
    /// offered another.
    #[test]
    fn a_world_without_a_quiet_end_is_offered_one() {
        let mut case = swarm();
        case.scenario.phases.quiet_end_ms = None;
        let quiet =
            |c: &Case| smaller_world(c).iter().filter_map(|c| c.scenario.phases.quiet_end_ms).collect::<Vec<_>>();
        let heal_ms = case.scenario.phases.heal_phase_ms;
        assert_eq!(quiet(&case), [(heal_ms / 5).clamp(QUIET_END_MIN_MS, QUIET_END_MAX_MS)]);
        case.scenario.phases.quiet_end_ms = Some(60_000);
        assert!(quiet(&case).iter().all(|&q| q == 60_000), "{:?}", quiet(&case));
    }
}
