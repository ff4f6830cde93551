//! One simulated world, run for one seed: a store process, worker processes
//! and a client process as madsim nodes, joined by the simulated network.
//!
//! The run is a fault phase (the plan's faults fire), a heal (faults stop,
//! paused processes resume, dead ones restart), and a liveness phase in which
//! the world must converge. The world records every event into the history
//! and, at the end, kills every node so nothing outlives the run.

pub mod builtin;
mod controller;
mod handler;
mod injector;
pub mod net;
pub mod sim_clock;
mod store_node;
pub mod tap;
pub mod variant;
mod workload;

pub use handler::{mix, SimHandler};
pub use variant::{Variant, VariantRef};
pub use workload::{plan, Action};

use crate::faults::{FaultKind, FaultPlan};
use crate::history::{Record, Recorder, WorldEvent};
use crate::scenario::Scenario;
use crate::truth::{ClientAnswer, ClientCall, Fact, Sender};
use controller::Controller;
use injector::Injector;
use leasesim::client::Client;
use leasesim::config::EngineConfig;
use leasesim::event::Observer;
use leasesim::store::server::StoreServer;
use leasesim::worker::Worker;
use leasesim_vocab::ids::Owner;
use leasesim_vocab::task::{TaskKind, TaskState};
use madsim::net::Endpoint;
use madsim::runtime::Handle;
use sim_clock::{SimClock, SimTime};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use store_node::StoreNode;

/// Worlds alive in this process: built by `run` and not yet dropped. A
/// world that outlives its run (a reference cycle through the runtime, a
/// task that escaped) would make a long campaign's memory grow with every
/// seed; the memory test watches this count.
static LIVE_WORLDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

pub fn live_worlds() -> usize {
    LIVE_WORLDS.load(Ordering::SeqCst)
}

/// Counts one world while it is alive (held by its store node, which every
/// node's tasks and the runtime's init closures reach).
pub struct WorldToken(());

impl WorldToken {
    fn new() -> Self {
        LIVE_WORLDS.fetch_add(1, Ordering::SeqCst);
        WorldToken(())
    }
}

