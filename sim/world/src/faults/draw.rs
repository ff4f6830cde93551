//! Swarm fault plans: which fault kinds are on for a seed, how often, whom
//! they hit and when, drawn from the seed alone within the scenario's limits.
//!
//! Each kind is switched on with probability 1/2, so different seeds stress
//! different mixes (swarm testing); an enabled kind gets one to
//! `max_events_per_kind` events.

use super::{FaultEvent, FaultKind, FaultPlan, UNTIL_HEAL};
use crate::scenario::Scenario;
use crate::world::mix;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The stream of the seed that fault plans are drawn from ("faults").
const FAULT_STREAM: u64 = 0x6661_756c_7473;

/// The shortest window, pause, partition, downtime or stall a plan draws
/// (a scenario's limits cannot ask for less: see `scenario::validate`).
pub const MIN_SPAN_MS: u64 = 1_000;

/// The shortest extra delay of a late reply a plan draws.
pub const MIN_DELAY_MS: u64 = 500;

pub fn draw(seed: u64, scenario: &Scenario) -> FaultPlan {
    let limits = &scenario.faults;
    let mut rng = ChaCha8Rng::seed_from_u64(mix(seed, FAULT_STREAM, 0));
    let mut events = Vec::new();
    for kind in FaultKind::ALL {
        let allowed = limits.kinds.contains(&kind);
        // Draw the coin even for kinds that are not allowed, so that allowing
        // one more kind does not reshuffle the plans of the others.
        let on = rng.gen_bool(0.5);
        if !allowed || !on || limits.max_events_per_kind == 0 {
            continue;
        }
        let n = rng.gen_range(1..=limits.max_events_per_kind);
        for _ in 0..n {
            let event = draw_one(kind, &mut rng, scenario);
            // A process has one clock: keep the first offset drawn for it.
            let duplicate_clock = kind == FaultKind::ClockOffset
                && events.iter().any(|e: &FaultEvent| e.kind == kind && e.proc == event.proc);
            if !duplicate_clock {
                events.push(event);
            }
        }
    }
    events.sort_by(|a, b| a.at_ms.cmp(&b.at_ms).then(a.kind.cmp(&b.kind)));
    let plan = FaultPlan { events };
    // A drawn plan outside its scenario's limits would test another world
    // than the one the scenario describes: the harness's bug, not a finding.
    if let Err(e) = within_limits(&plan, scenario) {
        panic!("harness invariant broken: seed {seed} drew a plan outside its scenario's limits: {e}");
    }
    plan
}

/// Whether `plan` is one that [`draw`] may give for `scenario`: valid for
/// its world, only kinds it allows, at most `max_events_per_kind` of each,
/// and every span, offset and delay within the limit that kind is drawn
/// under. The first event outside them, named, if any.
pub fn within_limits(plan: &FaultPlan, s: &Scenario) -> Result<(), String> {
    let limits = &s.faults;
    plan.validate(s.topology.workers, s.phases.fault_phase_ms)?;
    let mut per_kind = std::collections::BTreeMap::new();
    for (i, e) in plan.events.iter().enumerate() {
        let at = format!("plan[{i}] ({})", e.kind);
        if !limits.kinds.contains(&e.kind) {
            return Err(format!("{at}: the scenario does not allow this kind"));
        }
        let n = per_kind.entry(e.kind).or_insert(0u32);
        *n += 1;
        if *n > limits.max_events_per_kind {
            return Err(format!(
                "{at}: event {n} of its kind, over max_events_per_kind {}",
                limits.max_events_per_kind
            ));
        }
        let max_span_ms = match e.kind {
            FaultKind::ProcessKill => limits.max_downtime_ms,
            FaultKind::ProcessPause | FaultKind::MissedHeartbeat => limits.max_pause_ms,
            FaultKind::Partition => limits.max_partition_ms,
            FaultKind::StoreStall => limits.max_stall_ms,
            FaultKind::StoreCrash => limits.max_store_downtime_ms,
            FaultKind::ClockOffset => 0,
            _ => limits.max_window_ms,
        };
        // A span is drawn between MIN_SPAN_MS and the limit; an offset has none.
        let max_span_ms = if e.kind == FaultKind::ClockOffset { 0 } else { max_span_ms.max(MIN_SPAN_MS) };
        if e.for_ms > max_span_ms {
            return Err(format!("{at}: for_ms {} over its limit {max_span_ms}", e.for_ms));
        }
        let max_magnitude_ms = match e.kind {
            FaultKind::ClockOffset => limits.max_clock_offset_ms,
            FaultKind::StalePoll | FaultKind::MessageDelay => limits.max_delay_ms.max(MIN_DELAY_MS),
            _ => u64::MAX,
        };
        if e.magnitude_ms != UNTIL_HEAL && e.magnitude_ms.unsigned_abs() > max_magnitude_ms {
            return Err(format!("{at}: magnitude_ms {} over its limit {max_magnitude_ms}", e.magnitude_ms));
        }
    }
    Ok(())
}

