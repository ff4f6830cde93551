//! The engine boundary: what an engine under test gives the harness, and
//! what the harness gives it.
//!
//! The shape is TigerBeetle's cluster generic over its state machine: the
//! world ([`crate::world::run`]) is generic over an [`EngineUnderTest`],
//! which says how to start its store process behind the harness's store
//! seam, how to run one incarnation of a worker process and how the client
//! makes one call. Everything that crosses a process boundary goes through
//! the harness's own link ([`crate::world::link::Link`]), so every store and
//! process fault applies to every engine alike, and everything recorded is
//! in the harness's vocabulary ([`leasesim_vocab`]): the adapter classifies
//! each request ([`StoreSeam::classify`]), normalizes each answer and each
//! stored row. An adapter replaces only an engine's documented seams (its
//! runtime, its database driver, its transport); the engine's code runs
//! unmodified.
//!
//! [`Adapter`] (an engine by name, as a scenario's `[engine]` names it) and
//! [`Engine`] (an adapter with its configuration, object-safe so campaigns
//! need no generics) are the registry side of the same boundary.

use crate::history::Recorder;
use crate::scenario::Scenario;
use crate::world::handler::SimHandler;
use crate::world::injector::Injector;
use crate::world::link::Link;
use crate::world::sim_clock::{SimClock, SimTime};
use crate::world::workload::Action;
use crate::world::{WorldResult, WorldSpec};
use leasesim_vocab::faults::FaultKind;
use leasesim_vocab::ids::{Owner, ProcId, StageRef, TxnId};
use leasesim_vocab::op::{Op, Refusal, Response};
use leasesim_vocab::promise::{Capabilities, Promises};
use leasesim_vocab::task::{QueueId, QueueRow, Row, StageRow};
use leasesim_vocab::truth::{ClientAnswer, Commit, Sender};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An engine under test, typed: its wire requests and answers, its store
/// process, its worker processes and its client.
pub trait EngineUnderTest: Send + Sync + Sized + 'static {
    /// What a process sends to the store (an RPC, a SQL statement).
    type Request: Clone + Send + Sync + 'static;
    /// What the store answers.
    type Response: Send + 'static;
    /// The store process as the store seam drives it.
    type Store: StoreSeam<Self>;
    /// State of the adapter's own that one world's processes share (the
    /// harness's bookkeeping, and the application's long-lived clients;
    /// never the engine's store or workers).
    type Shared: Clone + Send + Sync + 'static;

    /// A fresh store process (its committed state empty) and the shared
    /// bookkeeping of one world.
    fn start(&self, world: &StoreWorld) -> (Arc<Self::Store>, Self::Shared);

    /// Runs one incarnation of worker process `w.owner` until it is killed,
    /// or until it exits (the future completes: its engine gave up, as a
    /// process whose `main` returns an error). An exited process is
    /// restarted as a new incarnation after [`Self::restart_delay_ms`], as
    /// a supervisor would restart it.
    fn run_worker(&self, w: WorkerWorld<Self>) -> BoxFuture<'static, ()>;

    /// How long a process that exited stays down before its supervisor
    /// starts it again.
    fn restart_delay_ms(&self) -> u64 {
        1_000
    }

    /// One call of the application's client (its answer is recorded by the
    /// world at the client seam).
    fn client_call(&self, c: ClientWorld<Self>, action: Action) -> BoxFuture<'static, ClientAnswer>;
}

