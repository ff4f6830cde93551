//! The store link: how a request travels from a process to the store seam
//! and its answer back, owned by the harness.
//!
//! One seeded latency draw per hop (the simulator's RNG, 1-10 ms as madsim's
//! own network), the request handed to the store process through a channel
//! and the answer through another. A process cut off from the network (a
//! partition) loses what it sends and what is sent to it; a paused process
//! takes its answer when it runs again; a killed one never does. Nothing
//! here times out: a request or answer that is lost leaves the caller
//! waiting until its own deadline, as on a real network. Store faults are
//! not applied here but at the store seam ([`super::store_node`]).
//!
//! Every engine's processes send through a link, so every engine gets the
//! same network and the same faults. The link costs one timer per hop; a
//! datagram network (madsim's `Endpoint`) costs several per hop, and a
//! polled sleep registers a timer on every poll.

use super::controller::Controller;
use crate::engine::EngineUnderTest;
use leasesim_vocab::ids::{Owner, ProcId};
use leasesim_vocab::truth::Sender;
use rand::Rng;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// The shortest and longest one-way trip between a process and the store,
/// declared with the seams' vocabulary: the checkers bound a request's
/// transit by them.
pub use leasesim_vocab::truth::{HOP_MAX_MS, HOP_MIN_MS};

/// A request on its way into the store process.
pub struct Envelope<E: EngineUnderTest> {
    pub from: Sender,
    /// The worker process that sent it (`None`: the client).
    pub proc: Option<ProcId>,
    pub req: E::Request,
    pub reply: Reply<E>,
}

/// Where the answer to one request goes: back over one hop to its caller.
pub struct Reply<E: EngineUnderTest> {
    tx: oneshot::Sender<E::Response>,
    proc: Option<ProcId>,
    control: Arc<Controller>,
}

impl<E: EngineUnderTest> Reply<E> {
    /// Sends the answer back (lost if the caller is cut off when it leaves,
    /// or gone).
    pub async fn send(self, resp: E::Response) {
        tokio::time::sleep(hop()).await;
        if self.proc.is_some_and(|p| self.control.is_cut_off(p)) {
            return;
        }
        let _ = self.tx.send(resp);
    }
}

/// One seeded one-way trip.
pub fn hop() -> Duration {
    Duration::from_millis(madsim::rand::thread_rng().gen_range(HOP_MIN_MS..=HOP_MAX_MS))
}

/// A worker's request on its first hop, counted by the controller while
/// it lasts.
struct HopOut<'a> {
    control: &'a Controller,
    owner: Option<Owner>,
}

impl<'a> HopOut<'a> {
    fn new(control: &'a Controller, from: Sender) -> Self {
        let owner = match from {
            Sender::Worker(owner) => Some(owner),
            Sender::Client(_) => None,
        };
        if let Some(owner) = owner {
            control.hop_out(owner);
        }
        HopOut { control, owner }
    }
}

impl Drop for HopOut<'_> {
    fn drop(&mut self) {
        if let Some(owner) = self.owner {
            self.control.hop_in(owner);
        }
    }
}

/// A process's end of the link to the store.
pub struct Link<E: EngineUnderTest> {
    to_store: mpsc::UnboundedSender<Envelope<E>>,
    control: Arc<Controller>,
    from: Sender,
    proc: Option<ProcId>,
}

impl<E: EngineUnderTest> Clone for Link<E> {
    fn clone(&self) -> Self {
        Link { to_store: self.to_store.clone(), control: self.control.clone(), from: self.from, proc: self.proc }
    }
}

impl<E: EngineUnderTest> Link<E> {
    pub fn new(
        to_store: mpsc::UnboundedSender<Envelope<E>>,
        control: Arc<Controller>,
        from: Sender,
        proc: Option<ProcId>,
    ) -> Self {
        Link { to_store, control, from, proc }
    }

    /// The same link, sending as `from` (one client call).
    pub fn as_sender(&self, from: Sender) -> Self {
        Link { from, ..self.clone() }
    }

    pub fn sender(&self) -> Sender {
        self.from
    }

    fn cut_off(&self) -> bool {
        self.proc.is_some_and(|p| self.control.is_cut_off(p))
    }

    /// Sends `req` to the store and waits for its answer, for ever if the
    /// request or the answer is lost (the caller's deadline decides).
    pub async fn call(&self, req: E::Request) -> E::Response {
        {
            // A pause waits until the request has left (see
            // `Controller::pause`); the guard also gives the hop back when
            // the caller drops the call before it left.
            let _out = HopOut::new(&self.control, self.from);
            tokio::time::sleep(hop()).await;
        }
        // A partition drops what crosses it: decided when the request
        // reaches the other side.
        if self.cut_off() {
            return std::future::pending().await;
        }
        let (tx, rx) = oneshot::channel();
        let reply = Reply { tx, proc: self.proc, control: self.control.clone() };
        let envelope = Envelope { from: self.from, proc: self.proc, req, reply };
        if self.to_store.send(envelope).is_err() {
            return std::future::pending().await;
        }
        match rx.await {
            Ok(resp) => resp,
            // The store dropped it (a crash, a lost answer): no answer comes.
            Err(_) => std::future::pending().await,
        }
    }
}
