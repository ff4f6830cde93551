//! One claimed attempt: execute it while holding its permit, keep its lease
//! renewed, then persist its outcome under a deadline and drop the permit.

use super::{AbortOnDrop, Ctx};
use crate::defects::Defect;
use crate::event::Event;
use crate::handler::{TaskError, TaskHandler};
use crate::ids::Fence;
use crate::proto::{Grant, PeerNote, Rejection, Request, Response, RpcError, Transport};
use crate::task::TaskKind;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OwnedSemaphorePermit;

pub(super) fn spawn<T: Transport, H: TaskHandler>(ctx: &Arc<Ctx<T, H>>, grant: Grant, permit: OwnedSemaphorePermit) {
    let fence = grant.fence;
    ctx.emit(Event::PermitAcquired { owner: ctx.owner, task: fence.task, attempt: fence.attempt });
    ctx.running.lock().expect("running lock").insert((fence.task, fence.attempt));
    let slot = Slot { ctx: ctx.clone(), fence, permit: Some(permit) };
    let attempts = ctx.clone();
    let ctx = ctx.clone();
    let handle = tokio::spawn(async move {
        let Some(expiry_ms) = confirm_lease(&ctx, &grant).await else {
            // The lease ran out before the attempt could start (a claim
            // answer that came late): another attempt may hold it by now.
            ctx.emit(Event::AttemptDropped { fence });
            tracing::info!(%fence, "claimed attempt not started: its lease ran out first");
            slot.release();
            return;
        };
        let _renewer = expiry_ms.map(|expiry_ms| {
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
        slot.release();
    });
    attempts.attempts.lock().expect("attempts lock").insert((fence.task, fence.attempt), handle);
}

/// An attempt's permit and running entry, given back exactly once: when
/// the attempt ends, or when a stop cancels it (a kill drops them with the
/// whole process, and there is nobody left to give them to).
struct Slot<T: Transport, H: TaskHandler> {
    ctx: Arc<Ctx<T, H>>,
    fence: Fence,
    permit: Option<OwnedSemaphorePermit>,
}

impl<T: Transport, H: TaskHandler> Slot<T, H> {
    fn release(mut self) {
        self.give_back();
    }

    fn give_back(&mut self) {
        let Some(permit) = self.permit.take() else { return };
        let (ctx, fence) = (&self.ctx, self.fence);
        ctx.running.lock().expect("running lock").remove(&(fence.task, fence.attempt));
        ctx.attempts.lock().expect("attempts lock").remove(&(fence.task, fence.attempt));
        ctx.emit(Event::PermitReleased { owner: ctx.owner, task: fence.task, attempt: fence.attempt });
        drop(permit);
    }
}

impl<T: Transport, H: TaskHandler> Drop for Slot<T, H> {
    fn drop(&mut self) {
        if self.ctx.cancelling.load(std::sync::atomic::Ordering::Relaxed) {
            self.give_back();
        }
    }
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
        // A1: no deadline; each write is one call awaited for as long as the
        // store takes, and the permit is held all that time.
        finalize(ctx, fence, kind, result, Patience::Forever).await;
        return;
    }
    let deadline = Duration::from_millis(ctx.cfg.finalize_deadline_ms);
    if tokio::time::timeout(deadline, finalize(ctx, fence, kind, result, Patience::Retry)).await.is_err() {
        ctx.emit(Event::FinalizeTimedOut { fence });
        tracing::warn!(%fence, deadline_ms = ctx.cfg.finalize_deadline_ms, "outcome persistence timed out; permit dropped, recovery stays authoritative");
    }
}

/// How an outcome write waits for the store.
#[derive(Clone, Copy)]
enum Patience {
    /// Each try under the RPC deadline, tried again until the finalization
    /// deadline around it runs out.
    Retry,
    /// One try, waited on without any deadline.
    Forever,
}

async fn finalize<T: Transport, H: TaskHandler>(
    ctx: &Arc<Ctx<T, H>>,
    fence: Fence,
    kind: TaskKind,
    result: Result<(), TaskError>,
    patience: Patience,
) {
    match result {
        Ok(()) => {
            if complete(ctx, fence, kind, patience).await {
                ctx.handler.completed(fence, kind).await;
                ctx.emit(Event::CallbackPublished { fence });
                tracing::info!(%fence, "completed; callback published");
            } else {
                tracing::info!(%fence, "completion not applied (rejected, lost or timed out)");
            }
        }
        Err(error) => {
            // Only the current attempt may record a failure: the lease check
            // locks the row (`SELECT … FOR UPDATE`), so nobody can take the
            // task between the check and the write that commits with it.
            let check = Request::LeaseValid { fence };
            let write = Request::Fail { fence, error };
            let answers = transaction(ctx, &[check, write], is_valid, patience).await;
            if let Some(Response::Applied { retries, retry_at_ms: Some(retry_at_ms) }) = answers.get(1) {
                if ctx.cfg.notify_peers {
                    spawn_note(ctx, fence, *retries, *retry_at_ms);
                }
            }
        }
    }
}

fn is_valid(resp: &Response) -> bool {
    matches!(resp, Response::Valid { valid: true })
}

/// Records success. A stage task's completion clears its stage link, marks
/// the stage done and completes the task in one transaction.
async fn complete<T: Transport, H: TaskHandler>(
    ctx: &Arc<Ctx<T, H>>,
    fence: Fence,
    kind: TaskKind,
    patience: Patience,
) -> bool {
    let applied = |resp: Option<&Response>| matches!(resp, Some(Response::Applied { .. }));
    if kind != TaskKind::Stage {
        return applied(outcome_call(ctx, Request::Complete { fence }, patience).await.as_ref().ok());
    }
    if ctx.cfg.defects.on(Defect::NonatomicStageComplete) {
        // B3: two transactions; a crash or a lost write between them leaves
        // a task that no stage references.
        if !applied(outcome_call(ctx, Request::ClearStageLink { fence }, patience).await.as_ref().ok()) {
            return false;
        }
        return applied(outcome_call(ctx, Request::Complete { fence }, patience).await.as_ref().ok());
    }
    let stmts = [Request::ClearStageLink { fence }, Request::Complete { fence }];
    let answers = transaction(ctx, &stmts, |resp| applied(Some(resp)), patience).await;
    applied(answers.get(1))
}

/// One outcome write (or lease check), sent again while it gets no answer
/// within an RPC deadline or a retryable conflict: nothing was applied, or it
/// was and the write is idempotent for its own attempt (a completion), or a
/// second try is refused harmlessly (a failure already recorded). The
/// finalization deadline around the whole persistence bounds the retries.
async fn outcome_call<T: Transport, H: TaskHandler>(
    ctx: &Arc<Ctx<T, H>>,
    req: Request,
    patience: Patience,
) -> Result<Response, RpcError> {
    if let Patience::Forever = patience {
        return ctx.transport.call(req).await;
    }
    let mut pause_ms = 100;
    loop {
        match ctx.call(req.clone()).await {
            None
            | Some(Response::Rejected { reason: Rejection::Conflict | Rejection::TimedOut | Rejection::LockTimeout }) =>
            {
                tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                pause_ms = (pause_ms * 2).min(ctx.cfg.rpc_timeout_ms);
            }
            Some(resp) => return Ok(resp),
        }
    }
}

/// Statements that must commit together, one round trip each, the last sent
/// with COMMIT; `go_on` decides after each earlier one whether to continue
/// (if not, the transaction is rolled back). Returns the answers of the try
/// that finished. A try that gets no answer, a retryable conflict, a lock
/// wait that timed out or a transaction that is no longer open is rolled
/// back and the whole transaction is tried again, as a new one: nothing of
/// it applied, or (an answer lost after COMMIT) it did and a second try is
/// refused harmlessly or answered as applied (a completion is idempotent for
/// its own attempt). The finalization deadline around it bounds the tries.
async fn transaction<T: Transport, H: TaskHandler>(
    ctx: &Arc<Ctx<T, H>>,
    stmts: &[Request],
    go_on: impl Fn(&Response) -> bool,
    patience: Patience,
) -> Vec<Response> {
    let mut pause_ms = 100;
    loop {
        let txn = ctx.new_txn();
        // Cut off mid-way (the finalization deadline dropped this future):
        // the transaction is rolled back rather than left to hold its locks.
        let mut open = RollbackOnDrop { ctx, txn: Some(txn) };
        let mut answers = Vec::with_capacity(stmts.len());
        for (i, stmt) in stmts.iter().enumerate() {
            let commit = i + 1 == stmts.len();
            let req = Request::Exec { txn, stmt: Box::new(stmt.clone()), commit };
            let answer = match patience {
                Patience::Forever => ctx.transport.call(req).await.ok(),
                Patience::Retry => ctx.call(req).await,
            };
            match answer {
                Some(resp) if !retryable(&resp) && commit => {
                    open.txn = None;
                    answers.push(resp);
                }
                Some(resp) if !retryable(&resp) && go_on(&resp) => answers.push(resp),
                Some(resp) if !retryable(&resp) => {
                    answers.push(resp);
                    return answers;
                }
                _ if matches!(patience, Patience::Forever) => return answers,
                _ => {
                    drop(open);
                    answers.clear();
                    break;
                }
            }
        }
        if !answers.is_empty() {
            return answers;
        }
        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        pause_ms = (pause_ms * 2).min(ctx.cfg.rpc_timeout_ms);
    }
}

/// Rolls its transaction back when dropped, unless it committed.
struct RollbackOnDrop<'a, T: Transport, H: TaskHandler> {
    ctx: &'a Arc<Ctx<T, H>>,
    txn: Option<crate::ids::TxnId>,
}

