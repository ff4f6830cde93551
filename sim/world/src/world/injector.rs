//! The fault plan at run time: which windows are open now, the dice for rate
//! faults, holds that last until the heal, and the record of every injection.
//!
//! The seams (store, task bodies, process control) ask the injector what to
//! do; the engine never does.

use crate::faults::{FaultEvent, FaultKind, FaultPlan, UNTIL_HEAL};
use crate::history::{Recorder, WorldEvent};
use rand::Rng;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

pub struct Injector {
    plan: FaultPlan,
    rec: Recorder,
    healed: AtomicBool,
    // Not a `watch` channel: tokio's watch spreads waiters over several
    // lists picked by a thread-local RNG, so the order in which held
    // requests wake at the heal would differ between runs. Notify wakes its
    // waiters in the order they started waiting.
    heal_notify: Notify,
}

impl Injector {
    pub fn new(plan: FaultPlan, rec: Recorder) -> Self {
        Injector { plan, rec, healed: AtomicBool::new(false), heal_notify: Notify::new() }
    }

    pub fn now_ms(&self) -> u64 {
        self.rec.now_ms()
    }

    pub fn is_healed(&self) -> bool {
        self.healed.load(Ordering::Relaxed)
    }

    /// The first open window of `kind` right now (none once healed).
    pub fn active(&self, kind: FaultKind) -> Option<&FaultEvent> {
        if self.is_healed() {
            return None;
        }
        let now = self.now_ms();
        self.plan.events.iter().find(|e| e.kind == kind && e.covers(now))
    }

    /// The first open window of `kind` aimed at process `proc` right now.
    pub fn active_for(&self, kind: FaultKind, proc: u32) -> Option<&FaultEvent> {
        if self.is_healed() {
            return None;
        }
        let now = self.now_ms();
        self.plan.events.iter().find(|e| e.kind == kind && e.proc == Some(proc) && e.covers(now))
    }

    /// The first open window of `kind` whose dice say "inject" for this one.
    pub fn roll(&self, kind: FaultKind) -> Option<&FaultEvent> {
        let event = self.active(kind)?;
        chance(event.rate).then_some(event)
    }

    /// Records one injection.
    pub fn inject(&self, kind: FaultKind, detail: impl Into<String>) {
        self.rec.world(WorldEvent::Fault { kind: kind.name().to_string(), detail: detail.into() });
    }

    pub fn heal(&self) {
        self.healed.store(true, Ordering::Relaxed);
        self.heal_notify.notify_waiters();
    }

    pub async fn until_heal(&self) {
        loop {
            let notified = self.heal_notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_healed() {
                return;
            }
            notified.await;
        }
    }

    /// Holds for `magnitude_ms` (`UNTIL_HEAL`: until the heal); a heal ends
    /// every hold early.
    pub async fn hold(&self, magnitude_ms: i64) {
        if magnitude_ms == UNTIL_HEAL {
            self.until_heal().await;
            return;
        }
        tokio::select! {
            biased;
            _ = self.until_heal() => {}
            _ = tokio::time::sleep(Duration::from_millis(magnitude_ms.max(0) as u64)) => {}
        }
    }
}

/// A draw from the simulator's RNG (deterministic for the seed).
pub fn chance(p: f64) -> bool {
    p > 0.0 && madsim::rand::thread_rng().gen_bool(p.min(1.0))
}

/// A uniform draw in `0..=max`.
pub fn upto(max: u64) -> u64 {
    madsim::rand::thread_rng().gen_range(0..=max)
}
