//! The world's hands on its processes: kill, restart, pause, resume, cut off.
//! Every action is recorded in the history, and the controller keeps each
//! worker's state so overlapping faults compose (a paused process can be
//! killed; a dead one is not paused).

use super::stop::Stop;
use crate::history::{Recorder, WorldEvent};
use crate::truth::Fact;
use leasesim_vocab::ids::{Owner, ProcId};
use madsim::net::NetSim;
use madsim::runtime::Handle;
use madsim::task::NodeId;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProcState {
    Up,
    /// A pause was ordered while a request of the process was on its way
    /// out (see [`Controller::hop_out`]); it takes effect once that request
    /// has left.
    PausePending,
    Paused,
    Down,
}

struct Proc {
    node: NodeId,
    incarnation: Arc<AtomicU32>,
    state: ProcState,
    /// Requests of the live incarnation now on their first hop.
    hops_out: u32,
    /// The incarnation asked to stop, until it is gone.
    stopping: Option<u32>,
}

pub struct Controller {
    rec: Recorder,
    procs: Mutex<BTreeMap<ProcId, Proc>>,
    clogged: Mutex<BTreeSet<ProcId>>,
    /// Each process's live incarnation's stop signal (kept apart from
    /// `procs`: a node's first init may run before `add_worker`).
    stops: Mutex<BTreeMap<ProcId, Stop>>,
}

