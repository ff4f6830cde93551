//! apalis-redis 1.0.0 under the harness: its adapter.
//!
//! apalis's own worker (`apalis_core::worker::builder::WorkerBuilder` with
//! `apalis_redis::RedisStorage<Args, SimRedis>`) runs unmodified. Only its
//! documented seams are the harness's: its timer crate (`futures-timer`,
//! patched in: `timer/`, on madsim time) and its connection
//! ([`conn::SimRedis`], a `redis::aio::ConnectionLike` that sends every
//! command over a [`conn::Wire`] of the harness's). The store answers with a
//! model of Redis that runs apalis's real Lua scripts (`redis-model/`, crate
//! `leasesim-redis-model`, checked against a real redis-server).

pub mod book;
pub mod call;
pub mod client;
pub mod config;
pub mod conn;
pub mod resp;
pub mod seam;
pub mod wire;
pub mod worker;

use book::Book;
use config::ApalisConfig;
use leasesim_redis_model::Reply;
use leasesim_vocab::promise::{Backoff, Capabilities, Core, LeaseTerms, Promises};
use leasesim_vocab::truth::ClientAnswer;
use leasesim_world::engine::{self, Adapter, BoxFuture, ClientWorld, Engine, EngineUnderTest, StoreWorld, WorkerWorld};
use leasesim_world::scenario::Scenario;
use leasesim_world::world::{Action, WorldResult, WorldSpec};
use seam::{ApalisStore, Command};
use std::sync::Arc;

/// The adapter's name, as a scenario's `[engine] name` gives it.
pub const NAME: &str = "apalis-redis";

/// apalis-redis, configured.
#[derive(Debug, Clone)]
pub struct Apalis {
    pub cfg: ApalisConfig,
}

impl EngineUnderTest for Apalis {
    type Request = Command;
    type Response = Reply;
    type Store = ApalisStore;
    type Shared = Book;

    fn start(&self, world: &StoreWorld) -> (Arc<ApalisStore>, Book) {
        let book = Book::new(self.cfg.worker_names == config::WorkerNames::PerRun);
        let store = ApalisStore::new(&self.cfg, world.time.clone(), book.clone());
        (Arc::new(store), book)
    }

    fn run_worker(&self, w: WorkerWorld<Self>) -> BoxFuture<'static, ()> {
        Box::pin(worker::run(self.cfg.clone(), w))
    }

    fn client_call(&self, c: ClientWorld<Self>, action: Action) -> BoxFuture<'static, ClientAnswer> {
        Box::pin(client::call(self.cfg.clone(), c, action))
    }

    fn restart_delay_ms(&self) -> u64 {
        self.cfg.restart_delay_ms
    }
}

