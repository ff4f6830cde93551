//! Invariant checkers.
//!
//! Each checker judges the history on its own, one record at a time, against
//! a view of the world rebuilt from the history alone ([`view::View`]). No
//! checker calls into the engine's logic (store, workers, config helpers):
//! they read engine *types* and the scenario's plain values, so they can
//! disagree with the engine.
//!
//! [`check`] feeds every record, in history order, to every checker (the view
//! still shows the world just before that record), then applies the record
//! to the view; at the end each checker gets a last look at the final world.
//! Only the first violation per (invariant, task) is kept.

mod claim_progress;
mod eventual_completion;
mod exactly_once;
mod fenced_completion;
mod lease_recovery;
mod materialization;
mod no_resurrection;
mod permit_leak;
mod retry_clock;
mod single_flight;
mod single_owner;
pub mod view;

#[cfg(test)]
mod testkit;

use crate::history::Record;
use crate::scenario::Scenario;
use leasesim::ids::{Owner, TaskId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use view::View;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    pub invariant: String,
    pub at_ms: u64,
    pub task: Option<u64>,
    pub attempt: Option<u32>,
    pub process: Option<String>,
    pub message: String,
}

impl Violation {
    /// A violation of `invariant` at `at_ms`, with nothing else filled in.
    pub fn new(invariant: &str, at_ms: u64, message: impl Into<String>) -> Self {
        Violation {
            invariant: invariant.to_string(),
            at_ms,
            task: None,
            attempt: None,
            process: None,
            message: message.into(),
        }
    }

    pub fn task(mut self, task: TaskId) -> Self {
        self.task = Some(task);
        self
    }

    pub fn attempt(mut self, attempt: u32) -> Self {
        self.attempt = Some(attempt);
        self
    }

    pub fn process(mut self, owner: Owner) -> Self {
        self.process = Some(owner.to_string());
        self
    }

    /// The task, attempt and process of one attempt's fence.
    pub fn fence(self, fence: &leasesim::ids::Fence) -> Self {
        self.task(fence.task).attempt(fence.attempt).process(fence.owner)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub violations: Vec<Violation>,
    /// Per invariant: how many times its predicate was evaluated.
    pub checks: BTreeMap<String, u64>,
}

/// What every checker sees: the scenario and the world just before the
/// record being judged (or, in `finish`, the world at the end).
pub struct Ctx<'a> {
    pub scenario: &'a Scenario,
    pub view: View,
}

pub trait Checker {
    /// The invariant's stable kebab-case name (one of [`INVARIANTS`]).
    fn name(&self) -> &'static str;
    /// Judges one record; time has advanced to `rec.at_ms`.
    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>);
    /// The last look, at `end_ms`, once every record has been applied.
    fn finish(&mut self, end_ms: u64, ctx: &Ctx, out: &mut Vec<Violation>);
    /// How many times the checker evaluated its predicate.
    fn evaluations(&self) -> u64;
}

/// Every invariant: stable name and one-line description (`cargo sim list`).
pub const INVARIANTS: &[(&str, &str)] = &[
    (
        permit_leak::NAME,
        "permits in use never exceed concurrency; a permit is released within the finalize deadline + slack after execution ends",
    ),
    (
        fenced_completion::NAME,
        "a write or renewal changes a task only for its current attempt and owner; callbacks follow that attempt's own completion",
    ),
    (single_owner::NAME, "a task is never granted while another attempt holds an unexpired lease on it"),
    (exactly_once::NAME, "at most one committed completion and one published callback per task"),
    (
        retry_clock::NAME,
        "a task is not claimed before its committed retry-at, and peers plan its claim no later than retry-at + idle poll",
    ),
    (
        no_resurrection::NAME,
        "no task is created or claimed for a done stage; done and dead tasks never change again",
    ),
    (single_flight::NAME, "two maintenance passes of one kind never overlap on one process"),
    (
        claim_progress::NAME,
        "after heal, a due task is claimed within the claim bound while some live worker has a free permit",
    ),
    (lease_recovery::NAME, "after heal, an expired lease is reclaimed within the recovery bound"),
    (
        materialization::NAME,
        "every index build enqueued before heal materializes within the bound after heal; no stale 'not materialized' answers",
    ),
    (
        eventual_completion::NAME,
        "every task is terminal within the completion bound after heal; no orphan stage tasks remain",
    ),
];

