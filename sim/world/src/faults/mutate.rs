//! Plan mutation for guided campaigns: a plan that reached something rare is
//! changed a little (an event dropped, added, repeated, moved, widened,
//! narrowed, made more or less intense, aimed at another process), so that
//! its neighbours are tried. Deterministic for the RNG it is given; the
//! result is always a valid plan for the scenario.

use super::{draw_one, FaultEvent, FaultKind, FaultPlan, UNTIL_HEAL};
use crate::scenario::Scenario;
use leasesim_vocab::faults::{Aim, Anchor};
use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// `plan`, changed by one to three mutations.
pub fn mutate(plan: &FaultPlan, rng: &mut ChaCha8Rng, s: &Scenario) -> FaultPlan {
    let mut events = plan.events.clone();
    for _ in 0..rng.gen_range(1..=3) {
        mutate_once(&mut events, rng, s);
    }
    let phase_ms = s.phases.fault_phase_ms;
    for e in &mut events {
        clamp(e, phase_ms);
    }
    // A process has one clock: keep the first offset of each.
    let mut clocks = std::collections::BTreeSet::new();
    events.retain(|e| e.kind != FaultKind::ClockOffset || clocks.insert(e.proc));
    events.sort_by(|a, b| a.at_ms.cmp(&b.at_ms).then(a.kind.cmp(&b.kind)));
    FaultPlan { events }
}

/// `plan` with the fault `aim` proposes added (its free edge moved a little
/// by the RNG, so that several tries of one aim differ), or `None` when the
/// aim falls outside the fault phase or names a kind the scenario does not
/// allow. Every other event stays as it was.
pub fn aim(plan: &FaultPlan, aim: &Aim, rng: &mut ChaCha8Rng, s: &Scenario) -> Option<FaultPlan> {
    let phase_ms = s.phases.fault_phase_ms;
    if !s.faults.kinds.contains(&aim.kind) || aim.at_ms >= phase_ms || aim.for_ms == 0 {
        return None;
    }
    // The rate and magnitude a plan would draw for the kind; the window is the aim's.
    let mut e = draw_one(aim.kind, rng, s);
    let stretch_ms = (aim.for_ms as f64 * rng.gen_range(0.0..1.0)) as u64;
    let (at_ms, for_ms) = match aim.anchor {
        Anchor::Start => (aim.at_ms, aim.for_ms + stretch_ms),
        Anchor::End => (aim.at_ms.saturating_sub(stretch_ms), aim.for_ms + stretch_ms.min(aim.at_ms)),
        Anchor::Both => (aim.at_ms, aim.for_ms + stretch_ms / 10),
    };
    (e.at_ms, e.for_ms, e.proc) = (at_ms, for_ms, aim.proc.or(e.proc));
    if let Some(permille) = aim.rate_permille {
        e.rate = permille as f64 / 1000.0;
    }
    if e.kind == FaultKind::ProcessPause {
        e.for_ms = e.for_ms.min(s.faults.max_pause_ms);
    }
    clamp(&mut e, phase_ms);
    let mut events = plan.events.clone();
    events.push(e);
    events.sort_by(|a, b| a.at_ms.cmp(&b.at_ms).then(a.kind.cmp(&b.kind)));
    Some(FaultPlan { events })
}

fn mutate_once(events: &mut Vec<FaultEvent>, rng: &mut ChaCha8Rng, s: &Scenario) {
    let phase_ms = s.phases.fault_phase_ms;
    let pick =
        |events: &Vec<FaultEvent>, rng: &mut ChaCha8Rng| (!events.is_empty()).then(|| rng.gen_range(0..events.len()));
    match rng.gen_range(0..9) {
        0 => {
            if let Some(i) = pick(events, rng) {
                events.remove(i);
            }
        }
        1 | 2 => {
            if let Some(&kind) = s.faults.kinds.choose(rng) {
                events.push(draw_one(kind, rng, s));
            }
        }
        3 => {
            if let Some(i) = pick(events, rng) {
                let mut copy = events[i].clone();
                copy.at_ms = rng.gen_range(0..phase_ms.max(1));
                events.push(copy);
            }
        }
        4 => {
            if let Some(i) = pick(events, rng) {
                let shift = rng.gen_range(0..=phase_ms / 5) as i64 * if rng.gen_bool(0.5) { 1 } else { -1 };
                events[i].at_ms = (events[i].at_ms as i64 + shift).max(0) as u64;
            }
        }
        5 => {
            if let Some(i) = pick(events, rng) {
                events[i].for_ms = (events[i].for_ms as f64 * rng.gen_range(1.5..3.0)) as u64;
            }
        }
        6 => {
            if let Some(i) = pick(events, rng) {
                events[i].for_ms = ((events[i].for_ms as f64 * rng.gen_range(0.3..0.7)) as u64).max(1);
            }
        }
        7 => {
            if let Some(i) = pick(events, rng) {
                let e = &mut events[i];
                let factor = rng.gen_range(0.5..2.0);
                if e.rate > 0.0 {
                    e.rate = (e.rate * factor).clamp(0.01, 1.0);
                }
                if e.magnitude_ms > 0 {
                    e.magnitude_ms = ((e.magnitude_ms as f64 * factor) as i64).max(1);
                } else if e.magnitude_ms == UNTIL_HEAL && e.kind == FaultKind::HungFinalization {
                    e.magnitude_ms = s.engine.get().promises().finalize_deadline_ms as i64 * 2;
                }
            }
        }
        _ => {
            if let Some(i) = pick(events, rng) {
                if events[i].proc.is_some() {
                    events[i].proc = Some(rng.gen_range(1..=s.topology.workers));
                }
            }
        }
    }
}

/// Keeps an event inside the fault phase.
fn clamp(e: &mut FaultEvent, phase_ms: u64) {
    if e.kind == FaultKind::ClockOffset {
        e.at_ms = 0;
        e.for_ms = 0;
        return;
    }
    e.at_ms = e.at_ms.min(phase_ms.saturating_sub(1));
    e.for_ms = e.for_ms.clamp(1, phase_ms - e.at_ms);
}
