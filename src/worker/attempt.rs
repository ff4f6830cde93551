//! One claimed attempt: execute it while holding its permit, keep its lease
//! renewed, then persist its outcome under a deadline and drop the permit.

use super::{AbortOnDrop, Ctx};
use crate::defects::Defect;
use crate::event::Event;
use crate::handler::{TaskError, TaskHandler};
use crate::ids::Fence;
use crate::proto::{Grant, PeerNote, Request, Response, Transport};
use crate::task::TaskKind;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OwnedSemaphorePermit;

pub(super) fn spawn<T: Transport, H: TaskHandler>(ctx: &Arc<Ctx<T, H>>, grant: Grant, permit: OwnedSemaphorePermit) {
    let fence = grant.fence;
    ctx.emit(Event::PermitAcquired { owner: ctx.owner, task: fence.task, attempt: fence.attempt });
    ctx.running.lock().expect("running lock").insert((fence.task, fence.attempt));
    let ctx = ctx.clone();
    tokio::spawn(async move {
        let _renewer = grant.lease_expiry_ms.map(|expiry_ms| {
            let ctx = ctx.clone();
            AbortOnDrop(tokio::spawn(async move { keep_renewed(ctx, grant.fence, grant.kind, expiry_ms).await }))
        });
        ctx.emit(Event::ExecutionStarted { fence });
        tracing::debug!(%fence, kind = grant.kind.name(), "execution started");
        let result = ctx.handler.execute(fence, grant.kind).await;
        ctx.emit(Event::ExecutionFinished { fence, error: result.err() });
        tracing::debug!(%fence, error = ?result.err(), "execution finished");
        persist_outcome(&ctx, fence, grant.kind, result).await;
        drop(_renewer);
        ctx.running.lock().expect("running lock").remove(&(fence.task, fence.attempt));
        ctx.emit(Event::PermitReleased { owner: ctx.owner, task: fence.task, attempt: fence.attempt });
        drop(permit);
    });
}

/// Outcome persistence under its deadline. On timeout the permit is dropped
/// anyway: the lease (or the owner's death) lets recovery reclaim the exact
/// attempt, and the fence rejects this attempt's late write.
async fn persist_outcome<T: Transport, H: TaskHandler>(
    ctx: &Arc<Ctx<T, H>>,
    fence: Fence,
    kind: TaskKind,
    result: Result<(), TaskError>,
) {
    if ctx.cfg.defects.on(Defect::UnboundedFinalize) {
        // A1: no deadline; the permit is held for as long as the store takes.
        finalize(ctx, fence, kind, result).await;
        return;
    }
    let deadline = Duration::from_millis(ctx.cfg.finalize_deadline_ms);
    if tokio::time::timeout(deadline, finalize(ctx, fence, kind, result)).await.is_err() {
        ctx.emit(Event::FinalizeTimedOut { fence });
        tracing::warn!(%fence, deadline_ms = ctx.cfg.finalize_deadline_ms, "outcome persistence timed out; permit dropped, recovery stays authoritative");
    }
}

async fn finalize<T: Transport, H: TaskHandler>(
    ctx: &Arc<Ctx<T, H>>,
    fence: Fence,
    kind: TaskKind,
    result: Result<(), TaskError>,
) {
    match result {
        Ok(()) => {
            if complete(ctx, fence, kind).await {
                ctx.emit(Event::CallbackPublished { fence });
                tracing::info!(%fence, "completed; callback published");
            } else {
                tracing::info!(%fence, "completion not applied (rejected, lost or timed out)");
            }
        }
        Err(error) => {
            // Only the current attempt may record a failure.
            let Ok(Response::Valid { valid: true }) = ctx.transport.call(Request::LeaseValid { fence }).await else {
                return;
            };
            if let Ok(Response::Applied { retries, retry_at_ms: Some(retry_at_ms) }) =
                ctx.transport.call(Request::Fail { fence, error }).await
            {
                if ctx.cfg.notify_peers {
                    spawn_note(ctx, fence, retries, retry_at_ms);
                }
            }
        }
    }
}

/// Records success. A stage task's completion clears its stage link, marks
/// the stage done and deletes the task in one transaction.
async fn complete<T: Transport, H: TaskHandler>(ctx: &Arc<Ctx<T, H>>, fence: Fence, kind: TaskKind) -> bool {
    if kind == TaskKind::Stage && ctx.cfg.defects.on(Defect::NonatomicStageComplete) {
        // B3: two transactions; a crash or a lost write between them leaves
        // a task that no stage references.
        if !matches!(ctx.transport.call(Request::ClearStageLink { fence }).await, Ok(Response::Applied { .. })) {
            return false;
        }
    }
    matches!(ctx.transport.call(Request::Complete { fence }).await, Ok(Response::Applied { .. }))
}

/// After the committed backoff, tell peers the task is ready again. The note
/// carries the committed retry time.
fn spawn_note<T: Transport, H: TaskHandler>(ctx: &Arc<Ctx<T, H>>, fence: Fence, retries: u32, retry_at_ms: u64) {
    let ctx = ctx.clone();
    tokio::spawn(async move {
        ctx.sleep_until_local(retry_at_ms).await;
        let note = PeerNote { task: fence.task, retries, retry_at_ms, from: ctx.owner };
        ctx.emit(Event::NoteSent { owner: ctx.owner, task: fence.task, retry_at_ms });
        ctx.transport.notify_peers(note).await;
    });
}

/// Renews the lease whenever its remaining time drops to TTL / renew_divisor.
/// Stops when the store rejects a renewal: the lease is gone.
async fn keep_renewed<T: Transport, H: TaskHandler>(
    ctx: Arc<Ctx<T, H>>,
    fence: Fence,
    kind: TaskKind,
    mut expiry_ms: u64,
) {
    let Some(ttl_ms) = ctx.cfg.lease_ttl.for_kind(kind) else {
        return;
    };
    let margin_ms = ttl_ms / ctx.cfg.renew_divisor;
    loop {
        ctx.sleep_until_local(expiry_ms.saturating_sub(margin_ms)).await;
        match ctx.call(Request::Renew { fence }).await {
            Some(Response::Renewed { lease_expiry_ms }) => expiry_ms = lease_expiry_ms,
            Some(Response::Rejected { .. }) => return,
            // No answer: try again soon, before the lease runs out.
            _ => tokio::time::sleep(Duration::from_millis((margin_ms / 4).max(1))).await,
        }
    }
}
