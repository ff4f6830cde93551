//! Duties that run beside the claim loop, each on its own period: heartbeats,
//! release of dead owners' tasks, reclaim of expired leases, group repair, and
//! the peer-note listener.

use super::{AbortOnDrop, Ctx};
use crate::defects::Defect;
use crate::event::Event;
use crate::handler::TaskHandler;
use crate::proto::{PeerNote, Request, Transport};
use std::sync::Arc;
use std::time::Duration;

pub(super) fn spawn_all<T: Transport, H: TaskHandler>(ctx: &Arc<Ctx<T, H>>) -> Vec<AbortOnDrop<()>> {
    let owner = ctx.owner;
    let cfg = &ctx.cfg;
    let mut handles = vec![
        periodic(ctx, 0, cfg.heartbeat_interval_ms, move |ctx| async move {
            ctx.emit(Event::HeartbeatSent { owner });
            ctx.call(Request::Heartbeat { owner }).await;
        }),
        periodic(ctx, cfg.cleanup_interval_ms, cfg.cleanup_interval_ms, move |ctx| async move {
            ctx.call(Request::ReleaseDead { by: owner }).await;
        }),
        periodic(ctx, cfg.recovery_interval_ms, cfg.recovery_interval_ms, move |ctx| async move {
            ctx.call(Request::ReclaimExpired { by: owner }).await;
            // A claim answer older than the claim deadline was dropped, so a
            // task granted before that and not running here is an orphan.
            let running: Vec<_> = ctx.running.lock().expect("running lock").iter().map(|(task, _)| *task).collect();
            let older_than_ms = ctx.cfg.long_poll_ms + ctx.cfg.rpc_timeout_ms;
            let as_of_ms = ctx.clock.now_ms();
            ctx.call(Request::ReleaseOrphans { owner, running, older_than_ms, as_of_ms }).await;
        }),
        periodic(ctx, cfg.repair_interval_ms, cfg.repair_interval_ms, move |ctx| async move {
            ctx.call(Request::Repair { by: owner }).await;
        }),
    ];
    let listener = ctx.clone();
    handles.push(AbortOnDrop(tokio::spawn(async move { listen_for_notes(listener).await })));
    handles
}

/// Runs `tick` every `period_ms` after a first delay, one tick at a time.
fn periodic<T, H, F, Fut>(ctx: &Arc<Ctx<T, H>>, first_ms: u64, period_ms: u64, tick: F) -> AbortOnDrop<()>
where
    T: Transport,
    H: TaskHandler,
    F: Fn(Arc<Ctx<T, H>>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let ctx = ctx.clone();
    AbortOnDrop(tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(first_ms)).await;
        loop {
            tick(ctx.clone()).await;
            tokio::time::sleep(Duration::from_millis(period_ms)).await;
        }
    }))
}

/// A peer says a task is ready again: plan a claim at its committed retry time.
async fn listen_for_notes<T: Transport, H: TaskHandler>(ctx: Arc<Ctx<T, H>>) {
    let mut planned = Vec::new();
    while let Some(note) = ctx.transport.recv_note().await {
        let wake_at_ms = plan_wake(&ctx, &note);
        ctx.emit(Event::RetryPlanned { owner: ctx.owner, task: note.task, retries: note.retries, wake_at_ms });
        tracing::debug!(owner = %ctx.owner, task = note.task, wake_at_ms, "peer note: claim planned");
        let sleeper = ctx.clone();
        planned.retain(|h: &AbortOnDrop<()>| !h.0.is_finished());
        planned.push(AbortOnDrop(tokio::spawn(async move {
            sleeper.sleep_until_local(wake_at_ms).await;
            sleeper.kick.notify_one();
        })));
    }
}

/// When to try to claim a noted task: at the committed retry time it carries.
fn plan_wake<T: Transport, H: TaskHandler>(ctx: &Ctx<T, H>, note: &PeerNote) -> u64 {
    if ctx.cfg.defects.on(Defect::RetryClockReset) {
        // B2: the committed time is dropped; a second backoff starts at receipt.
        return ctx.clock.now_ms() + ctx.cfg.retry_backoff_ms(note.retries.max(1));
    }
    note.retry_at_ms
}
