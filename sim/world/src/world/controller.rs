//! The world's hands on its processes: kill, restart, pause, resume, cut off.
//! Every action is recorded in the history, and the controller keeps each
//! worker's state so overlapping faults compose (a paused process can be
//! killed; a dead one is not paused).

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
    Paused,
    Down,
}

struct Proc {
    node: NodeId,
    incarnation: Arc<AtomicU32>,
    state: ProcState,
}

pub struct Controller {
    rec: Recorder,
    procs: Mutex<BTreeMap<ProcId, Proc>>,
    clogged: Mutex<BTreeSet<ProcId>>,
}

impl Controller {
    pub fn new(rec: Recorder) -> Self {
        Controller { rec, procs: Mutex::new(BTreeMap::new()), clogged: Mutex::new(BTreeSet::new()) }
    }

    pub fn add_worker(&self, proc: ProcId, node: NodeId, incarnation: Arc<AtomicU32>) {
        self.procs.lock().expect("procs").insert(proc, Proc { node, incarnation, state: ProcState::Up });
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
        Self::handle().kill(p.node);
        p.state = ProcState::Down;
        self.rec.world(WorldEvent::ProcessKilled { owner: Self::owner(proc, p) });
        true
    }

    /// The process exited on its own (its worker future returned): it is
    /// gone as a killed one is, recorded so. Returns false if it was
    /// already down.
    pub fn exited(&self, proc: ProcId) -> bool {
        let mut procs = self.procs.lock().expect("procs");
        let Some(p) = procs.get_mut(&proc) else {
            return false;
        };
        if p.state == ProcState::Down {
            return false;
        }
        p.state = ProcState::Down;
        self.rec.world(WorldEvent::ProcessKilled { owner: Self::owner(proc, p) });
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
        // The node's init records ProcessUp with its new incarnation.
        Self::handle().restart(node);
    }

    pub fn pause(&self, proc: ProcId) {
        let mut procs = self.procs.lock().expect("procs");
        let Some(p) = procs.get_mut(&proc) else {
            return;
        };
        if p.state != ProcState::Up {
            return;
        }
        Self::handle().pause(p.node);
        p.state = ProcState::Paused;
        self.rec.world(WorldEvent::ProcessPaused { proc });
    }

    pub fn resume(&self, proc: ProcId) {
        let mut procs = self.procs.lock().expect("procs");
        let Some(p) = procs.get_mut(&proc) else {
            return;
        };
        if p.state != ProcState::Paused {
            return;
        }
        Self::handle().resume(p.node);
        p.state = ProcState::Up;
        self.rec.world(WorldEvent::ProcessResumed { proc });
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