/// A fresh instance of every checker, in [`INVARIANTS`] order.
pub fn checkers() -> Vec<Box<dyn Checker>> {
    vec![
        Box::new(permit_leak::PermitLeak::default()),
        Box::new(fenced_completion::FencedCompletion::default()),
        Box::new(single_owner::SingleOwner::default()),
        Box::new(exactly_once::ExactlyOnce::default()),
        Box::new(retry_clock::RetryClock::default()),
        Box::new(no_resurrection::NoResurrection::default()),
        Box::new(single_flight::SingleFlight::default()),
        Box::new(claim_progress::ClaimProgress::default()),
        Box::new(lease_recovery::LeaseRecovery::default()),
        Box::new(materialization::Materialization::default()),
        Box::new(eventual_completion::EventualCompletion::default()),
    ]
}

/// Keeps the first violation per (invariant, task), in history order.
#[derive(Default)]
struct Sink {
    seen: BTreeSet<(String, Option<u64>)>,
    kept: Vec<Violation>,
}

impl Sink {
    fn take(&mut self, found: &mut Vec<Violation>) {
        for v in found.drain(..) {
            if self.seen.insert((v.invariant.clone(), v.task)) {
                self.kept.push(v);
            }
        }
    }
}

/// Runs every checker over `history` (in order) and collects what they found.
pub fn check(scenario: &Scenario, history: &[Record]) -> Report {
    let mut ctx = Ctx { scenario, view: View::new(scenario.engine.concurrency) };
    let mut checkers = checkers();
    let mut sink = Sink::default();
    let mut found = Vec::new();
    for rec in history {
        for c in checkers.iter_mut() {
            c.on_record(rec, &ctx, &mut found);
        }
        sink.take(&mut found);
        ctx.view.apply(rec);
    }
    // `End` is the last record; without one, the run ended at the last record.
    let end_ms = history.last().map_or(0, |r| r.at_ms);
    for c in checkers.iter_mut() {
        c.finish(end_ms, &ctx, &mut found);
    }
    sink.take(&mut found);
    let checks = checkers.iter().map(|c| (c.name().to_string(), c.evaluations())).collect();
    Report { violations: sink.kept, checks }
}

#[cfg(test)]
mod tests {
    use super::testkit::{o, scenario, H};
    use super::{check, checkers, INVARIANTS};
    use leasesim::task::TaskKind;

    #[test]
    fn invariants_list_names_every_checker_in_order() {
        let names: Vec<&str> = checkers().iter().map(|c| c.name()).collect();
        let listed: Vec<&str> = INVARIANTS.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, listed);
    }

    #[test]
    fn only_the_first_violation_per_invariant_and_task_is_kept() {
        // Two stale completions of t1, then one of t2: one violation per task.
        let history = H::new()
            .up(o(1, 1))
            .up(o(2, 1))
            .created(1, TaskKind::Job)
            .created(2, TaskKind::Job)
            .at(5)
            .granted(1, 1, o(1, 1), None)
            .granted(2, 1, o(1, 1), None)
            .released(1, 1, o(1, 1))
            .released(2, 1, o(1, 1))
            .at(10)
            .granted(1, 2, o(2, 1), None)
            .granted(2, 2, o(2, 1), None)
            .at(20)
            .completed(1, 1, o(1, 1))
            .at(30)
            .completed(1, 1, o(1, 1))
            .at(40)
            .completed(2, 1, o(1, 1))
            .build();
        let report = check(&scenario(), &history);
        let fenced: Vec<(Option<u64>, u64)> = report
            .violations
            .iter()
            .filter(|v| v.invariant == "fenced-completion")
            .map(|v| (v.task, v.at_ms))
            .collect();
        assert_eq!(fenced, vec![(Some(1), 20), (Some(2), 40)]);
        let first = &report.violations[0];
        assert_eq!(first.attempt, Some(1));
        assert_eq!(first.process.as_deref(), Some("p1.1"));
        assert_eq!(
            first.message,
            "t1: complete by attempt 1 (p1.1) applied at 20 ms while attempt 2 (p2.1) holds the task"
        );
    }

    #[test]
    fn an_empty_history_passes() {
        let report = check(&scenario(), &[]);
        assert!(report.violations.is_empty());
        assert_eq!(report.checks.len(), INVARIANTS.len());
    }
}
