//! Maintenance passes: each kind runs as a single-flight task owned by the
//! worker. The claim loop starts a due pass, or notes that the previous one is
//! still running, and goes on claiming either way.

use super::{AbortOnDrop, Ctx};
use crate::config::{EngineConfig, MaintenanceKind};
use crate::defects::Defect;
use crate::event::Event;
use crate::handler::TaskHandler;
use crate::proto::{Request, Response, Transport};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

struct InFlight {
    pass: u64,
    started_ms: u64,
    last_report_ms: u64,
    /// Set by the pass when it did its work.
    ok: Arc<AtomicBool>,
    handle: AbortOnDrop<()>,
}

pub(super) struct Maintenance {
    next_pass: u64,
    next_due_ms: BTreeMap<MaintenanceKind, u64>,
    in_flight: BTreeMap<MaintenanceKind, InFlight>,
    /// Passes of each kind that failed in a row (they back off).
    failures: BTreeMap<MaintenanceKind, u32>,
}

impl Maintenance {
    pub fn new(cfg: &EngineConfig) -> Self {
        Maintenance {
            next_pass: 1,
            next_due_ms: cfg.maintenance.iter().map(|k| (*k, 0)).collect(),
            in_flight: BTreeMap::new(),
            failures: BTreeMap::new(),
        }
    }

    /// A pass of `kind` ended at `now_ms`: a failed one pushes the next
    /// back by the kind's backoff, a good one resets it.
    fn ended(&mut self, kind: MaintenanceKind, ok: bool, now_ms: u64, cfg: &EngineConfig) {
        if ok {
            self.failures.remove(&kind);
            return;
        }
        let failures = self.failures.entry(kind).or_default();
        *failures += 1;
        let due = self.next_due_ms.entry(kind).or_default();
        *due = (*due).max(now_ms + cfg.maintenance_backoff_ms(*failures));
    }

    /// Starts every due pass whose kind is not already running. Never waits
    /// for a pass to finish.
    pub async fn poll<T: Transport, H: TaskHandler>(&mut self, ctx: &Arc<Ctx<T, H>>) {
        let now_ms = ctx.clock.now_ms();
        let interval_ms = ctx.cfg.maintenance_interval_ms;
        let kinds: Vec<MaintenanceKind> = self.next_due_ms.keys().copied().collect();
        for kind in kinds {
            if let Some(flight) = self.in_flight.get_mut(&kind) {
                if !flight.handle.0.is_finished() {
                    if now_ms >= flight.last_report_ms + interval_ms {
                        flight.last_report_ms = now_ms;
                        let age_ms = now_ms.saturating_sub(flight.started_ms);
                        ctx.emit(Event::MaintenanceStillRunning { owner: ctx.owner, kind, pass: flight.pass, age_ms });
                        tracing::warn!(owner = %ctx.owner, kind = kind.name(), pass = flight.pass, age_ms, "maintenance pass still running; claims continue");
                    }
                    continue;
                }
                let flight = self.in_flight.remove(&kind).expect("the pass just looked at");
                self.ended(kind, flight.ok.load(Ordering::Relaxed), now_ms, &ctx.cfg);
            }
            if now_ms < self.next_due_ms[&kind] {
                continue;
            }
            self.next_due_ms.insert(kind, now_ms + interval_ms);
            let pass = self.next_pass;
            self.next_pass += 1;
            if ctx.cfg.defects.on(Defect::InlineMaintenance) {
                // A2: the pass is awaited here, ahead of claims; a hung pass
                // stops all claiming.
                let ok = run_pass(ctx.clone(), kind, pass).await;
                self.ended(kind, ok, ctx.clock.now_ms(), &ctx.cfg);
                continue;
            }
            let (task_ctx, ok) = (ctx.clone(), Arc::new(AtomicBool::new(false)));
            let done = ok.clone();
            let handle = AbortOnDrop(tokio::spawn(async move {
                done.store(run_pass(task_ctx, kind, pass).await, Ordering::Relaxed);
            }));
            self.in_flight.insert(kind, InFlight { pass, started_ms: now_ms, last_report_ms: now_ms, ok, handle });
        }
    }
}

/// One pass; whether it did its work. Index, bucket and tenant passes run
/// as one store transaction under a statement timeout, and the worker stops
/// waiting soon after it: a pass that hangs is cancelled (the store aborts
/// its transaction, nothing applied), and the kind tries again after its
/// backoff. A finalization is idempotent, so a retried pass is safe.
async fn run_pass<T: Transport, H: TaskHandler>(ctx: Arc<Ctx<T, H>>, kind: MaintenanceKind, pass: u64) -> bool {
    let owner = ctx.owner;
    ctx.emit(Event::MaintenanceStarted { owner, kind, pass });
    let ok = match kind {
        MaintenanceKind::Index | MaintenanceKind::Bucket | MaintenanceKind::Tenant => {
            if ctx.cfg.defects.on(Defect::UncancelledMaintenance) {
                // A fix3: no statement timeout, no deadline; a pass that
                // hangs stays in flight, and its kind never runs again.
                let req = Request::Maintain { owner, kind, timeout_ms: None };
                matches!(ctx.transport.call(req).await, Ok(Response::Ack))
            } else {
                let timeout_ms = ctx.cfg.maintenance_timeout_ms;
                let req = Request::Maintain { owner, kind, timeout_ms: Some(timeout_ms) };
                matches!(ctx.call_within(req, timeout_ms + ctx.cfg.rpc_timeout_ms).await, Some(Response::Ack))
            }
        }
        MaintenanceKind::Pipeline => match ctx.call(Request::PipelineSnapshot { by: owner }).await {
            Some(Response::Snapshot { due }) => {
                for stage in due {
                    ctx.call(Request::EnqueueStage { stage }).await;
                }
                true
            }
            _ => false,
        },
    };
    if !ok {
        tracing::warn!(owner = %ctx.owner, kind = kind.name(), pass, "maintenance pass failed or timed out; it backs off and runs again");
    }
    ctx.emit(Event::MaintenanceEnded { owner, kind, pass });
    ok
}
