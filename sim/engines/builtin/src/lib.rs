//! The built-in engine (`src/`, crate `leasesim`) under the harness: its
//! adapter.
//!
//! The engine is generic over its own seams (`Transport`, `Clock`,
//! `TaskHandler`, `Observer`); this crate gives it the harness's: the store
//! link ([`transport::SimTransport`]), the world's clock, the task-body seam
//! and the recorder (its events become testimony). Its store runs as the
//! store process behind the store seam; [`convert`] says every request,
//! answer, row and event in the harness's words; [`tap`] reads the store's
//! rows back after each answer. [`variant`] holds the hooks fitness tests
//! use to make it behave like a buggy engine.

pub mod convert;
pub mod tap;
pub mod transport;
pub mod variant;

use leasesim::client::{Client, ClientKeys};
use leasesim::config::{EngineConfig, MaintenanceKind};
use leasesim::defects::{Defect, Defects};
use leasesim::event::{Event, Observer};
use leasesim::proto::{Rejection, Request, Response};
use leasesim::store::server::StoreServer;
use leasesim::worker::Worker;
use leasesim_vocab::op::{Op, Refusal};
use leasesim_vocab::promise::{Capabilities, Promises};
use leasesim_vocab::task::TaskKind;
use leasesim_vocab::truth::{ClientAnswer, Commit, Sender};
use leasesim_world::engine::{
    self, Adapter, BoxFuture, ClientWorld, Engine, EngineUnderTest, LastLook, StoreSeam, StoreWorld, WorkerWorld,
};
use leasesim_world::history::Recorder;
use leasesim_world::scenario::Scenario;
use leasesim_world::world::sim_clock::SimClock;
use leasesim_world::world::{Action, SimHandler, WorldResult, WorldSpec};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use transport::SimTransport;
use variant::Variant;

/// The adapter's name, as a scenario's `[engine] name` gives it (the default).
pub const NAME: &str = "builtin";

/// The built-in engine, configured.
#[derive(Clone)]
pub struct Builtin {
    /// The configuration the scenario promises.
    pub cfg: EngineConfig,
    /// A test's engine variant (never set outside fitness tests).
    pub variant: Option<Arc<dyn Variant>>,
}

impl Builtin {
    pub fn new(cfg: EngineConfig) -> Self {
        Builtin { cfg, variant: None }
    }

    /// The same engine, behaving as `variant` makes it (the scenario's
    /// configuration stays the promise the checkers hold it to).
    pub fn with_variant(mut self, variant: Arc<dyn Variant>) -> Self {
        self.variant = Some(variant);
        self
    }

    /// The configuration the engine runs with: the scenario's, unless a
    /// variant changes it.
    fn running_cfg(&self) -> EngineConfig {
        let mut cfg = self.cfg.clone();
        if let Some(variant) = &self.variant {
            variant.engine(&mut cfg);
        }
        cfg
    }

    fn observer(&self, rec: &Recorder) -> Arc<dyn Observer> {
        let obs: Arc<dyn Observer> = Arc::new(Testimony(rec.clone()));
        match &self.variant {
            Some(variant) => Arc::new(variant::Filtered { inner: obs, variant: variant.clone() }),
            None => obs,
        }
    }

    /// This engine as a scenario's `[engine]` section.
    pub fn section(self) -> leasesim_world::scenario::EngineSection {
        leasesim_world::scenario::EngineSection::new(Arc::new(self))
    }
}

/// A scenario's `[engine]` for the built-in engine with this configuration.
pub fn section(cfg: EngineConfig) -> leasesim_world::scenario::EngineSection {
    Builtin::new(cfg).section()
}

/// The engine's events, recorded as testimony.
struct Testimony(Recorder);

impl Observer for Testimony {
    fn emit(&self, event: Event) {
        if self.0.enabled() {
            self.0.testimony(convert::event(event));
        }
    }
}

/// The engine's clock seam: the world's clock for this process.
struct EngineClock(Arc<SimClock>);

impl leasesim::clock::Clock for EngineClock {
    fn now_ms(&self) -> u64 {
        self.0.now_ms()
    }
}

/// The engine's task-body seam: the harness's.
struct Body(SimHandler);

impl leasesim::handler::TaskHandler for Body {
    async fn execute(
        &self,
        fence: leasesim::ids::Fence,
        kind: leasesim::task::TaskKind,
    ) -> Result<(), leasesim::handler::TaskError> {
        let result = self.0.run(convert::fence(fence), convert::kind(kind)).await;
        result.map_err(convert::engine_task_error)
    }

