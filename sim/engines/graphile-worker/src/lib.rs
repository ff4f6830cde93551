//! graphile_worker 0.14.1 under the harness: its adapter.
//!
//! graphile's own worker (`graphile_worker::Worker`, built by its own
//! `WorkerOptions`) runs unmodified in each worker process. Only its
//! documented seams are the harness's: its runtime crate
//! (`graphile_worker_runtime`, patched in: `runtime/`, on madsim-tokio) and
//! its database (`driver::SimDatabase`, a `DatabaseDriver` that sends every
//! statement over the harness's store link). The store process answers with
//! a model of graphile's PostgreSQL (`model/`, crate
//! `leasesim-graphile-model`, checked against a real PostgreSQL by
//! `tests/graphile_conformance.rs`); [`classify`] says each statement and
//! answer in the harness's words, and the seam's tap reads the model's rows
//! back (`seam`).
//!
//! What graphile promises, as data ([`Graphile::promises`]): at most
//! `concurrency` jobs per worker; a failed job runs again after
//! `exp(min(attempts, 10))` seconds, until `max_attempts`; a job held by a
//! worker silent past `sweep_threshold_ms` is released by recovery (when it
//! is on); one job of a named queue at a time. What it cannot do
//! ([`Graphile::capabilities`]): leases that expire, fencing tokens,
//! outcome answers, testimony, groups, pipelines, indexes, maintenance.

pub mod body;
pub mod book;
pub mod classify;
pub mod client;
pub mod config;
pub mod driver;
pub mod seam;
pub mod worker;

use book::Book;
use config::GraphileConfig;
use driver::{Answer, Statement};
use leasesim_vocab::promise::{Backoff, Capabilities, LeaseTerms, Promises};
use leasesim_vocab::truth::ClientAnswer;
use leasesim_world::engine::{self, Adapter, BoxFuture, ClientWorld, Engine, EngineUnderTest, StoreWorld, WorkerWorld};
use leasesim_world::scenario::Scenario;
use leasesim_world::world::{Action, WorldResult, WorldSpec};
use seam::GraphileStore;
use std::sync::Arc;

/// The adapter's name, as a scenario's `[engine] name` gives it.
pub const NAME: &str = "graphile-worker";

/// graphile_worker, configured.
#[derive(Debug, Clone)]
pub struct Graphile {
    pub cfg: GraphileConfig,
}

impl EngineUnderTest for Graphile {
    type Request = Statement;
    type Response = Answer;
    type Store = GraphileStore;
    type Shared = Book;

