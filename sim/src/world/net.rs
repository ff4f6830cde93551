//! The simulated network between processes: madsim endpoints carrying the
//! engine's protocol as in-memory payloads (no serialization in simulation).
//!
//! Every process binds one endpoint. A call is a request datagram to the
//! store and a reply datagram back under a fresh tag; a lost or clogged
//! datagram simply never arrives, and the caller's own deadline decides how
//! long it waits. The store side of the network is where store faults enter
//! (see `faults` once it exists): this module only carries messages.

use super::store_node::StoreNode;
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

/// A request as it travels: the tag its reply must carry, and the request.
pub type Envelope = (u64, Request);

#[derive(Clone)]
pub struct SimTransport {
    inner: Arc<Inner>,
}

struct Inner {
    ep: Endpoint,
    store: SocketAddr,
    peers: Vec<SocketAddr>,
    next_tag: AtomicU64,
}

impl SimTransport {
    /// Binds this process's endpoint. `incarnation` keeps reply tags of a
    /// restarted process apart from those of its previous life.
    pub async fn bind(ip: IpAddr, incarnation: u32, peers: Vec<SocketAddr>) -> std::io::Result<Self> {
        let ep = Endpoint::bind(addr(ip)).await?;
        let next_tag = AtomicU64::new(((incarnation as u64) + 1) << 40);
        Ok(SimTransport { inner: Arc::new(Inner { ep, store: addr(store_ip()), peers, next_tag }) })
    }
}

impl Transport for SimTransport {
    async fn call(&self, req: Request) -> Result<Response, RpcError> {
        let inner = &self.inner;
        let tag = inner.next_tag.fetch_add(1, Ordering::Relaxed);
        let envelope: Envelope = (tag, req);
        inner.ep.send_to_raw(inner.store, REQUEST_TAG, Box::new(envelope)).await.map_err(|_| RpcError::Unavailable)?;
        let (payload, _) = inner.ep.recv_from_raw(tag).await.map_err(|_| RpcError::Unavailable)?;
        Ok(*payload.downcast::<Response>().expect("a reply carries a Response"))
    }

    async fn notify_peers(&self, note: PeerNote) {
        for peer in &self.inner.peers {
            let _ = self.inner.ep.send_to_raw(*peer, NOTE_TAG, Box::new(note)).await;
        }
    }

    async fn recv_note(&self) -> Option<PeerNote> {
        let (payload, _) = self.inner.ep.recv_from_raw(NOTE_TAG).await.ok()?;
        Some(*payload.downcast::<PeerNote>().expect("a note carries a PeerNote"))
    }
}

/// The store process's side: receive requests, answer each from its own task.
pub async fn serve_store(ep: Endpoint, store: Arc<StoreNode>) {
    let ep = Arc::new(ep);
    loop {
        let Ok((payload, from)) = ep.recv_from_raw(REQUEST_TAG).await else {
            return;
        };
        let (tag, req) = *payload.downcast::<Envelope>().expect("a request carries an Envelope");
        let ep = ep.clone();
        let store = store.clone();
        tokio::spawn(async move {
            // `None`: the answer is never sent (the store seam dropped it).
            if let Some(resp) = store.handle(req).await {
                let _ = ep.send_to_raw(from, tag, Box::new(resp)).await;
            }
        });
    }
}
