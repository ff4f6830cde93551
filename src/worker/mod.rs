//! A worker process: a claim loop under a concurrency semaphore, the attempts
//! it spawns, and the background duties beside it (heartbeats, recovery,
//! repair, maintenance passes, peer notes).
//!
//! The claim loop never awaits anything unbounded: maintenance passes run as
//! single-flight tasks that it only polls, and every attempt's outcome
//! persistence has a deadline after which its permit is dropped.

mod attempt;
mod background;
mod claim_loop;
mod maintenance;
mod stop;

use crate::clock::Clock;
use crate::config::EngineConfig;
use crate::defects::Defect;
use crate::event::{Event, Observer};
use crate::handler::TaskHandler;
use crate::ids::Owner;
use crate::proto::{Request, Response, RpcError, Transport};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinHandle;

/// Everything one worker incarnation's tasks share.
pub(crate) struct Ctx<T, H> {
    pub cfg: EngineConfig,
    pub owner: Owner,
    pub transport: T,
    pub handler: H,
    pub clock: Arc<dyn Clock>,
    pub obs: Arc<dyn Observer>,
    pub permits: Arc<Semaphore>,
    /// Wakes the claim loop early (a peer said a task is due).
    pub kick: Notify,
    /// Tasks this process is executing or finalizing (for same-owner recovery).
    pub running: std::sync::Mutex<std::collections::BTreeSet<(crate::ids::TaskId, u32)>>,
    /// The sequence number of the last transaction this incarnation opened.
    pub last_txn: std::sync::atomic::AtomicU64,
    /// Every attempt's task, until it ends: a stop cancels the ones still
    /// running when its grace runs out.
    pub attempts: std::sync::Mutex<std::collections::BTreeMap<(crate::ids::TaskId, u32), JoinHandle<()>>>,
    /// Set while a stop cancels attempts: an attempt dropped then gives
    /// back its permit and its running entry (one dropped by a kill has
    /// nobody to give them to).
    pub cancelling: std::sync::atomic::AtomicBool,
}

impl<T: Transport, H: TaskHandler> Ctx<T, H> {
    pub fn emit(&self, event: Event) {
        self.obs.emit(event);
    }

    /// A transaction this incarnation has never used.
    pub fn new_txn(&self) -> crate::ids::TxnId {
        let seq = self.last_txn.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        crate::ids::TxnId { owner: self.owner, seq }
    }

    /// A store call bounded by `deadline_ms`. `None` means the call never
    /// answered in time (or could not be delivered).
    pub async fn call_within(&self, req: Request, deadline_ms: u64) -> Option<Response> {
        match tokio::time::timeout(Duration::from_millis(deadline_ms), self.transport.call(req)).await {
            Ok(Ok(resp)) => Some(resp),
            Ok(Err(RpcError::Unavailable)) | Err(_) => None,
        }
    }

    /// A store call bounded by the ordinary RPC deadline.
    pub async fn call(&self, req: Request) -> Option<Response> {
        self.call_within(req, self.cfg.rpc_timeout_ms).await
    }

    /// Sleeps until this process's clock reads `at_ms` (store times are
    /// compared against the local clock, skew included).
    pub async fn sleep_until_local(&self, at_ms: u64) {
        let now_ms = self.clock.now_ms();
        if at_ms > now_ms {
            tokio::time::sleep(Duration::from_millis(at_ms - now_ms)).await;
        }
    }
}

/// The number of permits a worker runs with: exactly what was configured.
/// Durability topology (shard targets) must not serialize execution.
pub fn effective_concurrency(cfg: &EngineConfig) -> u32 {
    if cfg.defects.on(Defect::SingleShardSerialization) && cfg.shard_targets < 2 {
        // A3: durability topology serializes execution.
        return 1;
    }
    cfg.concurrency
}

/// Aborts the spawned task when dropped, so a worker's children end with it.
pub(crate) struct AbortOnDrop<R>(pub JoinHandle<R>);

impl<R> Drop for AbortOnDrop<R> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub struct Worker<T, H> {
    ctx: Arc<Ctx<T, H>>,
}

impl<T: Transport, H: TaskHandler> Worker<T, H> {
    pub fn new(
        cfg: EngineConfig,
        owner: Owner,
        transport: T,
        handler: H,
        clock: Arc<dyn Clock>,
        obs: Arc<dyn Observer>,
    ) -> Self {
        let permits = Arc::new(Semaphore::new(effective_concurrency(&cfg) as usize));
        let ctx = Ctx {
            cfg,
            owner,
            transport,
            handler,
            clock,
            obs,
            permits,
            kick: Notify::new(),
            running: Default::default(),
            last_txn: Default::default(),
            attempts: Default::default(),
            cancelling: Default::default(),
        };
        Worker { ctx: Arc::new(ctx) }
    }

    /// Runs the process until it is killed (the future is dropped).
    pub async fn run(self) {
        self.run_until(std::future::pending()).await;
    }

    /// Runs the process until it is killed, or until `stop` resolves: then
    /// it stops gracefully ([`stop::drain`]) and returns.
    pub async fn run_until(self, stop: impl std::future::Future<Output = ()>) {
        let ctx = self.ctx;
        ctx.emit(Event::ProcessStarted { owner: ctx.owner, concurrency: effective_concurrency(&ctx.cfg) });
        tracing::info!(owner = %ctx.owner, concurrency = effective_concurrency(&ctx.cfg), "worker started");
        let background = background::spawn_all(&ctx);
        tokio::select! {
            biased;
            _ = stop => {}
            _ = claim_loop::run(ctx.clone()) => {}
        }
        // The claim loop is dropped where it stood: a claim on its way or
        // held open, an idle wait, maintenance passes in flight.
        stop::drain(&ctx, background).await;
    }
}