impl Drop for WorldToken {
    fn drop(&mut self) {
        LIVE_WORLDS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What the world looked like at the end of a run.
#[derive(Debug, Clone)]
pub struct WorldResult {
    pub history: Vec<Record>,
    /// Final state of every task, by id.
    pub tasks: BTreeMap<u64, (TaskKind, TaskState)>,
    pub end_ms: u64,
}

/// Everything a world needs besides the seed.
#[derive(Debug, Clone)]
pub struct WorldSpec {
    pub scenario: Arc<Scenario>,
    pub plan: FaultPlan,
    /// Breaks the harness itself on purpose (to test that a campaign
    /// survives seeds that panic, livelock or flood the history).
    pub sabotage: Option<Sabotage>,
    /// The history may hold at most this many records.
    pub max_records: usize,
    /// A test's engine variant (never set outside fitness tests).
    pub variant: Option<VariantRef>,
    /// Record the history (off only to time the world alone, in `bench`).
    pub record: bool,
}

impl WorldSpec {
    /// The configuration the engine runs with: the scenario's, unless a
    /// variant changes it (the scenario's stays the promise).
    pub fn engine(&self) -> EngineConfig {
        let mut cfg = self.scenario.engine.clone();
        if let Some(VariantRef(variant)) = &self.variant {
            variant.engine(&mut cfg);
        }
        cfg
    }
}

/// A deliberate harness failure, at a simulated time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sabotage {
    /// A task of the store process panics.
    Panic { at_ms: u64 },
    /// A task spins forever without letting simulated time advance.
    Livelock { at_ms: u64 },
    /// A task floods the history with records.
    Flood { at_ms: u64 },
}

/// Runs the world for one seed. Must be called inside a madsim runtime whose
/// seed is `seed`.
pub async fn run(spec: WorldSpec, seed: u64) -> WorldResult {
    let scenario = spec.scenario.clone();
    let handle = Handle::current();
    let origin = SimTime::start();
    let rec = Recorder::new(origin.clone(), spec.max_records, spec.record);
    let mut obs: Arc<dyn Observer> = Arc::new(rec.clone());
    if let Some(VariantRef(variant)) = &spec.variant {
        obs = Arc::new(variant::Filtered { inner: obs, variant: variant.clone() });
    }
    let faults = Arc::new(Injector::new(spec.plan.clone(), rec.clone()));
    let control = Arc::new(Controller::new(rec.clone()));
    let engine = spec.engine();
    let variant = spec.variant.as_ref().map(|v| v.0.clone());

    let server = Arc::new(StoreServer::new(engine.clone(), Arc::new(SimClock::new(origin.clone(), 0)), obs.clone()));
    let store = Arc::new(StoreNode {
        server: server.clone(),
        faults: faults.clone(),
        control: control.clone(),
        rec: rec.clone(),
        tap: tap::Tap::default(),
        next_req: Default::default(),
        max_downtime_ms: scenario.faults.max_downtime_ms,
        variant: variant.clone(),
        crash: Default::default(),
        _alive: WorldToken::new(),
    });
    let store_for_node = store.clone();
    let store_variant = variant.clone();
    let store_node = handle
        .create_node()
        .name("store")
        .ip(net::store_ip())
        .init(move || {
            let store = store_for_node.clone();
            let extra = store_variant.as_ref().and_then(|v| v.store_process(store.server.clone()));
            async move {
                if let Some(extra) = extra {
                    tokio::spawn(extra);
                }
                let ep = Endpoint::bind(net::addr(net::store_ip())).await.expect("store binds its address");
                net::serve_store(ep, store).await;
            }
        })
        .build();

    for proc in 1..=scenario.topology.workers {
        let offset_ms = clock_offset(&spec.plan, proc);
        if offset_ms != 0 {
            faults.inject(FaultKind::ClockOffset, format!("p{proc} clock offset {offset_ms} ms"));
            rec.world(WorldEvent::ClockOffset { proc, offset_ms });
        }
        let worker = WorkerSpec { scenario: &scenario, engine: &engine, seed, proc, origin: origin.clone(), offset_ms };
        spawn_worker(&handle, worker, &rec, &obs, &faults, &control, &variant);
    }

    let client_node = {
        let (scenario, rec, obs, variant) = (scenario.clone(), rec.clone(), obs.clone(), variant.clone());
        let rpc_timeout_ms = engine.rpc_timeout_ms;
        handle
            .create_node()
            .name("client")
            .ip(net::client_ip())
            .init(move || {
                let (scenario, rec, obs, variant) = (scenario.clone(), rec.clone(), obs.clone(), variant.clone());
                async move { run_client(scenario, seed, rpc_timeout_ms, rec, obs, variant).await }
            })
            .build()
    };

    if let Some(sabotage) = spec.sabotage {
        let rec = rec.clone();
        store_node.spawn(async move { sabotage_at(sabotage, rec).await });
    }
    drive_process_faults(&spec.plan, &faults, &control, &store, scenario.phases.fault_phase_ms).await;
    rec.world(WorldEvent::Heal);
    faults.heal();
    control.heal();
    store.restart_now();
    tokio::time::sleep(Duration::from_millis(scenario.phases.heal_phase_ms)).await;
    rec.world(WorldEvent::End);
    let end_ms = rec.now_ms();

    // Tear down: every node dies, so no task of this seed outlives it.
    for node in control.node_ids() {
        handle.kill(node);
    }
    handle.kill(client_node.id());
    handle.kill(store_node.id());

    // The last look at the store: anything the tap has not seen yet changed
    // outside every request's transaction.
    let drift = if rec.enabled() { store.tap.sync(&server, tap::Scope::ALL) } else { Default::default() };
    if !drift.is_empty() {
        rec.fact(Fact::Drift { commit: drift });
    }
    let (tasks, last) = server.with_store(|s| {
        let rows: Vec<_> = s.tasks().map(builtin::row).collect();
        let tasks = rows.iter().map(|t| (t.id, (t.spec.kind, t.state))).collect();
        let last = Fact::Final {
            tasks: rows,
            stages: s.stages().map(|(stage, row)| (builtin::stage(*stage), builtin::stage_row(row))).collect(),
            materialized: s.materialized().collect(),
        };
        (tasks, last)
    });
    rec.fact(last);
    WorldResult { history: rec.take(), tasks, end_ms }
}

/// The clock offset the plan gives a process (0 if none).
fn clock_offset(plan: &FaultPlan, proc: u32) -> i64 {
    plan.events.iter().find(|e| e.kind == FaultKind::ClockOffset && e.proc == Some(proc)).map_or(0, |e| e.magnitude_ms)
}

/// Plays the plan's process faults (kills, pauses, partitions, store
/// crashes) in time order until the end of the fault phase.
async fn drive_process_faults(
    plan: &FaultPlan,
    faults: &Injector,
    control: &Controller,
    store: &StoreNode,
    fault_phase_ms: u64,
) {
    #[derive(Debug, Clone, Copy)]
    enum Act {
        Kill,
        Restart,
        Pause,
        Resume,
        Clog,
        Unclog,
        CrashStore,
        RestartStore,
    }
    let mut acts: Vec<(u64, u32, Act, FaultKind)> = Vec::new();
    for e in &plan.events {
        let (start, stop) = match e.kind {
            FaultKind::ProcessKill => (Act::Kill, Act::Restart),
            FaultKind::ProcessPause => (Act::Pause, Act::Resume),
            FaultKind::Partition => (Act::Clog, Act::Unclog),
            FaultKind::StoreCrash => (Act::CrashStore, Act::RestartStore),
            _ => continue,
        };
        // Process faults name their worker; the store is process 0.
        let proc = e.proc.unwrap_or(0);
        acts.push((e.at_ms, proc, start, e.kind));
        acts.push((e.end_ms(), proc, stop, e.kind));
    }
    // Stable: at one instant, acts keep plan order.
    acts.sort_by_key(|(at, ..)| *at);
    let start = tokio::time::Instant::now() - Duration::from_millis(faults.now_ms());
    for (at_ms, proc, act, kind) in acts {
        if at_ms >= fault_phase_ms {
            break;
        }
        tokio::time::sleep_until(start + Duration::from_millis(at_ms)).await;
        match act {
            Act::Kill => {
                if control.kill(proc) {
                    faults.inject(kind, format!("p{proc} killed"));
                }
            }
            Act::Restart => control.restart(proc),
            Act::Pause => {
                faults.inject(kind, format!("p{proc} paused"));
                control.pause(proc);
            }
            Act::Resume => control.resume(proc),
            Act::Clog => {
                faults.inject(kind, format!("p{proc} cut off"));
                control.clog(proc);
            }
            Act::Unclog => control.unclog(proc),
            Act::CrashStore => store.crash_now(),
            Act::RestartStore => store.restart_now(),
        }
    }
    tokio::time::sleep_until(start + Duration::from_millis(fault_phase_ms)).await;
}

/// One worker process to build: where it runs and how its clock reads.
struct WorkerSpec<'a> {
    scenario: &'a Arc<Scenario>,
    engine: &'a EngineConfig,
    seed: u64,
    proc: u32,
    origin: SimTime,
    offset_ms: i64,
}