impl Controller {
    pub fn new(rec: Recorder) -> Self {
        Controller {
            rec,
            procs: Mutex::new(BTreeMap::new()),
            clogged: Mutex::new(BTreeSet::new()),
            stops: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn add_worker(&self, proc: ProcId, node: NodeId, incarnation: Arc<AtomicU32>) {
        self.procs
            .lock()
            .expect("procs")
            .insert(proc, Proc { node, incarnation, state: ProcState::Up, hops_out: 0, stopping: None });
    }

    /// A new incarnation of `proc` started, with its own stop signal.
    pub fn started(&self, proc: ProcId, stop: Stop) {
        self.stops.lock().expect("stops").insert(proc, stop);
        if let Some(p) = self.procs.lock().expect("procs").get_mut(&proc) {
            p.stopping = None;
        }
    }

    /// Asks the live incarnation of `proc` to stop (its supervisor's
    /// SIGTERM; a paused process takes it when it runs again). Returns the
    /// incarnation asked, or `None` if it was down.
    pub fn stop(&self, proc: ProcId) -> Option<u32> {
        let mut procs = self.procs.lock().expect("procs");
        let p = procs.get_mut(&proc)?;
        if p.state == ProcState::Down {
            return None;
        }
        let owner = Self::owner(proc, p);
        p.stopping = Some(owner.incarnation);
        self.rec.world(WorldEvent::StopRequested { owner });
        if let Some(stop) = self.stops.lock().expect("stops").get(&proc) {
            stop.ask();
        }
        Some(owner.incarnation)
    }

    /// The window a stop gave incarnation `incarnation` of `proc` is over:
    /// if it is still up, its supervisor kills it (and starts it again
    /// later, as after any kill). Returns whether it had to.
    pub fn stop_deadline(&self, proc: ProcId, incarnation: u32) -> bool {
        let still_up = {
            let procs = self.procs.lock().expect("procs");
            procs.get(&proc).is_some_and(|p| {
                p.state != ProcState::Down
                    && p.stopping == Some(incarnation)
                    && p.incarnation.load(Ordering::Relaxed) == incarnation
            })
        };
        still_up && self.kill(proc)
    }

    pub fn node_ids(&self) -> Vec<NodeId> {
        self.procs.lock().expect("procs").values().map(|p| p.node).collect()
    }

    /// The runtime of the caller. Not kept in the controller: the runtime
    /// keeps every node's init closure, which keeps the controller, so a
    /// handle held here would be a cycle and leak the whole world of every
    /// seed.
    fn handle() -> Handle {
        Handle::current()
    }

    fn owner(proc: ProcId, p: &Proc) -> Owner {
        Owner { proc, incarnation: p.incarnation.load(Ordering::Relaxed) }
    }

    /// Kills the process (its tasks, permits and open calls vanish).
    /// Returns false if it was already down.
    pub fn kill(&self, proc: ProcId) -> bool {
        let node = {
            let mut procs = self.procs.lock().expect("procs");
            let Some(p) = procs.get_mut(&proc) else {
                return false;
            };
            if p.state == ProcState::Down {
                return false;
            }
            if p.state == ProcState::Paused {
                Self::handle().resume(p.node);
            }
            p.state = ProcState::Down;
            p.hops_out = 0;
            self.rec.world(WorldEvent::ProcessKilled { owner: Self::owner(proc, p) });
            p.node
        };
        // Outside the lock: killing drops the node's tasks, and a request
        // dropped on its first hop gives its hop back (`hop_in`).
        Self::handle().kill(node);
        true
    }

    /// The process exited on its own (its worker future returned): it is
    /// gone as a killed one is, recorded as an exit (checkers read both
    /// alike, `WorldEvent::gone`; pictures tell them apart). Returns false if
    /// it was already down.
    pub fn exited(&self, proc: ProcId) -> bool {
        let mut procs = self.procs.lock().expect("procs");
        let Some(p) = procs.get_mut(&proc) else {
            return false;
        };
        if p.state == ProcState::Down {
            return false;
        }
        p.state = ProcState::Down;
        p.hops_out = 0;
        self.rec.world(WorldEvent::ProcessExited { owner: Self::owner(proc, p) });
        true
    }

    /// Restarts a dead process: its init runs again as a new incarnation.
    pub fn restart(&self, proc: ProcId) {
        let node = {
            let mut procs = self.procs.lock().expect("procs");
            let Some(p) = procs.get_mut(&proc) else {
                return;
            };
            if p.state != ProcState::Down {
                return;
            }
            p.state = ProcState::Up;
            p.node
        };
        // A process that exited on its own was not killed, so the sockets its
        // leftover tasks still hold would stay bound (madsim's restart,
        // unlike its kill, does not close them): the new incarnation could
        // not bind its address. A real process's sockets close with it.
        NetSim::current().reset_node(node);
        // The node's init records ProcessUp with its new incarnation.
        Self::handle().restart(node);
    }

    /// Pauses the process, once every request it has sent has left it.
    ///
    /// A request the engine has sent is out of its hands: a real process
    /// frozen after its write does not freeze the bytes on the wire. The
    /// link's first hop runs in the sender's task, so a pause landing in
    /// that hop would hold the request for the whole pause while the
    /// sender's deadline, started before, runs on (swarm seed 5006087: an
    /// index pass sent at 61689 ms reached the store at 100348 ms, its
    /// worker gave up on it at 100689 ms). The pause waits for those hops
    /// (at most `HOP_MAX_MS`) instead.
    pub fn pause(&self, proc: ProcId) {
        let mut procs = self.procs.lock().expect("procs");
        let Some(p) = procs.get_mut(&proc) else {
            return;
        };
        if p.state != ProcState::Up {
            return;
        }
        if p.hops_out > 0 {
            p.state = ProcState::PausePending;
            return;
        }
        Self::pause_now(&self.rec, proc, p);
    }

    fn pause_now(rec: &Recorder, proc: ProcId, p: &mut Proc) {
        Self::handle().pause(p.node);
        p.state = ProcState::Paused;
        rec.world(WorldEvent::ProcessPaused { proc });
    }

    /// A request of `owner` starts its first hop: until it has left, the
    /// process is not paused.
    pub fn hop_out(&self, owner: Owner) {
        let mut procs = self.procs.lock().expect("procs");
        if let Some(p) = procs.get_mut(&owner.proc) {
            if Self::owner(owner.proc, p) == owner && p.state != ProcState::Down {
                p.hops_out += 1;
            }
        }
    }

    /// A request of `owner` has left (or was dropped before it left); a
    /// pause ordered meanwhile takes effect once none is left on its way.
    pub fn hop_in(&self, owner: Owner) {
        let mut procs = self.procs.lock().expect("procs");
        let Some(p) = procs.get_mut(&owner.proc) else {
            return;
        };
        if Self::owner(owner.proc, p) != owner || p.state == ProcState::Down {
            return;
        }
        p.hops_out = p.hops_out.saturating_sub(1);
        if p.hops_out == 0 && p.state == ProcState::PausePending {
            Self::pause_now(&self.rec, owner.proc, p);
        }
    }

    pub fn resume(&self, proc: ProcId) {
        let mut procs = self.procs.lock().expect("procs");
        let Some(p) = procs.get_mut(&proc) else {
            return;
        };
        match p.state {
            // The pause never took effect: nothing to undo.
            ProcState::PausePending => p.state = ProcState::Up,
            ProcState::Paused => {
                Self::handle().resume(p.node);
                p.state = ProcState::Up;
                self.rec.world(WorldEvent::ProcessResumed { proc });
            }
            ProcState::Up | ProcState::Down => {}
        }
    }

    /// Is the process cut off from the network now (the store link drops
    /// what it sends and what is sent to it)?
    pub fn is_cut_off(&self, proc: ProcId) -> bool {
        self.clogged.lock().expect("clogged").contains(&proc)
    }

    pub fn clog(&self, proc: ProcId) {
        let Some(node) = self.procs.lock().expect("procs").get(&proc).map(|p| p.node) else {
            return;
        };
        NetSim::current().clog_node(node);
        if self.clogged.lock().expect("clogged").insert(proc) {
            self.rec.fact(Fact::Partitioned { proc });
        }
    }

    pub fn unclog(&self, proc: ProcId) {
        let Some(node) = self.procs.lock().expect("procs").get(&proc).map(|p| p.node) else {
            return;
        };
        if self.clogged.lock().expect("clogged").remove(&proc) {
            NetSim::current().unclog_node(node);
            self.rec.fact(Fact::Rejoined { proc });
        }
    }

    /// The heal: every paused process resumes, every cut-off one is joined
    /// again, every dead one restarts.
    pub fn heal(&self) {
        let procs: Vec<ProcId> = self.procs.lock().expect("procs").keys().copied().collect();
        for proc in procs {
            self.unclog(proc);
            self.resume(proc);
            self.restart(proc);
        }
    }
}
