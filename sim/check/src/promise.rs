//! The engine's promises, as deadlines the checkers can compare with.
//!
//! Every value comes from the [`Promises`] the engine's adapter declared,
//! never from the engine's own helpers (`retry_backoff_ms`, a lease TTL
//! lookup...): a bug there would then agree with itself. Each derivation is
//! written here once, from the promise's documented meaning, and every
//! checker reads it from here.

use leasesim_vocab::promise::{Backoff, Promises, StatementTime};
use leasesim_vocab::task::TaskKind;

/// The lease TTL a grant or renewal of this kind promises (`None`: the task
/// is owned by holder liveness, not by a lease).
pub fn lease_ttl_ms(p: &Promises, kind: TaskKind) -> Option<u64> {
    p.lease_ttl.for_kind(kind)
}

/// How long before its expiry a lease is renewed: TTL / renew_divisor.
pub fn renew_margin_ms(p: &Promises, kind: TaskKind) -> Option<u64> {
    lease_ttl_ms(p, kind).map(|ttl| ttl / p.renew_divisor.max(1))
}

/// The backoff after the `retries`-th failure, from the time it counts from
/// (see [`retry_from_ms`]).
pub fn backoff_ms(p: &Promises, retries: u32) -> u64 {
    match p.backoff {
        Backoff::Doubling { base_ms, cap_ms } => {
            let doublings = retries.saturating_sub(1).min(40);
            let mut ms = base_ms;
            for _ in 0..doublings {
                ms = ms.saturating_mul(2);
                if ms >= cap_ms {
                    break;
                }
            }
            ms.min(cap_ms)
        }
        Backoff::Exponential { unit_ms, max_exponent } => {
            // The store keeps microseconds: e^n units, rounded to the
            // microsecond, then read back in whole milliseconds.
            let n = retries.min(max_exponent) as f64;
            let us = (n.exp() * unit_ms as f64 * 1_000.0).round() as u64;
            us / 1_000
        }
    }
}

/// The time a failure's backoff counts from: its commit, or for a job
/// queue's `greatest(now(), run_at)` the later of it and the previous due time.
pub fn retry_from_ms(p: &Promises, failed_ms: u64, previous_due_ms: u64) -> u64 {
    match p.backoff {
        Backoff::Doubling { .. } => failed_ms,
        Backoff::Exponential { .. } => failed_ms.max(previous_due_ms),
    }
}

/// The earliest a failed task may be granted again, by the policy: the
/// backoff of its `n`-th failure from the failure's time (its commit, or
/// the statement's start where the store's clock is read then), or from the
/// previous due time where the policy counts from the later of the two.
pub fn retry_due_ms(p: &Promises, f: &crate::view::Failure) -> u64 {
    let at = match p.statement_time {
        StatementTime::Commit => f.committed_ms,
        StatementTime::Start => f.started_ms,
    };
    retry_from_ms(p, at, f.previous_due_ms) + backoff_ms(p, f.retries)
}

/// Does a failure that brings a task to `retries` failures (with a fatal
/// error or not) make it dead?
pub fn dies(p: &Promises, retries: u32, fatal: bool) -> bool {
    fatal || retries > p.max_retries
}

/// A claim answer older than this was dropped by its caller, so same-owner
/// recovery may release a task granted that long ago and not running.
pub fn orphan_age_ms(p: &Promises) -> u64 {
    p.long_poll_ms + p.rpc_timeout_ms
}

/// The longest gap between two heartbeats a live, connected worker sends:
/// one interval after the previous round returned, whose calls take at most
/// one RPC deadline each.
pub fn heartbeat_gap_ms(p: &Promises) -> u64 {
    p.heartbeat_interval_ms + p.rpc_timeout_ms * u64::from(p.heartbeat_calls.max(1))
}

/// The longest a message takes between a process and the store seam, with
/// room to spare (the simulated network: 1-10 ms). Checkers that compare a
/// time at the store with a time at a process allow this much.
pub const NET_LATENCY_MAX_MS: u64 = 100;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::promises;

    #[test]
    fn backoff_doubles_from_the_base_up_to_the_cap() {
        let p = Promises { backoff: Backoff::Doubling { base_ms: 5_000, cap_ms: 60_000 }, ..promises() };
        let got: Vec<u64> = (1..=6).map(|n| backoff_ms(&p, n)).collect();
        assert_eq!(got, vec![5_000, 10_000, 20_000, 40_000, 60_000, 60_000]);
        assert_eq!(backoff_ms(&p, 0), 5_000);
        assert_eq!(backoff_ms(&p, u32::MAX), 60_000);
    }

    #[test]
    fn exponential_backoff_is_e_to_the_failures_up_to_the_cap() {
        let p = Promises { backoff: Backoff::Exponential { unit_ms: 1_000, max_exponent: 10 }, ..promises() };
        let got: Vec<u64> = [1, 2, 3, 10, 11, 25].into_iter().map(|n| backoff_ms(&p, n)).collect();
        assert_eq!(got, vec![2_718, 7_389, 20_085, 22_026_465, 22_026_465, 22_026_465]);
        assert_eq!(retry_from_ms(&p, 100, 5_000), 5_000);
        assert_eq!(retry_from_ms(&p, 9_000, 5_000), 9_000);
    }

    #[test]
    fn a_task_dies_past_its_retry_budget_or_on_a_fatal_error() {
        let p = Promises { max_retries: 2, ..promises() };
        assert!(!dies(&p, 2, false));
        assert!(dies(&p, 3, false));
        assert!(dies(&p, 1, true));
    }
}
