//! The built-in engine's network seam (`leasesim::proto::Transport`) over
//! the harness's store link, and its peer notes over madsim endpoints.
//!
//! A call goes through the link, so every network and store fault applies;
//! a note is a datagram to each peer (a partition cuts it too). What a
//! worker sends of a transaction is recorded in send order (`TxnSent`),
//! whatever the network does to it afterwards.

use crate::convert;
use crate::variant::{Call, Variant};
use crate::Builtin;
use leasesim::proto::{PeerNote, Request, Response, RpcError, Transport};
use leasesim_vocab::truth::{Fact, Sender, TxnSend};
use leasesim_world::history::Recorder;
use leasesim_world::world::link::Link;
use leasesim_world::world::net;
use madsim::net::Endpoint;
use std::net::SocketAddr;
use std::sync::Arc;

/// Tag of peer notes between workers.
const NOTE_TAG: u64 = 2;

#[derive(Clone)]
pub struct SimTransport {
    link: Link<Builtin>,
    /// The worker's endpoint for peer notes (`None`: the client).
    notes: Option<Arc<Endpoint>>,
    peers: Vec<SocketAddr>,
    rec: Recorder,
    /// A test's engine variant that sees every call first.
    variant: Option<Arc<dyn Variant>>,
}

impl SimTransport {
    /// A worker's transport: the link, and an endpoint for notes at its address.
    pub async fn worker(
        link: Link<Builtin>,
        proc: u32,
        peers: &[u32],
        rec: Recorder,
        variant: Option<Arc<dyn Variant>>,
    ) -> std::io::Result<Self> {
        let ep = Endpoint::bind(net::addr(net::worker_ip(proc))).await?;
        let peers = peers.iter().map(|&p| net::addr(net::worker_ip(p))).collect();
        Ok(SimTransport { link, notes: Some(Arc::new(ep)), peers, rec, variant })
    }

    /// One client call's transport.
    pub fn client(link: Link<Builtin>, rec: Recorder, variant: Option<Arc<dyn Variant>>) -> Self {
        SimTransport { link, notes: None, peers: Vec::new(), rec, variant }
    }

    async fn send(&self, req: Request) -> Result<Response, RpcError> {
        if let Sender::Worker(from) = self.link.sender() {
            if req.txn().is_some() && self.rec.enabled() {
                if let Some((txn, fence, send)) = TxnSend::of(&convert::op(&req)) {
                    self.rec.fact(Fact::TxnSent { from, txn, fence, send });
                }
            }
        }
        Ok(self.link.call(req).await)
    }
}

impl Transport for SimTransport {
    async fn call(&self, req: Request) -> Result<Response, RpcError> {
        let Some(variant) = &self.variant else {
            return self.send(req).await;
        };
        let plain = SimTransport { variant: None, ..self.clone() };
        let send: Call = Arc::new(move |req| {
            let plain = plain.clone();
            Box::pin(async move { plain.send(req).await })
        });
        let from = self.link.sender().owner().map(convert::engine_owner);
        variant.call(from, req, send).await
    }

    async fn notify_peers(&self, note: PeerNote) {
        let Some(ep) = &self.notes else { return };
        if let Sender::Worker(from) = self.link.sender() {
            self.rec.fact(Fact::NoteSent { from, note: convert::note(&note) });
        }
        for peer in &self.peers {
            let _ = ep.send_to_raw(*peer, NOTE_TAG, Box::new(note)).await;
        }
    }

    async fn recv_note(&self) -> Option<PeerNote> {
        let ep = self.notes.as_ref()?;
        let (payload, _) = ep.recv_from_raw(NOTE_TAG).await.ok()?;
        let note = *payload.downcast::<PeerNote>().expect("a note carries a PeerNote");
        if let Sender::Worker(to) = self.link.sender() {
            self.rec.fact(Fact::NoteDelivered { to, note: convert::note(&note) });
        }
        Some(note)
    }
}