/// The store process of one engine, as the store seam sees it: every
/// request classified before it is served, served by the engine's own store
/// (or its model), and every row read back by the harness.
pub trait StoreSeam<E: EngineUnderTest>: Send + Sync + 'static {
    /// The request in the harness's words. `from` is who sent it as the
    /// link saw it, not as the request claims.
    fn classify(&self, from: Sender, req: &E::Request) -> Op;

    /// A request from `from` reached the running store, and its arrival is
    /// recorded: what the store does on any request before serving it (a
    /// PostgreSQL model closes the connections of incarnations a newer one
    /// replaced, and ends transactions idle past their timeout). Called
    /// after the arrival is recorded, not in `classify`, so that the history
    /// shows the arrival before what it causes (a lock freed, a waiting
    /// statement answered).
    fn arrived(&self, _from: Sender) {}

    /// A request that does several things (a script that records the
    /// outcomes of several tasks), told as the several things it does: it
    /// is recorded as one request per part, each answered with its own
    /// share of the commit (a task change goes to the part whose fence
    /// names the task). Faults strike the whole request; the first part
    /// decides which. Default: the one thing `classify` says.
    fn classify_parts(&self, from: Sender, req: &E::Request) -> Vec<Op> {
        vec![self.classify(from, req)]
    }

    /// The answer to the request classified as `op`, in the harness's words.
    fn normalize(&self, op: &Op, resp: &E::Response) -> Response;

    /// How the store answers a request that the harness refused for it
    /// (`fault`: the fault that did; `None`: the request's own statement
    /// timeout), nothing of it applied: the answer that store gives in that
    /// situation (a SQL store's SQLSTATE for a serialization failure, a
    /// statement timeout...). `why` is the harness's name for the situation.
    fn refuse(&self, op: &Op, why: Refusal, fault: Option<FaultKind>) -> E::Response;

    /// Serves one request: the engine's store applies it, waiting for row
    /// locks or holding it open as the store does.
    fn serve(&self, req: E::Request) -> BoxFuture<'_, E::Response>;

    /// The database aborted this transaction (a fault refused one of its
    /// statements): nothing it wrote applies, its locks are released.
    /// Default: nothing to do, for a store whose every request is a
    /// transaction of its own (a Redis command or script), so no
    /// transaction is ever open between requests.
    fn abort(&self, _txn: TxnId) {}

    /// The store process died: open transactions are lost, committed state
    /// survives.
    fn crash(&self);

    /// What changed in the store since the last look, within what `op` may
    /// change (`None`: the whole store), read by the harness itself. Called
    /// right before a request is served (a change then is drift) and right
    /// after it answered (its commit).
    fn tap(&self, op: Option<&Op>) -> Commit;

    /// The whole store at the end of the run.
    fn last_look(&self) -> LastLook;

    /// Work of its own the store process runs beside serving requests (a
    /// test's engine variant may have some), started on the store's node.
    fn process(&self) -> Option<BoxFuture<'static, ()>> {
        None
    }

    /// Should a fault-free duplicate of this request be possible (a network
    /// or proxy delivering it twice)? Held requests and maintenance are not.
    fn may_duplicate(&self, op: &Op) -> bool {
        crate::world::store_node::may_duplicate(op)
    }
}

/// The store's committed state at the end of a run, normalized.
#[derive(Debug, Clone, Default)]
pub struct LastLook {
    pub tasks: Vec<Row>,
    pub stages: Vec<(StageRef, StageRow)>,
    pub materialized: Vec<u64>,
    pub queues: Vec<(QueueId, QueueRow)>,
}

/// What the world gives an engine's store process.
#[derive(Clone)]
pub struct StoreWorld {
    pub time: SimTime,
    pub rec: Recorder,
    pub seed: u64,
    pub scenario: Arc<Scenario>,
}

/// What the world gives one incarnation of a worker process.
pub struct WorkerWorld<E: EngineUnderTest> {
    pub owner: Owner,
    /// Its way to the store (every store and network fault applies).
    pub link: Link<E>,
    /// Its clock: the world's time plus the plan's offset for it.
    pub clock: Arc<SimClock>,
    /// The task-body seam: run every attempt's body through it.
    pub body: SimHandler,
    /// For testimony and facts the adapter records at its own seams.
    pub rec: Recorder,
    pub faults: Arc<Injector>,
    pub scenario: Arc<Scenario>,
    pub seed: u64,
    /// The other worker processes (for peer notes, if the engine has them).
    pub peers: Vec<ProcId>,
    pub shared: E::Shared,
    /// This incarnation's stop signal (a graceful stop: an adapter whose
    /// engine can stop hands it to the engine's shutdown seam).
    pub stop: crate::world::stop::Stop,
}

/// What the world gives one call of the application's client.
pub struct ClientWorld<E: EngineUnderTest> {
    /// The call's number (its sender at the store seam).
    pub call: u64,
    /// The application client making the call: its identity, the same for
    /// every call of one long-lived client (`workload.clients`), and the
    /// call's own number when every call has a client of its own.
    pub client: u64,
    pub link: Link<E>,
    pub rec: Recorder,
    pub scenario: Arc<Scenario>,
    pub shared: E::Shared,
}

/// An engine by name: how a scenario's `[engine]` table becomes a
/// configured [`Engine`].
pub trait Adapter: Send + Sync + 'static {
    /// The name a scenario gives (`[engine] name = "..."`).
    fn name(&self) -> &'static str;
    /// One line for `cargo sim list`.
    fn about(&self) -> &'static str;
    /// Its defect switches: (name, what it breaks). Only `--defect` or a
    /// corpus entry turns one on. Default: none (an engine run as published).
    fn switches(&self) -> Vec<(&'static str, &'static str)> {
        Vec::new()
    }
    /// The engine configured by a scenario's `[engine]` table (without its
    /// `name`). The error is one line naming the field (`lease_ttl.job_ms:
    /// ...`); the caller prefixes `engine.`.
    fn configure(&self, table: &toml::Table) -> Result<Arc<dyn Engine>, String>;
}

