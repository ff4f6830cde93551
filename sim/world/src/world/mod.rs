//! One simulated world, run for one seed: a store process, worker processes
//! and a client process as madsim nodes, joined by the harness's store link,
//! for any engine under test ([`EngineUnderTest`]).
//!
//! The run is a fault phase (the plan's faults fire), a heal (faults stop,
//! paused processes resume, dead ones restart), and a liveness phase in which
//! the world must converge. The world records every event into the history
//! and, at the end, kills every node so nothing outlives the run.

pub mod controller;
pub mod deadline;
pub mod handler;
pub mod injector;
pub mod link;
pub mod net;
pub mod quiet;
pub mod sim_clock;
pub mod stop;
pub mod store_node;
pub mod workload;

pub use handler::{mix, SimHandler};
pub use workload::{clients, plan, Action, Drawn};

use crate::engine::{ClientWorld, EngineUnderTest, StoreSeam, StoreWorld, WorkerWorld};
use crate::faults::{FaultKind, FaultPlan};
use crate::history::{Record, Recorder, WorldEvent};
use crate::scenario::Scenario;
use crate::truth::{ClientCall, Fact, Sender};
use controller::Controller;
use injector::Injector;
use leasesim_vocab::ids::{Owner, ProcId};
use leasesim_vocab::task::{TaskKind, TaskState};
use link::Link;
use madsim::runtime::Handle;
use sim_clock::{SimClock, SimTime};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use store_node::StoreNode;
use tokio::sync::mpsc;

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
    /// The fault plan the world played (the one its spec carried: a seed's
    /// plan is drawn once, and judged as played).
    pub plan: FaultPlan,
}