fn spawn_worker(
    handle: &Handle,
    w: WorkerSpec<'_>,
    rec: &Recorder,
    obs: &Arc<dyn Observer>,
    faults: &Arc<Injector>,
    control: &Controller,
    variant: &Option<Arc<dyn Variant>>,
) {
    let WorkerSpec { scenario, seed, proc, origin, offset_ms, .. } = w;
    let incarnation = Arc::new(AtomicU32::new(0));
    let peers: Vec<_> =
        (1..=scenario.topology.workers).filter(|&p| p != proc).map(|p| net::addr(net::worker_ip(p))).collect();
    let (engine, rec, obs, counter) = (w.engine.clone(), rec.clone(), obs.clone(), incarnation.clone());
    let (workload, faults, variant) = (Arc::new(scenario.workload.clone()), faults.clone(), variant.clone());
    let node = handle
        .create_node()
        .name(format!("worker-{proc}"))
        .ip(net::worker_ip(proc))
        .init(move || {
            let (engine, rec, obs, peers, variant) =
                (engine.clone(), rec.clone(), obs.clone(), peers.clone(), variant.clone());
            let origin = origin.clone();
            let incarnation = counter.fetch_add(1, Ordering::Relaxed) + 1;
            let owner = Owner { proc, incarnation };
            let engine_owner = builtin::engine_owner(owner);
            let handler = SimHandler::new(seed, workload.clone(), faults.clone(), rec.clone(), owner);
            async move {
                rec.world(WorldEvent::ProcessUp { owner });
                let transport = net::SimTransport::bind(
                    net::worker_ip(proc),
                    incarnation,
                    peers,
                    Sender::Worker(owner),
                    rec.clone(),
                )
                .await
                .expect("worker binds its address")
                .with_variant(variant);
                let clock = Arc::new(SimClock::new(origin, offset_ms));
                Worker::new(engine, engine_owner, transport, handler, clock, obs).run().await;
            }
        })
        .build();
    control.add_worker(proc, node.id(), incarnation);
}

