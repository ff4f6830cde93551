//! The simulated network between processes: madsim endpoints carrying the
//! engine's protocol as in-memory payloads (no serialization in simulation).
//!
//! Every process binds one endpoint. A call is a request datagram to the
//! store and a reply datagram back under a fresh tag; a lost or clogged
//! datagram simply never arrives, and the caller's own deadline decides how
//! long it waits. Every request travels with its [`Sender`], stamped here by
//! the harness (not taken from the request), so the store seam knows who
//! really sent it. Store faults enter at the store seam (`store_node`); this
//! module only carries messages, and records the peer notes it carries.

use super::builtin;
use super::store_node::StoreNode;
use super::variant::Variant;
use crate::history::Recorder;
use crate::truth::{Fact, Sender, TxnSend};
use leasesim::proto::{PeerNote, Request, Response, RpcError, Transport};
use madsim::net::Endpoint;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub const PORT: u16 = 7000;
/// Tag of requests to the store.
pub const REQUEST_TAG: u64 = 1;
/// Tag of peer notes between workers.
pub const NOTE_TAG: u64 = 2;

pub fn store_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))
}

pub fn client_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 2, 1))
}

pub fn worker_ip(proc: u32) -> IpAddr {
    assert!((1..=250).contains(&proc), "worker index out of range");
    IpAddr::V4(Ipv4Addr::new(10, 0, 1, proc as u8))
}

pub fn addr(ip: IpAddr) -> SocketAddr {
    SocketAddr::new(ip, PORT)
}

/// A request as it travels: the tag its reply must carry, who sent it, and
/// the request.
pub type Envelope = (u64, Sender, Request);

#[derive(Clone)]
pub struct SimTransport {
    inner: Arc<Inner>,
    /// Who this handle sends as (a client call gets a handle of its own).
    origin: Sender,
    /// A test's engine variant that sees every call first.
    variant: Option<Arc<dyn Variant>>,
}

struct Inner {
    ep: Endpoint,
    store: SocketAddr,
    peers: Vec<SocketAddr>,
    next_tag: AtomicU64,
    rec: Recorder,
}

impl SimTransport {
    /// Binds this process's endpoint. `incarnation` keeps reply tags of a
    /// restarted process apart from those of its previous life.
    pub async fn bind(
        ip: IpAddr,
        incarnation: u32,
        peers: Vec<SocketAddr>,
        origin: Sender,
        rec: Recorder,
    ) -> std::io::Result<Self> {
        let ep = Endpoint::bind(addr(ip)).await?;
        let next_tag = AtomicU64::new(((incarnation as u64) + 1) << 40);
        let inner = Arc::new(Inner { ep, store: addr(store_ip()), peers, next_tag, rec });
        Ok(SimTransport { inner, origin, variant: None })
    }

    /// The same endpoint, sending as `origin` (one client call).
    pub fn as_sender(&self, origin: Sender) -> Self {
        SimTransport { origin, ..self.clone() }
    }

    pub fn with_variant(mut self, variant: Option<Arc<dyn Variant>>) -> Self {
        self.variant = variant;
        self
    }

    /// One request datagram out, one reply datagram back.
    async fn send(&self, req: Request) -> Result<Response, RpcError> {
        let inner = &self.inner;
        let tag = inner.next_tag.fetch_add(1, Ordering::Relaxed);
        if let Sender::Worker(from) = self.origin {
            if req.txn().is_some() && inner.rec.enabled() {
                if let Some((txn, fence, send)) = TxnSend::of(&builtin::op(&req)) {
                    inner.rec.fact(Fact::TxnSent { from, txn, fence, send });
                }
            }
        }
        let envelope: Envelope = (tag, self.origin, req);
        inner.ep.send_to_raw(inner.store, REQUEST_TAG, Box::new(envelope)).await.map_err(|_| RpcError::Unavailable)?;
        let (payload, _) = inner.ep.recv_from_raw(tag).await.map_err(|_| RpcError::Unavailable)?;
        Ok(*payload.downcast::<Response>().expect("a reply carries a Response"))
    }
}

impl Transport for SimTransport {
    async fn call(&self, req: Request) -> Result<Response, RpcError> {
        let Some(variant) = &self.variant else {
            return self.send(req).await;
        };
        let plain = SimTransport { variant: None, ..self.clone() };
        let send: super::variant::Call = Arc::new(move |req| {
            let plain = plain.clone();
            Box::pin(async move { plain.send(req).await })
        });
        variant.call(self.origin.owner().map(builtin::engine_owner), req, send).await
    }

    async fn notify_peers(&self, note: PeerNote) {
        if let Sender::Worker(from) = self.origin {
            self.inner.rec.fact(Fact::NoteSent { from, note: builtin::note(&note) });
        }
        for peer in &self.inner.peers {
            let _ = self.inner.ep.send_to_raw(*peer, NOTE_TAG, Box::new(note)).await;
        }
    }

    async fn recv_note(&self) -> Option<PeerNote> {
        let (payload, _) = self.inner.ep.recv_from_raw(NOTE_TAG).await.ok()?;
        let note = *payload.downcast::<PeerNote>().expect("a note carries a PeerNote");
        if let Sender::Worker(to) = self.origin {
            self.inner.rec.fact(Fact::NoteDelivered { to, note: builtin::note(&note) });
        }
        Some(note)
    }
}

/// The store process's side: receive requests, answer each from its own task.
pub async fn serve_store(ep: Endpoint, store: Arc<StoreNode>) {
    let ep = Arc::new(ep);
    loop {
        let Ok((payload, from)) = ep.recv_from_raw(REQUEST_TAG).await else {
            return;
        };
        let (tag, sender, req) = *payload.downcast::<Envelope>().expect("a request carries an Envelope");
        if let Some(after_ms) = store.duplicate_after_ms(&req) {
            let (store, req) = (store.clone(), req.clone());
            tokio::spawn(Box::pin(async move {
                tokio::time::sleep(std::time::Duration::from_millis(after_ms)).await;
                store.handle(sender, req, true).await;
            }));
        }
        // Boxed: serving a request is a large future (every store fault's
        // state), and a spawn moves its future several times on the way
        // into its task; a box is moved instead.
        tokio::spawn(Box::pin(answer(ep.clone(), store.clone(), from, tag, sender, req)));
    }
}

/// Serves one request and sends its answer back under `tag`.
async fn answer(ep: Arc<Endpoint>, store: Arc<StoreNode>, to: SocketAddr, tag: u64, sender: Sender, req: Request) {
    // `None`: the answer is never sent (the store seam dropped it).
    if let Some(resp) = store.handle(sender, req, false).await {
        let _ = ep.send_to_raw(to, tag, Box::new(resp)).await;
    }
}