/// Everything a world needs besides the seed and the engine: what the seed
/// draws (its fault plan and workload) drawn once, before the world starts
/// (`RunSpec::world_spec`), and carried down.
#[derive(Debug, Clone)]
pub struct WorldSpec {
    pub scenario: Arc<Scenario>,
    pub plan: FaultPlan,
    /// The client's calls and who makes each.
    pub workload: Arc<Drawn>,
    /// Breaks the harness itself on purpose (to test that a campaign
    /// survives seeds that panic, livelock or flood the history).
    pub sabotage: Option<Sabotage>,
    /// The history may hold at most this many records.
    pub max_records: usize,
    /// Record the history (off only to time the world alone, in `bench`).
    pub record: bool,
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

/// The processes of one world and the harness's hands on them.
struct Parts<E: EngineUnderTest> {
    engine: Arc<E>,
    spec: WorldSpec,
    seed: u64,
    origin: SimTime,
    rec: Recorder,
    faults: Arc<Injector>,
    control: Arc<Controller>,
    to_store: mpsc::UnboundedSender<link::Envelope<E>>,
    shared: E::Shared,
    /// Client calls and bodies not ended yet (the quiet end).
    open: Arc<quiet::Open>,
}

/// Runs the world for one seed. Must be called inside a madsim runtime whose
/// seed is `seed`.
pub async fn run<E: EngineUnderTest>(engine: Arc<E>, spec: WorldSpec, seed: u64) -> WorldResult {
    let scenario = spec.scenario.clone();
    let handle = Handle::current();
    let origin = SimTime::start();
    let rec = Recorder::new(origin.clone(), spec.max_records, spec.record);
    let faults = Arc::new(Injector::new(spec.plan.clone(), rec.clone()));
    let control = Arc::new(Controller::new(rec.clone()));
    let store_world = StoreWorld { time: origin.clone(), rec: rec.clone(), seed, scenario: scenario.clone() };
    let (seam, shared) = engine.start(&store_world);
    let store = Arc::new(StoreNode::<E> {
        seam: seam.clone(),
        faults: faults.clone(),
        control: control.clone(),
        rec: rec.clone(),
        next_req: Default::default(),
        max_downtime_ms: scenario.faults.max_downtime_ms,
        crash: Default::default(),
        _alive: WorldToken::new(),
    });
    let (to_store, inbox) = mpsc::unbounded_channel();
    let inbox = Arc::new(std::sync::Mutex::new(Some(inbox)));
    let open = quiet::Open::new(spec.workload.calls.len());
    let store_for_node = store.clone();
    let store_node = handle
        .create_node()
        .name("store")
        .ip(net::store_ip())
        .init(move || {
            let store = store_for_node.clone();
            // The store node starts once (a crash is the harness's, not a
            // node restart): its init takes the link's inbox.
            let inbox = inbox.lock().expect("inbox").take();
            let process = store.seam.process();
            async move {
                if let Some(process) = process {
                    tokio::spawn(process);
                }
                if let Some(inbox) = inbox {
                    store_node::serve(inbox, store).await;
                }
            }
        })
        .build();

    let parts =
        Parts { engine, spec, seed, origin, rec: rec.clone(), faults: faults.clone(), control, to_store, shared, open };
    for proc in 1..=scenario.topology.workers {
        let offset_ms = clock_offset(&parts.spec.plan, proc);
        if offset_ms != 0 {
            faults.inject(FaultKind::ClockOffset, format!("p{proc} clock offset {offset_ms} ms"));
            rec.world(WorldEvent::ClockOffset { proc, offset_ms });
        }
        spawn_worker(&handle, &parts, proc, offset_ms);
    }
    let client_node = spawn_client(&handle, &parts);

    if let Some(sabotage) = parts.spec.sabotage {
        let rec = rec.clone();
        store_node.spawn(async move { sabotage_at(sabotage, rec).await });
    }
    let control = parts.control.clone();
    let restart_delay_ms = parts.engine.restart_delay_ms();
    drive_process_faults(&parts.spec.plan, &faults, &control, &store, scenario.phases.fault_phase_ms, restart_delay_ms)
        .await;
    rec.world(WorldEvent::Heal);
    faults.heal();
    control.heal();
    store.restart_now();
    let phases = &scenario.phases;
    quiet::liveness_phase::<E>(&seam, phases.heal_phase_ms, phases.quiet_end_ms, &parts.open).await;
    rec.world(WorldEvent::End);
    let end_ms = rec.now_ms();

    // Tear down: every node dies, so no task of this seed outlives it.
    for node in control.node_ids() {
        handle.kill(node);
    }
    handle.kill(client_node);
    handle.kill(store_node.id());
    let plan = parts.spec.plan.clone();
    drop(parts);
    last_look::<E>(&seam, &rec, end_ms, plan)
}

/// The last look at the store: anything the tap has not seen yet changed
/// outside every request's transaction; then the whole store.
fn last_look<E: EngineUnderTest>(seam: &E::Store, rec: &Recorder, end_ms: u64, plan: FaultPlan) -> WorldResult {
    if rec.enabled() {
        let drift = seam.tap(None);
        if !drift.is_empty() {
            rec.fact(Fact::Drift { commit: drift });
        }
    }
    let last = seam.last_look();
    let tasks = last.tasks.iter().map(|t| (t.id, (t.spec.kind, t.state))).collect();
    rec.fact(Fact::Final { tasks: last.tasks, stages: last.stages, materialized: last.materialized });
    if !last.queues.is_empty() {
        rec.fact(Fact::FinalQueues { queues: last.queues });
    }
    WorldResult { history: rec.take(), tasks, end_ms, plan }
}

/// The clock offset the plan gives a process (0 if none).
fn clock_offset(plan: &FaultPlan, proc: u32) -> i64 {
    plan.events.iter().find(|e| e.kind == FaultKind::ClockOffset && e.proc == Some(proc)).map_or(0, |e| e.magnitude_ms)
}

/// Plays the plan's process faults (kills, pauses, partitions, store
/// crashes) in time order until the end of the fault phase.
async fn drive_process_faults<E: EngineUnderTest>(
    plan: &FaultPlan,
    faults: &Injector,
    control: &Arc<Controller>,
    store: &StoreNode<E>,
    fault_phase_ms: u64,
    restart_delay_ms: u64,
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
        Stop,
        StopDeadline,
    }
    let mut acts: Vec<(u64, u32, Act, FaultKind, usize)> = Vec::new();
    for (i, e) in plan.events.iter().enumerate() {
        let (start, stop) = match e.kind {
            FaultKind::ProcessKill => (Act::Kill, Act::Restart),
            FaultKind::ProcessPause => (Act::Pause, Act::Resume),
            FaultKind::Partition => (Act::Clog, Act::Unclog),
            FaultKind::StoreCrash => (Act::CrashStore, Act::RestartStore),
            FaultKind::GracefulStop => (Act::Stop, Act::StopDeadline),
            _ => continue,
        };
        // Process faults name their worker; the store is process 0.
        let proc = e.proc.unwrap_or(0);
        acts.push((e.at_ms, proc, start, e.kind, i));
        acts.push((e.end_ms(), proc, stop, e.kind, i));
    }
    // Per graceful stop (by its place in the plan): the incarnation it asked.
    let mut asked: std::collections::BTreeMap<usize, u32> = std::collections::BTreeMap::new();
    // Stable: at one instant, acts keep plan order.
    acts.sort_by_key(|(at, ..)| *at);
    let start = tokio::time::Instant::now() - Duration::from_millis(faults.now_ms());
    for (at_ms, proc, act, kind, event) in acts {
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
            Act::Stop => {
                if let Some(incarnation) = control.stop(proc) {
                    asked.insert(event, incarnation);
                    faults.inject(kind, format!("p{proc} asked to stop"));
                }
            }
            Act::StopDeadline => {
                let asked = asked.get(&event).copied();
                if asked.is_some_and(|incarnation| control.stop_deadline(proc, incarnation)) {
                    // Worded as a kill's: coverage tells a fault's kill from an exit by it.
                    faults.inject(kind, format!("p{proc} killed"));
                    // Its supervisor starts it again, as after an exit.
                    let control = control.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(restart_delay_ms)).await;
                        control.restart(proc);
                    });
                }
            }
        }
    }
    tokio::time::sleep_until(start + Duration::from_millis(fault_phase_ms)).await;
}