    async fn completed(&self, fence: leasesim::ids::Fence, _kind: leasesim::task::TaskKind) {
        self.0.callback(convert::fence(fence));
    }
}

impl EngineUnderTest for Builtin {
    type Request = Request;
    type Response = Response;
    type Store = BuiltinStore;
    type Shared = Clients;

    fn start(&self, world: &StoreWorld) -> (Arc<BuiltinStore>, Clients) {
        let clock = Arc::new(EngineClock(Arc::new(SimClock::new(world.time.clone(), 0))));
        let server = Arc::new(StoreServer::new(self.running_cfg(), clock, self.observer(&world.rec)));
        (Arc::new(BuiltinStore { server, tap: tap::Tap::default(), variant: self.variant.clone() }), Clients::default())
    }

    fn run_worker(&self, w: WorkerWorld<Self>) -> BoxFuture<'static, ()> {
        let (cfg, obs, variant) = (self.running_cfg(), self.observer(&w.rec), self.variant.clone());
        Box::pin(async move {
            let transport = SimTransport::worker(w.link, w.owner.proc, &w.peers, w.rec.clone(), variant)
                .await
                .expect("a worker binds its address");
            let clock = Arc::new(EngineClock(w.clock));
            let worker = Worker::new(cfg, convert::engine_owner(w.owner), transport, Body(w.body), clock, obs);
            worker.run_until(w.stop.requested()).await;
        })
    }

    fn client_call(&self, c: ClientWorld<Self>, action: Action) -> BoxFuture<'static, ClientAnswer> {
        let transport = SimTransport::client(c.link, c.rec.clone(), self.variant.clone());
        let keys = c.shared.keys(c.client);
        let client = Client::new(transport, self.observer(&c.rec), self.cfg.rpc_timeout_ms).with_keys(keys);
        Box::pin(async move {
            match action {
                Action::Enqueue(spec) => {
                    ClientAnswer::Enqueued { task: client.enqueue(convert::engine_spec(&spec)).await }
                }
                Action::CreatePipeline { pipeline, stages } => {
                    ClientAnswer::PipelineCreated { ok: client.create_pipeline(pipeline, stages).await }
                }
                Action::Query { index, lag_timeout_ms } => {
                    ClientAnswer::Queried { materialized: client.query_index(index, lag_timeout_ms).await }
                }
            }
        })
    }
}

/// The application's clients in one world, by id: a long-lived client's
/// calls share its keys (the application holds one client for them all).
#[derive(Clone, Default)]
pub struct Clients(Arc<Mutex<BTreeMap<u64, ClientKeys>>>);

impl Clients {
    fn keys(&self, client: u64) -> ClientKeys {
        let mut clients = self.0.lock().expect("clients");
        clients.entry(client).or_insert_with(|| ClientKeys::new(client)).clone()
    }
}

/// The built-in store process behind the store seam.
pub struct BuiltinStore {
    server: Arc<StoreServer>,
    tap: tap::Tap,
    variant: Option<Arc<dyn Variant>>,
}

impl StoreSeam<Builtin> for BuiltinStore {
    fn classify(&self, _from: Sender, req: &Request) -> Op {
        convert::op(req)
    }

    fn normalize(&self, _op: &Op, resp: &Response) -> leasesim_vocab::op::Response {
        convert::response(resp)
    }

    fn refuse(&self, _op: &Op, why: Refusal, fault: Option<leasesim_vocab::faults::FaultKind>) -> Response {
        // Each answer as the store gives it: a statement timeout (57014), a
        // lock wait given up (55P03), a transaction no longer open, a
        // serialization failure (40001); the built-in store runs
        // serializable, so a deadlock is answered as a conflict too.
        let _ = fault;
        let reason = match why {
            Refusal::TimedOut => Rejection::TimedOut,
            Refusal::TxnClosed => Rejection::TxnClosed,
            Refusal::LockTimeout => Rejection::LockTimeout,
            _ => Rejection::Conflict,
        };
        Response::Rejected { reason }
    }

