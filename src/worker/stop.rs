//! A graceful stop. Asked to stop, a worker claims nothing more (the claim
//! loop is dropped where it stood), lets its running attempts end on their
//! own within `stop_grace_ms`, cancels the ones still running then, and
//! gives back what it holds: it deregisters (the store takes it for dead
//! and refuses its claims from then on, even one still on its way) and
//! releases every task still leased to it (the attempts it cancelled, and
//! any grant of a claim it dropped). Each call is tried once, under the
//! ordinary RPC deadline: a call lost on the way leaves the rest to
//! recovery, as a kill would.

use super::{AbortOnDrop, Ctx};
use crate::handler::TaskHandler;
use crate::proto::{Request, Transport};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

pub(super) async fn drain<T: Transport, H: TaskHandler>(ctx: &Arc<Ctx<T, H>>, background: Vec<AbortOnDrop<()>>) {
    let owner = ctx.owner;
    let grace = Duration::from_millis(ctx.cfg.stop_grace_ms);
    tracing::info!(%owner, grace_ms = ctx.cfg.stop_grace_ms, "asked to stop: no more claims, running attempts may finish");
    let every_permit = super::effective_concurrency(&ctx.cfg);
    // Every permit back means every attempt has ended.
    let drained = tokio::time::timeout(grace, ctx.permits.clone().acquire_many_owned(every_permit)).await;
    if drained.is_err() {
        cancel_attempts(ctx).await;
    }
    // No heartbeat may follow the deregistration.
    drop(background);
    ctx.call(Request::Deregister { owner }).await;
    // Nothing runs here now, and the store grants nothing more to this
    // incarnation: every task still leased to it is an orphan.
    let as_of_ms = ctx.clock.now_ms();
    ctx.call(Request::ReleaseOrphans { owner, running: Vec::new(), older_than_ms: 0, as_of_ms }).await;
    tracing::info!(%owner, "stopped");
}

/// Cancels every attempt still running and waits until each is gone (each
/// gives back its permit and running entry as it is dropped).
async fn cancel_attempts<T: Transport, H: TaskHandler>(ctx: &Arc<Ctx<T, H>>) {
    ctx.cancelling.store(true, Ordering::Relaxed);
    let attempts = std::mem::take(&mut *ctx.attempts.lock().expect("attempts lock"));
    tracing::info!(owner = %ctx.owner, cancelled = attempts.len(), "stop grace over: running attempts cancelled");
    for handle in attempts.values() {
        handle.abort();
    }
    for (_, handle) in attempts {
        let _ = handle.await;
    }
    ctx.cancelling.store(false, Ordering::Relaxed);
}