/// Builds worker process `proc` as a madsim node; each init (its first
/// start, every restart) runs a new incarnation of the engine's worker.
fn spawn_worker<E: EngineUnderTest>(handle: &Handle, p: &Parts<E>, proc: ProcId, offset_ms: i64) {
    let incarnation = Arc::new(AtomicU32::new(0));
    let peers: Vec<ProcId> = (1..=p.spec.scenario.topology.workers).filter(|&q| q != proc).collect();
    let (engine, scenario, seed, origin) = (p.engine.clone(), p.spec.scenario.clone(), p.seed, p.origin.clone());
    let (rec, faults, control, to_store) = (p.rec.clone(), p.faults.clone(), p.control.clone(), p.to_store.clone());
    let (shared, counter, workload, open) =
        (p.shared.clone(), incarnation.clone(), Arc::new(p.spec.scenario.workload.clone()), p.open.clone());
    let node = handle
        .create_node()
        .name(format!("worker-{proc}"))
        .ip(net::worker_ip(proc))
        .init(move || {
            let incarnation = counter.fetch_add(1, Ordering::Relaxed) + 1;
            let owner = Owner { proc, incarnation };
            rec.world(WorldEvent::ProcessUp { owner });
            let stop = stop::Stop::default();
            control.started(proc, stop.clone());
            let w = WorkerWorld {
                owner,
                link: Link::new(to_store.clone(), control.clone(), Sender::Worker(owner), Some(proc)),
                clock: Arc::new(SimClock::new(origin.clone(), offset_ms)),
                body: SimHandler::new(seed, workload.clone(), faults.clone(), rec.clone(), owner)
                    .counting(open.clone()),
                rec: rec.clone(),
                faults: faults.clone(),
                scenario: scenario.clone(),
                seed,
                peers: peers.clone(),
                shared: shared.clone(),
                stop,
            };
            let (process, control, delay_ms) = (engine.run_worker(w), control.clone(), engine.restart_delay_ms());
            async move {
                process.await;
                // The process exited on its own: its supervisor starts it again.
                if control.exited(proc) {
                    tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                    control.restart(proc);
                }
            }
        })
        .build();
    p.control.add_worker(proc, node.id(), incarnation);
}

/// Builds the client process: it plays the workload plan (enqueues,
/// pipelines and index queries). This is the client seam: every call and
/// every answer the application got is recorded, and each call sends under
/// its own number.
fn spawn_client<E: EngineUnderTest>(handle: &Handle, p: &Parts<E>) -> madsim::task::NodeId {
    let (engine, scenario, workload, rec) =
        (p.engine.clone(), p.spec.scenario.clone(), p.spec.workload.clone(), p.rec.clone());
    let (control, to_store, shared) = (p.control.clone(), p.to_store.clone(), p.shared.clone());
    let open = p.open.clone();
    let node = handle
        .create_node()
        .name("client")
        .ip(net::client_ip())
        .init(move || {
            let link = Link::new(to_store.clone(), control.clone(), Sender::Client(0), None);
            let (engine, scenario, workload, rec, open) =
                (engine.clone(), scenario.clone(), workload.clone(), rec.clone(), open.clone());
            let c = ClientParts { engine, scenario, workload, rec, link, open };
            run_client(c, shared.clone())
        })
        .build();
    node.id()
}

struct ClientParts<E: EngineUnderTest> {
    engine: Arc<E>,
    scenario: Arc<Scenario>,
    workload: Arc<Drawn>,
    rec: Recorder,
    link: Link<E>,
    open: Arc<quiet::Open>,
}

async fn run_client<E: EngineUnderTest>(c: ClientParts<E>, shared: E::Shared) {
    let start = tokio::time::Instant::now();
    for (n, (at_ms, action)) in c.workload.calls.iter().enumerate() {
        let at_ms = *at_ms;
        tokio::time::sleep_until(start + Duration::from_millis(at_ms)).await;
        let call = n as u64 + 1;
        let client = c.workload.clients.get(n).copied().unwrap_or(call);
        let what = match action {
            Action::Enqueue(spec) => ClientCall::Enqueue { spec: spec.clone() },
            Action::CreatePipeline { pipeline, stages } => {
                ClientCall::CreatePipeline { pipeline: *pipeline, stages: *stages }
            }
            Action::Query { index, lag_timeout_ms } => {
                ClientCall::Query { index: *index, lag_timeout_ms: *lag_timeout_ms }
            }
        };
        c.rec.fact(Fact::ClientCalled { call, client, what });
        let world = ClientWorld {
            call,
            client,
            link: c.link.as_sender(Sender::Client(call)),
            rec: c.rec.clone(),
            scenario: c.scenario.clone(),
            shared: shared.clone(),
        };
        let answer = c.engine.client_call(world, action.clone());
        let (rec, open) = (c.rec.clone(), c.open.clone());
        // Each action runs on its own: a slow query must not delay enqueues.
        tokio::spawn(async move {
            let answer = answer.await;
            rec.fact(Fact::ClientAnswered { call, answer });
            open.calls.fetch_sub(1, Ordering::Relaxed);
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