/// The client plays the workload plan: enqueues, pipelines and index
/// queries. This is the client seam: every call and every answer the
/// application got is recorded, and each call sends under its own number.
async fn run_client(
    scenario: Arc<Scenario>,
    seed: u64,
    rpc_timeout_ms: u64,
    rec: Recorder,
    obs: Arc<dyn Observer>,
    variant: Option<Arc<dyn Variant>>,
) {
    let transport = net::SimTransport::bind(net::client_ip(), 0, Vec::new(), Sender::Client(0), rec.clone())
        .await
        .expect("client binds its address")
        .with_variant(variant);
    let start = tokio::time::Instant::now();
    let heal_ms = scenario.phases.fault_phase_ms;
    for (n, (at_ms, action)) in plan(seed, &scenario.workload, heal_ms).into_iter().enumerate() {
        tokio::time::sleep_until(start + Duration::from_millis(at_ms)).await;
        let call = n as u64 + 1;
        let client = Client::new(transport.as_sender(Sender::Client(call)), obs.clone(), rpc_timeout_ms).with_id(call);
        let rec = rec.clone();
        // Each action runs on its own: a slow query must not delay enqueues.
        tokio::spawn(async move {
            let answer = match action {
                Action::Enqueue(spec) => {
                    rec.fact(Fact::ClientCalled { call, what: ClientCall::Enqueue { spec: spec.clone() } });
                    ClientAnswer::Enqueued { task: client.enqueue(builtin::engine_spec(&spec)).await }
                }
                Action::CreatePipeline { pipeline, stages } => {
                    rec.fact(Fact::ClientCalled { call, what: ClientCall::CreatePipeline { pipeline, stages } });
                    ClientAnswer::PipelineCreated { ok: client.create_pipeline(pipeline, stages).await }
                }
                Action::Query { index, lag_timeout_ms } => {
                    rec.fact(Fact::ClientCalled { call, what: ClientCall::Query { index, lag_timeout_ms } });
                    ClientAnswer::Queried { materialized: client.query_index(index, lag_timeout_ms).await }
                }
            };
            rec.fact(Fact::ClientAnswered { call, answer });
        });
    }
    std::future::pending::<()>().await;
}

async fn sabotage_at(sabotage: Sabotage, rec: Recorder) {
    let (Sabotage::Panic { at_ms } | Sabotage::Livelock { at_ms } | Sabotage::Flood { at_ms }) = sabotage;
    tokio::time::sleep(Duration::from_millis(at_ms)).await;
    match sabotage {
        Sabotage::Panic { .. } => panic!("sabotage: a store task panics at {at_ms} ms"),
        Sabotage::Livelock { .. } => loop {
            tokio::task::yield_now().await;
        },
        Sabotage::Flood { .. } => loop {
            rec.world(WorldEvent::Fault { kind: "sabotage".into(), detail: "flood".into() });
        },
    }
}