/// One event of `kind`, drawn within the scenario's limits.
pub fn draw_one(kind: FaultKind, rng: &mut ChaCha8Rng, s: &Scenario) -> FaultEvent {
    let limits = &s.faults;
    let phase_ms = s.phases.fault_phase_ms;
    let at_ms = rng.gen_range(0..phase_ms.saturating_sub(1_000).max(1));
    let room_ms = phase_ms - at_ms;
    let mut span = |max_ms: u64| {
        rng.gen_range(MIN_SPAN_MS.min(room_ms)..=max_ms.clamp(MIN_SPAN_MS, room_ms.max(MIN_SPAN_MS)).min(room_ms))
    };
    let mut e = FaultEvent { kind, at_ms, for_ms: 0, proc: None, rate: 0.0, magnitude_ms: 0 };
    match kind {
        FaultKind::ProcessKill => e.for_ms = span(limits.max_downtime_ms),
        FaultKind::ProcessPause => e.for_ms = span(limits.max_pause_ms),
        FaultKind::Partition => e.for_ms = span(limits.max_partition_ms),
        FaultKind::MissedHeartbeat => e.for_ms = span(limits.max_pause_ms),
        FaultKind::StoreStall => e.for_ms = span(limits.max_stall_ms),
        FaultKind::StoreCrash => e.for_ms = span(limits.max_store_downtime_ms),
        FaultKind::ClockOffset => {}
        _ => e.for_ms = span(limits.max_window_ms),
    }
    let workers = s.topology.workers;
    match kind {
        FaultKind::ProcessKill
        | FaultKind::ProcessPause
        | FaultKind::Partition
        | FaultKind::MissedHeartbeat
        | FaultKind::GracefulStop => {
            e.proc = Some(rng.gen_range(1..=workers));
        }
        FaultKind::ClockOffset => {
            e.at_ms = 0;
            e.proc = Some(rng.gen_range(1..=workers));
            let max = limits.max_clock_offset_ms as i64;
            e.magnitude_ms = rng.gen_range(-max..=max);
        }
        FaultKind::HungFinalization => {
            e.rate = rng.gen_range(0.1..0.8);
            let deadline = s.engine.get().promises().finalize_deadline_ms as i64;
            e.magnitude_ms =
                if rng.gen_bool(0.5) { UNTIL_HEAL } else { rng.gen_range(deadline * 3 / 2..=deadline * 4) };
        }
        FaultKind::StalePoll | FaultKind::MessageDelay => {
            e.rate = rng.gen_range(0.1..0.8);
            e.magnitude_ms = rng.gen_range(MIN_DELAY_MS..=limits.max_delay_ms.max(MIN_DELAY_MS)) as i64;
        }
        FaultKind::TxnTimeout => {
            e.rate = rng.gen_range(0.05..0.5);
            e.magnitude_ms = rng.gen_range(100..=5_000);
        }
        // The lock wait before the store gives up: PostgreSQL's lock_timeout
        // is set in the hundreds of milliseconds to seconds.
        FaultKind::LockTimeout => {
            e.rate = rng.gen_range(0.02..0.2);
            e.magnitude_ms = rng.gen_range(50..=3_000);
        }
        FaultKind::SlowPreparation => {
            e.rate = rng.gen_range(0.1..0.8);
            e.magnitude_ms = rng.gen_range(1_000..=60_000);
        }
        FaultKind::MessageLoss | FaultKind::WriteConflict | FaultKind::HungMaintenance => {
            e.rate = rng.gen_range(0.05..0.5);
        }
        // Every request is a candidate for these two: lower rates keep the
        // store usable through the window.
        FaultKind::DuplicateDelivery | FaultKind::SerializationFailure => {
            e.rate = rng.gen_range(0.02..0.2);
        }
        FaultKind::StoreStall | FaultKind::StoreCrash => {}
    }
    e
}