    fn start(&self, world: &StoreWorld) -> (Arc<GraphileStore>, Book) {
        let book = Book::default();
        (Arc::new(GraphileStore::new(self.cfg.clone(), world.time.clone(), book.clone())), book)
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

impl Engine for Graphile {
    fn name(&self) -> &'static str {
        NAME
    }

    fn promises(&self) -> Promises {
        let c = &self.cfg;
        // Without recovery nothing releases a dead worker's jobs: its
        // holders are never dead by the engine's promise.
        let never = u64::MAX / 4;
        let (heartbeat_ms, dead_after_ms, sweep_ms) = match c.recovery {
            true => (c.heartbeat_interval_ms, c.sweep_threshold_ms, c.sweep_interval_ms),
            false => (never, never, never),
        };
        Promises {
            concurrency: c.concurrency,
            claim_batch_max: 1,
            idle_poll_ms: c.poll_interval_ms,
            long_poll_ms: 0,
            // Ownership rests on the worker's liveness, never on a lease.
            lease_ttl: LeaseTerms::default(),
            renew_divisor: 2,
            heartbeat_interval_ms: heartbeat_ms,
            dead_after_ms,
            cleanup_interval_ms: sweep_ms,
            backoff: Backoff::Exponential { unit_ms: 1_000, max_exponent: 10 },
            // A job dies on the failure that spends its last attempt.
            max_retries: c.max_attempts.saturating_sub(1),
            // An outcome write is one statement: it ends within the
            // connection's deadline, answered or not.
            finalize_deadline_ms: c.connection_timeout_ms,
            rpc_timeout_ms: c.connection_timeout_ms,
            maintenance: Vec::new(),
            maintenance_interval_ms: never,
            txn_timeout_ms: c.txn_timeout_ms,
            recovery_delay_ms: c.recovery_delay_ms,
            // `order by priority asc, run_at asc limit 1`: ties unordered.
            claim_order: leasesim_vocab::promise::ClaimOrder::Due,
            statement_time: leasesim_vocab::promise::StatementTime::Start,
            // `add_job` is one statement; a failure is the caller's to retry.
            enqueue_retry: None,
            // A failed complete_job or fail_job is returned as a
            // ReleaseJobError (runner/release/completion.rs, failure.rs):
            // the job stays locked until recovery unlocks it.
            outcome_retry: false,
            // No retry is sent (above), and complete_job of a job already
            // completed (deleted) is not an answer graphile promises.
            outcome_idempotent: false,
            // Each of `concurrency` loops fetches one job at a time; no
            // permits are reported to hold a claim's size against.
            claim_fills_free_permits: false,
            // The stale-job sweep (`ReleaseOwners`) runs on graphile's own
            // schedule, which is not modelled here yet: no cadence is
            // declared, and pass-cadence does not apply (`periodic_passes`).
            cadences: Vec::new(),
            // The store process closes a replaced process's connections
            // before it serves any request of a newer incarnation
            // (`GraphileStore::housekeeping`).
            replaced_txns_end: leasesim_vocab::promise::ReplacedTxnsEnd::AnyRequest,
            // `idle_in_transaction_session_timeout`: the store ends a
            // transaction idle that long since its latest statement
            // (`GraphileStore::touch`, `housekeeping`).
            txn_timeout_from: leasesim_vocab::promise::TxnTimeoutFrom::Idle,
            heartbeat_calls: 1,
            releases_by_process: false,
            // No graceful stop is wired to the world's stop signal yet.
            stop_grace_ms: 0,
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            testimony: false,
            permits: false,
            leases: false,
            fresh_attempts: false,
            heartbeats: self.cfg.recovery,
            orphan_recovery: false,
            outcome_answers: false,
            groups: false,
            pipelines: false,
            indexes: false,
            maintenance: false,
            transactions: true,
            named_queues: true,
            peer_notes: false,
            enqueue_keys: false,
            callbacks: false,
            // graphile reads the wall clock (chrono), which the simulator
            // keeps one for the whole world: no per-process offset.
            clock_seam: false,
            long_polls: false,
            fatal_errors: false,
            // Statements travel on connections: never delivered twice.
            redelivery: false,
            periodic_passes: false,
            // A worker that stops deletes its own row (`WorkerDeregister`).
            deregistration: true,
            // graphile has a shutdown signal, but this adapter does not
            // hand it the world's stop yet.
            graceful_stop: false,
        }
    }

    fn with_switches(&self, on: &[String]) -> Result<Arc<dyn Engine>, String> {
        match on.first() {
            None => Ok(Arc::new(self.clone())),
            Some(name) => Err(format!("unknown defect '{name}': graphile-worker runs as published, with no switches")),
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
        ];
        if let Some((field, _)) = other.iter().find(|(_, n)| *n > 0) {
            return Err(format!("workload.{field}: graphile-worker runs plain jobs only (use workload.jobs)"));
        }
        if !w.script.is_empty() {
            return Err("workload.script: graphile-worker scenarios enqueue drawn jobs only".into());
        }
        if w.fatal_rate > 0.0 {
            return Err(
                "workload.fatal_rate: graphile-worker retries every failure (it has no fatal errors); use 0".into()
            );
        }
        if s.faults.kinds.contains(&leasesim_vocab::faults::FaultKind::ClockOffset) && s.faults.max_clock_offset_ms > 0
        {
            return Err(
                "faults.kinds: graphile-worker reads the one wall clock of the world; leave out clock-offset".into()
            );
        }
        Ok(())
    }

    fn run(self: Arc<Self>, spec: WorldSpec, seed: u64) -> BoxFuture<'static, WorldResult> {
        Box::pin(leasesim_world::world::run(self, spec, seed))
    }
}

/// graphile_worker by name.
pub struct GraphileAdapter;

impl Adapter for GraphileAdapter {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "graphile_worker 0.14.1 (crates.io), its real worker on the simulator: PostgreSQL job queue with worker recovery"
    }

    fn configure(&self, table: &toml::Table) -> Result<Arc<dyn Engine>, String> {
        let cfg: GraphileConfig = engine::config_from_table(table)?;
        cfg.validate()?;
        Ok(Arc::new(Graphile { cfg }))
    }
}

/// graphile_worker's adapter, for an [`engine::Engines`] (`Engines::new().with(adapter())`).
pub fn adapter() -> Arc<dyn engine::Adapter> {
    Arc::new(GraphileAdapter)
}