/// A configured engine, as campaigns carry it.
pub trait Engine: Send + Sync + 'static {
    fn name(&self) -> &'static str;
    fn promises(&self) -> Promises;
    fn capabilities(&self) -> Capabilities;
    /// The same engine with these defect switches on (the error names an
    /// unknown switch).
    fn with_switches(&self, on: &[String]) -> Result<Arc<dyn Engine>, String>;
    /// The switches that are on, sorted. Default: none.
    fn switches_on(&self) -> Vec<String> {
        Vec::new()
    }
    /// Its whole configuration, every field (without `name`), as a scenario's
    /// `[engine]` table would give it.
    fn config(&self) -> toml::Table;
    /// Relations between the engine's configuration and the rest of the
    /// world that a run needs (index builds need an index pass...); the
    /// error is one line naming the field.
    fn validate(&self, scenario: &Scenario) -> Result<(), String>;
    /// Runs one world. Must be called inside a madsim runtime seeded `seed`.
    fn run(self: Arc<Self>, spec: WorldSpec, seed: u64) -> BoxFuture<'static, WorldResult>;
}

/// A scenario's `[engine]` table (without its `name`) as an adapter's
/// configuration type, for `Adapter::configure`: an unknown field or a bad
/// value is one line naming the field (`lease_ttl.job_ms: ...`).
pub fn config_from_table<C: serde::de::DeserializeOwned>(table: &toml::Table) -> Result<C, String> {
    serde_path_to_error::deserialize(toml::Value::Table(table.clone())).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string().trim().replace('\n', " ");
        if path.is_empty() || path == "." {
            message
        } else {
            format!("{path}: {message}")
        }
    })
}

/// The engines a campaign may run, by name: a value that the CLI and tests
/// build and pass down (no process-wide registry). Parsing a scenario needs
/// none; configuring its `[engine]` does ([`Engines::configure`]).
#[derive(Clone, Default)]
pub struct Engines {
    /// Sorted by name, names unique.
    adapters: Arc<Vec<Arc<dyn Adapter>>>,
}

impl Engines {
    /// No engine yet: add each with [`Engines::with`].
    pub fn new() -> Self {
        Engines::default()
    }

    /// These engines and `adapter` (one of the same name is replaced).
    pub fn with(self, adapter: Arc<dyn Adapter>) -> Self {
        let mut all: Vec<Arc<dyn Adapter>> =
            self.adapters.iter().filter(|a| a.name() != adapter.name()).cloned().collect();
        all.push(adapter);
        all.sort_by_key(|a| a.name());
        Engines { adapters: Arc::new(all) }
    }

    /// The adapter of this name; else one line naming the known ones.
    pub fn adapter(&self, name: &str) -> Result<Arc<dyn Adapter>, String> {
        self.adapters.iter().find(|a| a.name() == name).cloned().ok_or_else(|| {
            let known: Vec<&str> = self.names();
            format!("unknown engine '{name}' (known: {})", known.join(", "))
        })
    }

    /// Every adapter, sorted by name.
    pub fn known(&self) -> &[Arc<dyn Adapter>] {
        &self.adapters
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.adapters.iter().map(|a| a.name()).collect()
    }

    /// The engine a scenario's `[engine]` table describes, configured (the
    /// error is one line naming the field within `[engine]`).
    pub fn configure(&self, described: &crate::scenario::Described) -> Result<Arc<dyn Engine>, String> {
        let adapter = self.adapter(&described.name).map_err(|e| format!("name: {e}"))?;
        adapter.configure(&described.table)
    }

    /// `name`, if one of these engines has a defect switch of that name
    /// (each run checks its own engine's); else one line listing them all.
    pub fn known_defect(&self, name: &str) -> Result<String, String> {
        let known: Vec<&str> = self.adapters.iter().flat_map(|a| a.switches()).map(|(name, _)| name).collect();
        if known.contains(&name) {
            Ok(name.to_string())
        } else {
            Err(format!("unknown defect '{name}' (known: {})", known.join(", ")))
        }
    }
}

impl std::fmt::Debug for Engines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Engines({:?})", self.names())
    }
}

/// The name of the engine a scenario without `[engine] name` runs.
pub const DEFAULT_ENGINE: &str = "builtin";
