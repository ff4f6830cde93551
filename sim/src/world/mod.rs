//! One simulated world, run for one seed: a store process, worker processes
//! and a client process as madsim nodes, joined by the simulated network.
//!
//! The run is a fault phase (the plan's faults fire), a heal (faults stop,
//! paused processes resume, dead ones restart), and a liveness phase in which
//! the world must converge. The world records every event into the history
//! and, at the end, kills every node so nothing outlives the run.

mod controller;
mod handler;
mod injector;
pub mod net;
mod store_node;
mod workload;

pub use handler::{mix, SimHandler};
pub use workload::{plan, Action};

use crate::faults::{FaultKind, FaultPlan};
use crate::history::{Record, Recorder, WorldEvent};
use crate::scenario::Scenario;
use controller::Controller;
use injector::Injector;
use leasesim::client::Client;
use leasesim::clock::TokioClock;
use leasesim::event::Observer;
use leasesim::ids::Owner;
use leasesim::store::server::StoreServer;
use leasesim::task::{TaskKind, TaskState};
use leasesim::worker::Worker;
use madsim::net::Endpoint;
use madsim::runtime::Handle;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use store_node::StoreNode;

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
    let origin = tokio::time::Instant::now();
    let rec = Recorder::new(origin, spec.max_records);
    let obs: Arc<dyn Observer> = Arc::new(rec.clone());
    let faults = Arc::new(Injector::new(spec.plan.clone(), rec.clone()));
    let control = Arc::new(Controller::new(handle.clone(), rec.clone()));

    let server = Arc::new(StoreServer::new(scenario.engine.clone(), Arc::new(TokioClock::new(origin, 0)), obs.clone()));
    let store = Arc::new(StoreNode {
        server: server.clone(),
        faults: faults.clone(),
        control: control.clone(),
        max_downtime_ms: scenario.faults.max_downtime_ms,
    });
    let store_node = handle
        .create_node()
        .name("store")
        .ip(net::store_ip())
        .init(move || {
            let store = store.clone();
            async move {
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
        spawn_worker(&handle, &scenario, seed, proc, origin, offset_ms, &rec, &faults, &control);
    }

    let client_scenario = scenario.clone();
    let client_obs = obs.clone();
    let client_node = handle
        .create_node()
        .name("client")
        .ip(net::client_ip())
        .init(move || {
            let scenario = client_scenario.clone();
            let obs = client_obs.clone();
            async move { run_client(scenario, seed, obs).await }
        })
        .build();

    if let Some(sabotage) = spec.sabotage {
        let rec = rec.clone();
        store_node.spawn(async move { sabotage_at(sabotage, rec).await });
    }
    drive_process_faults(&spec.plan, &faults, &control, scenario.phases.fault_phase_ms).await;
    rec.world(WorldEvent::Heal);
    faults.heal();
    control.heal();
    tokio::time::sleep(Duration::from_millis(scenario.phases.heal_phase_ms)).await;
    rec.world(WorldEvent::End);
    let end_ms = rec.now_ms();

    // Tear down: every node dies, so no task of this seed outlives it.
    for node in control.node_ids() {
        handle.kill(node);
    }
    handle.kill(client_node.id());
    handle.kill(store_node.id());

    let tasks = server.with_store(|s| s.tasks().map(|t| (t.id, (t.spec.kind, t.state))).collect());
    WorldResult { history: rec.take(), tasks, end_ms }
}

/// The clock offset the plan gives a process (0 if none).
fn clock_offset(plan: &FaultPlan, proc: u32) -> i64 {
    plan.events.iter().find(|e| e.kind == FaultKind::ClockOffset && e.proc == Some(proc)).map_or(0, |e| e.magnitude_ms)
}

/// Plays the plan's process faults (kills, pauses, partitions) in time order
/// until the end of the fault phase.
async fn drive_process_faults(plan: &FaultPlan, faults: &Injector, control: &Controller, fault_phase_ms: u64) {
    #[derive(Debug, Clone, Copy)]
    enum Act {
        Kill,
        Restart,
        Pause,
        Resume,
        Clog,
        Unclog,
    }
    let mut acts: Vec<(u64, u32, Act, FaultKind)> = Vec::new();
    for e in &plan.events {
        let Some(proc) = e.proc else { continue };
        let (start, stop) = match e.kind {
            FaultKind::ProcessKill => (Act::Kill, Act::Restart),
            FaultKind::ProcessPause => (Act::Pause, Act::Resume),
            FaultKind::Partition => (Act::Clog, Act::Unclog),
            _ => continue,
        };
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
        }
    }
    tokio::time::sleep_until(start + Duration::from_millis(fault_phase_ms)).await;
}

#[allow(clippy::too_many_arguments)]
fn spawn_worker(
    handle: &Handle,
    scenario: &Arc<Scenario>,
    seed: u64,
    proc: u32,
    origin: tokio::time::Instant,
    offset_ms: i64,
    rec: &Recorder,
    faults: &Arc<Injector>,
    control: &Controller,
) {
    let incarnation = Arc::new(AtomicU32::new(0));
    let peers: Vec<_> =
        (1..=scenario.topology.workers).filter(|&p| p != proc).map(|p| net::addr(net::worker_ip(p))).collect();
    let (scenario, rec, counter) = (scenario.clone(), rec.clone(), incarnation.clone());
    let handler = SimHandler::new(seed, Arc::new(scenario.workload.clone()), faults.clone());
    let node = handle
        .create_node()
        .name(format!("worker-{proc}"))
        .ip(net::worker_ip(proc))
        .init(move || {
            let (scenario, rec, peers, handler) = (scenario.clone(), rec.clone(), peers.clone(), handler.clone());
            let incarnation = counter.fetch_add(1, Ordering::Relaxed) + 1;
            async move {
                let owner = Owner { proc, incarnation };
                rec.world(WorldEvent::ProcessUp { owner });
                let transport = net::SimTransport::bind(net::worker_ip(proc), incarnation, peers)
                    .await
                    .expect("worker binds its address");
                let clock = Arc::new(TokioClock::new(origin, offset_ms));
                Worker::new(scenario.engine.clone(), owner, transport, handler, clock, Arc::new(rec)).run().await;
            }
        })
        .build();
    control.add_worker(proc, node.id(), incarnation);
}

/// The client plays the workload plan: enqueues, pipelines and index queries.
async fn run_client(scenario: Arc<Scenario>, seed: u64, obs: Arc<dyn Observer>) {
    let transport = net::SimTransport::bind(net::client_ip(), 0, Vec::new()).await.expect("client binds its address");
    let client = Arc::new(Client::new(transport, obs, scenario.engine.rpc_timeout_ms));
    let start = tokio::time::Instant::now();
    for (at_ms, action) in plan(seed, &scenario.workload) {
        tokio::time::sleep_until(start + Duration::from_millis(at_ms)).await;
        let client = client.clone();
        // Each action runs on its own: a slow query must not delay enqueues.
        tokio::spawn(async move {
            match action {
                Action::Enqueue(spec) => {
                    client.enqueue(spec).await;
                }
                Action::CreatePipeline { pipeline, stages } => {
                    client.create_pipeline(pipeline, stages).await;
                }
                Action::Query { index, lag_timeout_ms } => {
                    client.query_index(index, lag_timeout_ms).await;
                }
            }
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
