//! The claim loop: take permits, claim that many due tasks, hand each claimed
//! attempt its permit, repeat. Maintenance is polled here, never awaited.

use super::maintenance::Maintenance;
use super::{attempt, Ctx};
use crate::handler::TaskHandler;
use crate::proto::{Request, Response, Transport};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OwnedSemaphorePermit;

pub(super) async fn run<T: Transport, H: TaskHandler>(ctx: Arc<Ctx<T, H>>) {
    let mut maintenance = Maintenance::new(&ctx.cfg);
    let idle = Duration::from_millis(ctx.cfg.idle_poll_ms);
    loop {
        maintenance.poll(&ctx).await;
        let Some(permits) = take_permits(&ctx, idle).await else {
            continue;
        };
        let asked = permits.len() as u32;
        let req = Request::Claim { owner: ctx.owner, max: asked, wait_ms: ctx.cfg.long_poll_ms };
        let deadline_ms = ctx.cfg.long_poll_ms + ctx.cfg.rpc_timeout_ms;
        let sent_ms = ctx.clock.now_ms();
        let answer = ctx.call_within(req, deadline_ms).await;
        let grants = match answer {
            Some(Response::Claimed { grants }) if ctx.clock.now_ms().saturating_sub(sent_ms) <= deadline_ms => grants,
            Some(Response::Claimed { grants }) => {
                // Taken in after the claim deadline (the process was paused
                // while the answer waited): dropped unstarted. Same-owner
                // recovery counts on every grant older than the deadline
                // being either in `running` or an orphan; starting this one
                // would run a task that recovery may already have released.
                tracing::info!(owner = %ctx.owner, late = grants.len(), "claim answer past its deadline: not started");
                Vec::new()
            }
            _ => Vec::new(),
        };
        debug_assert!(grants.len() <= permits.len(), "store granted more than asked");
        let claimed_any = !grants.is_empty();
        if claimed_any {
            tracing::debug!(owner = %ctx.owner, asked, claimed = grants.len(), "claimed");
        }
        for (grant, permit) in grants.into_iter().zip(permits) {
            attempt::spawn(&ctx, grant, permit);
        }
        if !claimed_any {
            tokio::select! {
                biased;
                _ = ctx.kick.notified() => {}
                _ = tokio::time::sleep(idle) => {}
            }
        }
    }
}

/// Waits (at most one idle period) for a free permit, then takes every other
/// free one up to the claim batch size.
async fn take_permits<T: Transport, H: TaskHandler>(
    ctx: &Ctx<T, H>,
    idle: Duration,
) -> Option<Vec<OwnedSemaphorePermit>> {
    let first = tokio::select! {
        biased;
        permit = ctx.permits.clone().acquire_owned() => permit.expect("semaphore never closed"),
        _ = tokio::time::sleep(idle) => return None,
    };
    let mut permits = vec![first];
    while (permits.len() as u32) < ctx.cfg.claim_batch_max {
        match ctx.permits.clone().try_acquire_owned() {
            Ok(permit) => permits.push(permit),
            Err(_) => break,
        }
    }
    Some(permits)
}
