//! The SQL-store failure modes at the store seam do what they say, seen in
//! the facts the harness records, and the correct engine rides them out:
//!
//! - `store-crash`: requests the store held when it died and requests that
//!   arrive while it is down get no answer; nothing commits while it is down;
//!   it comes back with everything it had committed.
//! - `duplicate-delivery`: a second copy of a request arrives later from the
//!   same sender; its answer reaches nobody; a copied enqueue creates nothing.
//! - `serialization-failure`: a write is refused with a retryable conflict
//!   and nothing of it commits.

mod common;

use common::spec;
use leasesim_sim::faults::{FaultEvent, FaultKind, FaultPlan};
use leasesim_sim::history::{Entry, Record};
use leasesim_sim::runner::{self, PlanSource};
use leasesim_sim::truth::{Fact, Reply};
use leasesim_vocab::op::{Op, Response};
use std::collections::{BTreeMap, BTreeSet};

const SCENARIO: &str = "swarm";

/// One fault window over most of the fault phase.
fn window(kind: FaultKind, rate: f64) -> FaultEvent {
    FaultEvent { kind, at_ms: 10_000, for_ms: 60_000, proc: None, rate, magnitude_ms: 0 }
}

/// Runs `seed` under `plan`; the run must pass every invariant.
fn run(seed: u64, plan: Vec<FaultEvent>) -> Vec<Record> {
    let spec = spec(SCENARIO, seed).with_plan(PlanSource::Explicit(FaultPlan { events: plan }));
    let result = runner::run_world(&spec, runner::DEFAULT_WATCHDOG).expect("the seed runs");
    let outcome = runner::judge(&spec, &result);
    assert!(outcome.violations.is_empty(), "seed {seed}: {:?}\nreplay: {}", outcome.violations, outcome.replay);
    result.history
}

fn facts(history: &[Record]) -> impl Iterator<Item = (u64, &Fact)> {
    history.iter().filter_map(|r| match &r.entry {
        Entry::Truth(f) => Some((r.at_ms, f)),
        _ => None,
    })
}

#[test]
fn a_crashed_store_answers_nothing_until_it_restarts() {
    let mut held_total = 0;
    for seed in 1..=5 {
        let history = run(seed, vec![window(FaultKind::StoreCrash, 0.0)]);
        let crashed: Vec<(u64, u64)> = facts(&history)
            .filter_map(|(at, f)| matches!(f, Fact::StoreCrashed { .. }).then_some(at))
            .zip(facts(&history).filter_map(|(at, f)| matches!(f, Fact::StoreRestarted).then_some(at)))
            .collect();
        assert_eq!(crashed, vec![(10_000, 70_000)], "seed {seed}: one crash, one restart");
        held_total += facts(&history)
            .map(|(_, f)| match f {
                Fact::StoreCrashed { held } => *held,
                _ => 0,
            })
            .sum::<u64>();
        // While down: every arrival is dropped, nothing is answered.
        let mut arrived_down = BTreeSet::new();
        for (at, f) in facts(&history) {
            let down = (10_000..70_000).contains(&at);
            match f {
                Fact::Arrived { req, .. } if down => {
                    arrived_down.insert(*req);
                }
                Fact::Dropped { req } => {
                    arrived_down.remove(req);
                }
                Fact::Answered { req, .. } | Fact::Refused { req, .. } if down && at > 10_000 => {
                    panic!("seed {seed}: request {req} answered at {at} ms while the store was down")
                }
                _ => {}
            }
        }
        assert!(arrived_down.is_empty(), "seed {seed}: arrivals while down not dropped: {arrived_down:?}");
    }
    assert!(held_total > 0, "no crash caught a request in flight in 5 seeds");
}

#[test]
fn a_duplicated_request_is_applied_again_and_answers_nobody() {
    let history = run(1, vec![window(FaultKind::DuplicateDelivery, 0.5)]);
    let mut duplicates = BTreeMap::new();
    let mut enqueues_by_key: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    let mut requests = BTreeMap::new();
    for (_, f) in facts(&history) {
        match f {
            Fact::Arrived { req, request, duplicate, .. } => {
                requests.insert(*req, request.clone());
                if *duplicate {
                    duplicates.insert(*req, request.op_name());
                }
            }
            Fact::Answered { req, response, reply, .. } => {
                if duplicates.contains_key(req) {
                    assert_eq!(*reply, Reply::Lost, "the answer to duplicate {req} went somewhere");
                }
                if let (Some(Op::Enqueue { key: Some(key), .. }), Response::Enqueued { task }) =
                    (requests.get(req), response)
                {
                    enqueues_by_key.entry(*key).or_default().insert(*task);
                }
            }
            Fact::Replied { req } => assert!(!duplicates.contains_key(req), "duplicate {req} replied"),
            _ => {}
        }
    }
    let ops: BTreeSet<_> = duplicates.values().copied().collect();
    assert!(duplicates.len() >= 20 && ops.len() >= 4, "few duplicates: {ops:?}");
    assert!(!ops.contains("maintain") && !ops.contains("query-index"), "held requests duplicated: {ops:?}");
    // An enqueue sent twice (or retried) under one key names one task.
    for (key, tasks) in &enqueues_by_key {
        assert_eq!(tasks.len(), 1, "key {key} created {tasks:?}");
    }
}

#[test]
fn a_serialization_failure_refuses_the_write_with_nothing_applied() {
    let history = run(1, vec![window(FaultKind::SerializationFailure, 0.3)]);
    let mut refused = BTreeSet::new();
    let mut ops = BTreeSet::new();
    let mut requests = BTreeMap::new();
    for (_, f) in facts(&history) {
        match f {
            Fact::Arrived { req, request, .. } => {
                requests.insert(*req, request.op_name());
            }
            Fact::Refused { req, response, fault: Some(FaultKind::SerializationFailure) } => {
                assert!(matches!(response, Response::Rejected { .. }), "{response:?}");
                refused.insert(*req);
                ops.insert(requests[req]);
            }
            Fact::Answered { req, .. } => assert!(!refused.contains(req), "refused request {req} answered too"),
            _ => {}
        }
    }
    assert!(refused.len() >= 20, "{} serialization failures", refused.len());
    for op in ["claim", "heartbeat", "complete"] {
        assert!(ops.contains(op), "no {op} refused: {ops:?}");
    }
    assert!(!ops.contains("lease-valid") && !ops.contains("query-index"), "a read refused: {ops:?}");
}