    fn serve(&self, req: Request) -> BoxFuture<'_, Response> {
        match &self.variant {
            Some(variant) => variant.store(&self.server, req),
            None => Box::pin(self.server.handle(req)),
        }
    }

    fn abort(&self, txn: leasesim_vocab::ids::TxnId) {
        let txn = leasesim::ids::TxnId { owner: convert::engine_owner(txn.owner), seq: txn.seq };
        self.server.apply_now(&Request::Rollback { txn });
    }

    fn crash(&self) {
        self.server.lose_open_transactions();
    }

    fn tap(&self, op: Option<&Op>) -> Commit {
        let scope = op.map_or(tap::Scope::WHOLE, tap::Scope::of);
        self.tap.sync(&self.server, scope)
    }

    fn last_look(&self) -> LastLook {
        self.server.with_store(|s| LastLook {
            tasks: s.tasks().map(convert::row).collect(),
            stages: s.stages().map(|(stage, row)| (convert::stage(*stage), convert::stage_row(row))).collect(),
            materialized: s.materialized().collect(),
            queues: Vec::new(),
        })
    }

    fn process(&self) -> Option<BoxFuture<'static, ()>> {
        self.variant.as_ref().and_then(|v| v.store_process(self.server.clone()))
    }
}

impl Engine for Builtin {
    fn name(&self) -> &'static str {
        NAME
    }

    fn promises(&self) -> Promises {
        convert::promises(&self.cfg)
    }

    fn capabilities(&self) -> Capabilities {
        // Everything the harness knows but named queues.
        Capabilities { named_queues: false, ..Capabilities::ALL }
    }

    fn with_switches(&self, on: &[String]) -> Result<Arc<dyn Engine>, String> {
        let mut defects = Defects::none();
        for name in on {
            let defect = Defect::from_name(name).ok_or_else(|| {
                let known: Vec<&str> = Defect::ALL.iter().map(|d| d.name()).collect();
                format!("unknown defect '{name}' (known: {})", known.join(", "))
            })?;
            defects.0.insert(defect);
        }
        let mut engine = self.clone();
        engine.cfg.defects = defects;
        Ok(Arc::new(engine))
    }

    fn switches_on(&self) -> Vec<String> {
        self.cfg.defects.names().iter().map(|d| d.to_string()).collect()
    }

    fn config(&self) -> toml::Table {
        toml::Table::try_from(&self.cfg).expect("an engine configuration is a TOML table")
    }

    fn validate(&self, s: &Scenario) -> Result<(), String> {
        let w = &s.workload;
        let builds =
            w.index_builds + w.after_heal_index_builds > 0 || w.script.iter().any(|e| e.kind == TaskKind::IndexBuild);
        if builds && !self.cfg.maintenance.contains(&MaintenanceKind::Index) {
            return Err("engine.maintenance: index builds (workload.index_builds, workload.after_heal_index_builds or the script) \
                 need an \"index\" finalization pass to materialize".into());
        }
        let stages = w.pipelines > 0 || w.script.iter().any(|e| e.kind == TaskKind::Stage);
        if stages && !self.cfg.maintenance.contains(&MaintenanceKind::Pipeline) {
            return Err(
                "engine.maintenance: pipelines (workload.pipelines or the script) need a \"pipeline\" pass to enqueue \
                 their stages' tasks"
                    .into(),
            );
        }
        Ok(())
    }

    fn run(self: Arc<Self>, spec: WorldSpec, seed: u64) -> BoxFuture<'static, WorldResult> {
        Box::pin(leasesim_world::world::run(self, spec, seed))
    }
}

/// The built-in engine by name.
pub struct BuiltinAdapter;

impl Adapter for BuiltinAdapter {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "leasesim's own lease engine (src/): leases and heartbeats, groups, pipelines, indexes, maintenance, transactions"
    }

    fn switches(&self) -> Vec<(&'static str, &'static str)> {
        Defect::ALL.iter().map(|d| (d.name(), d.description())).collect()
    }

    fn configure(&self, table: &toml::Table) -> Result<Arc<dyn Engine>, String> {
        let cfg: EngineConfig = engine::config_from_table(table)?;
        cfg.validate()?;
        Ok(Arc::new(Builtin::new(cfg)))
    }
}

/// The built-in engine's adapter, for an [`engine::Engines`] (`Engines::new().with(adapter())`).
pub fn adapter() -> Arc<dyn engine::Adapter> {
    Arc::new(BuiltinAdapter)
}

/// The built-in engine of `section` (its configuration and switches),
/// behaving as `variant` makes it (fitness tests).
///
/// # Panics
/// If `section` is not the built-in engine's.
pub fn with_variant(
    section: &leasesim_world::scenario::EngineSection,
    variant: Arc<dyn Variant>,
) -> leasesim_world::scenario::EngineSection {
    let engine = section.get();
    assert_eq!(engine.name(), NAME, "a variant of the built-in engine needs a scenario of it");
    let mut cfg: EngineConfig = engine.config().try_into().expect("the built-in engine's configuration reads back");
    cfg.defects = Defects(engine.switches_on().iter().filter_map(|d| Defect::from_name(d)).collect());
    Builtin::new(cfg).with_variant(variant).section()
}
