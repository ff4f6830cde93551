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
use std::sync::Arc;

struct InFlight {
    pass: u64,
    started_ms: u64,
    last_report_ms: u64,
    handle: AbortOnDrop<()>,
}

pub(super) struct Maintenance {
    next_pass: u64,
    next_due_ms: BTreeMap<MaintenanceKind, u64>,
    in_flight: BTreeMap<MaintenanceKind, InFlight>,
}

impl Maintenance {
    pub fn new(cfg: &EngineConfig) -> Self {
        Maintenance {
            next_pass: 1,
            next_due_ms: cfg.maintenance.iter().map(|k| (*k, 0)).collect(),
            in_flight: BTreeMap::new(),
        }
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
                self.in_flight.remove(&kind);
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
                run_pass(ctx.clone(), kind, pass).await;
                continue;
            }
            let task_ctx = ctx.clone();
            let handle = AbortOnDrop(tokio::spawn(async move { run_pass(task_ctx, kind, pass).await }));
            self.in_flight.insert(kind, InFlight { pass, started_ms: now_ms, last_report_ms: now_ms, handle });
        }
    }
}

/// One pass. Index, bucket and tenant passes are not timeout-cancelled: a pass
/// that hangs stays in flight, and its kind starts no other pass meanwhile.
async fn run_pass<T: Transport, H: TaskHandler>(ctx: Arc<Ctx<T, H>>, kind: MaintenanceKind, pass: u64) {
    let owner = ctx.owner;
    ctx.emit(Event::MaintenanceStarted { owner, kind, pass });
    match kind {
        MaintenanceKind::Index | MaintenanceKind::Bucket | MaintenanceKind::Tenant => {
            let _ = ctx.transport.call(Request::Maintain { owner, kind }).await;
        }
        MaintenanceKind::Pipeline => {
            if let Some(Response::Snapshot { due }) = ctx.call(Request::PipelineSnapshot { by: owner }).await {
                for stage in due {
                    ctx.call(Request::EnqueueStage { stage }).await;
                }
            }
        }
    }
    ctx.emit(Event::MaintenanceEnded { owner, kind, pass });
}