impl Engine for Apalis {
    fn name(&self) -> &'static str {
        NAME
    }

    fn promises(&self) -> Promises {
        let c = &self.cfg;
        let core = Core {
            // apalis-core runs every task it fetched at once: no bound of
            // its own (none is configured by the application here).
            concurrency: u32::MAX / 4,
            claim_batch_max: c.batch_size,
            // An idle worker parks until something wakes it; its heartbeat
            // timer does, every interval.
            idle_poll_ms: c.heartbeat_interval_ms,
            // Ownership is the worker's liveness: its name's score in the
            // workers set (`keep_alive`), never a lease that expires.
            lease_ttl: LeaseTerms::default(),
            heartbeat_interval_ms: c.heartbeat_interval_ms,
            // `Config::orphaned_duration`: another worker's heartbeat
            // re-enqueues the tasks of a name silent that long, counted in
            // whole seconds (`score <= now_s - duration_s`, a score being
            // its worker's clock in seconds, rounded down, when it sent
            // its keep-alive): up to a second sooner than the exact span.
            dead_after_ms: c.orphaned_after_ms().saturating_sub(1_000),
            cleanup_interval_ms: c.heartbeat_interval_ms,
            // `handle_results.lua`: a failure is due again `attempt`
            // seconds after it; no backoff the vocabulary has fits, and
            // retry-clock judges only the never-early half from the row.
            backoff: Backoff::Doubling { base_ms: 0, cap_ms: 0 },
            // The application's budget on the jobs it pushes, as apalis's
            // API documents it (`TaskBuilder::max_attempts`; 25 when none
            // is given). apalis-redis 1.0.0's `handle_results.lua` gives up
            // at attempt 25 whatever the budget (max-attempts-ignored).
            max_retries: c.max_attempts - 1,
            // A finished task's result waits in apalis-core's event buffer
            // until the worker's next wake-up drains it (`poll_ready`): at
            // the latest its heartbeat timer's, then one call.
            finalize_deadline_ms: c.heartbeat_interval_ms + c.response_timeout_ms,
            rpc_timeout_ms: c.response_timeout_ms,
        };
        // The rest are `Promises::new`'s defaults (no maintenance, no
        // transactions, claims in no promised order: the head of the active
        // list; a failed `handle_results` stops the worker, so no outcome
        // is tried again) but for these.
        Promises {
            txn_timeout_from: leasesim_vocab::promise::TxnTimeoutFrom::Idle,
            // apalis-core arms the next heartbeat only once the round is
            // over: keep_alive, renew_leases (with lock_tasks), then
            // reenqueue_orphaned, one after another.
            heartbeat_calls: if c.lock_tasks { 3 } else { 2 },
            // A re-enqueue names worker names: with a name per process,
            // each stands for every run of it.
            releases_by_process: c.worker_names == config::WorkerNames::PerProcess,
            ..Promises::new(core)
        }
    }

    fn capabilities(&self) -> Capabilities {
        // Ownership by liveness alone. Not `clock_seam`: apalis reads the
        // wall clock, one for the whole world; not `redelivery`: commands
        // travel on connections, never delivered twice. A worker deregisters
        // as it stops.
        Capabilities { heartbeats: true, deregistration: true, ..Capabilities::NONE }
    }

    fn with_switches(&self, on: &[String]) -> Result<Arc<dyn Engine>, String> {
        match on.first() {
            None => Ok(Arc::new(self.clone())),
            Some(name) => Err(format!("unknown defect '{name}': apalis-redis runs as published, with no switches")),
        }
    }

    fn config(&self) -> toml::Table {
        toml::Table::try_from(&self.cfg).expect("a configuration is a TOML table")
    }

    fn validate(&self, s: &Scenario) -> Result<(), String> {
        let w = &s.workload;
        let other = [
            ("index_builds", w.index_builds + w.after_heal_index_builds),
            ("authz_materializations", w.authz_materializations),
            ("pipelines", w.pipelines),
            ("workflow_runs", w.workflow_runs),
            ("queues", w.queues),
        ];
        if let Some((field, _)) = other.iter().find(|(_, n)| *n > 0) {
            return Err(format!(
                "workload.{field}: apalis-redis runs plain jobs of one queue only (use workload.jobs)"
            ));
        }
        if !w.script.is_empty() {
            return Err("workload.script: apalis-redis scenarios push drawn jobs only".into());
        }
        if w.fatal_rate > 0.0 {
            return Err(
                "workload.fatal_rate: apalis-redis retries every failure (it has no fatal errors); use 0".into()
            );
        }
        if s.faults.kinds.contains(&leasesim_vocab::faults::FaultKind::ClockOffset) && s.faults.max_clock_offset_ms > 0
        {
            return Err(
                "faults.kinds: apalis-redis reads the one wall clock of the world; leave out clock-offset".into()
            );
        }
        Ok(())
    }

    fn run(self: Arc<Self>, spec: WorldSpec, seed: u64) -> BoxFuture<'static, WorldResult> {
        Box::pin(leasesim_world::world::run(self, spec, seed))
    }
}

/// apalis-redis by name.
pub struct ApalisAdapter;

impl Adapter for ApalisAdapter {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "apalis-redis 1.0.0 (crates.io), its real worker and Lua scripts on the simulator: Redis job queue with orphan re-enqueueing"
    }

    fn configure(&self, table: &toml::Table) -> Result<Arc<dyn Engine>, String> {
        let cfg: ApalisConfig = engine::config_from_table(table)?;
        cfg.validate()?;
        Ok(Arc::new(Apalis { cfg }))
    }
}

/// apalis-redis's adapter, for an [`engine::Engines`] (`Engines::new().with(adapter())`).
pub fn adapter() -> Arc<dyn engine::Adapter> {
    Arc::new(ApalisAdapter)
}