impl<T: Transport, H: TaskHandler> Drop for RollbackOnDrop<'_, T, H> {
    fn drop(&mut self) {
        if let Some(txn) = self.txn.take() {
            spawn_rollback(self.ctx, txn);
        }
    }
}

/// Answers after which the transaction is tried again from the start.
fn retryable(resp: &Response) -> bool {
    matches!(
        resp,
        Response::Rejected {
            reason: Rejection::Conflict | Rejection::TimedOut | Rejection::TxnClosed | Rejection::LockTimeout
        }
    )
}

/// Ends a transaction the worker gave up on, without waiting: the store
/// times it out anyway if the rollback is lost.
fn spawn_rollback<T: Transport, H: TaskHandler>(ctx: &Arc<Ctx<T, H>>, txn: crate::ids::TxnId) {
    let ctx = ctx.clone();
    tokio::spawn(async move {
        ctx.call(Request::Rollback { txn }).await;
    });
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

/// The lease an attempt may start under: the grant's, or (when the claim
/// answer came so late that the lease is already within its renewal margin
/// by this process's clock) a fresh one the store confirms by a renewal.
/// `None`: the lease is gone, the attempt must not start. `Some(None)`: the
/// task is owned by heartbeat and has no lease to lose.
async fn confirm_lease<T: Transport, H: TaskHandler>(ctx: &Arc<Ctx<T, H>>, grant: &Grant) -> Option<Option<u64>> {
    let Some(expiry_ms) = grant.lease_expiry_ms else {
        return Some(None);
    };
    let margin_ms = renew_margin_ms(ctx, grant.kind);
    if ctx.clock.now_ms() + margin_ms < expiry_ms {
        return Some(Some(expiry_ms));
    }
    match ctx.call_within(Request::Renew { fence: grant.fence }, renew_deadline_ms(ctx, margin_ms)).await {
        Some(Response::Renewed { lease_expiry_ms }) => Some(Some(lease_expiry_ms)),
        _ => None,
    }
}

/// How long before its expiry a lease of this kind is renewed.
fn renew_margin_ms<T: Transport, H: TaskHandler>(ctx: &Ctx<T, H>, kind: TaskKind) -> u64 {
    ctx.cfg.lease_ttl.for_kind(kind).map_or(0, |ttl| ttl / ctx.cfg.renew_divisor)
}

/// A renewal call gives up early enough to try again before the lease runs
/// out: a third of the renewal margin, at most one RPC deadline.
fn renew_deadline_ms<T: Transport, H: TaskHandler>(ctx: &Ctx<T, H>, margin_ms: u64) -> u64 {
    (margin_ms / 3).clamp(1, ctx.cfg.rpc_timeout_ms)
}

/// Renews the lease whenever its remaining time drops to TTL / renew_divisor.
/// Stops when the store rejects a renewal: the lease is gone.
async fn keep_renewed<T: Transport, H: TaskHandler>(
    ctx: Arc<Ctx<T, H>>,
    fence: Fence,
    kind: TaskKind,
    mut expiry_ms: u64,
) {
    if ctx.cfg.lease_ttl.for_kind(kind).is_none() {
        return;
    }
    let margin_ms = renew_margin_ms(&ctx, kind);
    let deadline_ms = renew_deadline_ms(&ctx, margin_ms);
    loop {
        ctx.sleep_until_local(expiry_ms.saturating_sub(margin_ms)).await;
        match ctx.call_within(Request::Renew { fence }, deadline_ms).await {
            Some(Response::Renewed { lease_expiry_ms }) => expiry_ms = lease_expiry_ms,
            // A transaction that timed out, waited out a lock or conflicted
            // is worth another try: nothing of it applied.
            Some(Response::Rejected { reason: Rejection::Conflict | Rejection::TimedOut | Rejection::LockTimeout }) => {
                tokio::time::sleep(Duration::from_millis((margin_ms / 4).max(1))).await
            }
            Some(Response::Rejected { .. }) => return,
            // No answer: try again soon, before the lease runs out.
            _ => tokio::time::sleep(Duration::from_millis((margin_ms / 4).max(1))).await,
        }
    }
}
