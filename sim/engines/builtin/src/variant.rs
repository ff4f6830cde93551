//! Engine variants: hooks that make the engine behave like a buggy one
//! without touching `src/`, for fitness tests (a campaign must catch each
//! invariant's variant). A variant lives in the test that uses it; the
//! engine never sees it, and the harness's ground truth does not know it is
//! there: to the checkers, a variant is just an engine with a bug.
//!
//! Every hook defaults to "as the engine does it".

use leasesim::config::EngineConfig;
use leasesim::event::{Event, Observer};
use leasesim::ids::Owner;
use leasesim::proto::{Request, Response, RpcError};
use leasesim::store::server::StoreServer;
pub use leasesim_world::engine::BoxFuture;
use std::sync::Arc;

/// A way to call the store as the network carries it (no variant in it). It
/// owns what it needs: a variant may call it more than once, or spawn a call
/// and not wait for it.
pub type Call = Arc<dyn Fn(Request) -> BoxFuture<'static, Result<Response, RpcError>> + Send + Sync>;

pub trait Variant: Send + Sync + 'static {
    /// A short name for messages.
    fn name(&self) -> &str;

    /// The configuration the engine runs with. The scenario's own stays the
    /// promise that the checkers hold the engine to.
    fn engine(&self, cfg: &mut EngineConfig) {
        let _ = cfg;
    }

    /// Serves one request in the store process, in place of the engine's
    /// store (which it may call, as often as it likes).
    fn store<'a>(&'a self, server: &'a StoreServer, req: Request) -> BoxFuture<'a, Response> {
        Box::pin(server.handle(req))
    }

    /// A worker's (`Some(owner)`) or the client's (`None`) call to the store.
    fn call<'a>(&'a self, from: Option<Owner>, req: Request, send: Call) -> BoxFuture<'a, Result<Response, RpcError>> {
        let _ = from;
        send(req)
    }

    /// An event the engine emits (its testimony): passed on as it is, changed,
    /// or (`None`) swallowed.
    fn event(&self, event: Event) -> Option<Event> {
        Some(event)
    }

    /// Work of its own that the store process runs beside serving requests.
    fn store_process(&self, server: Arc<StoreServer>) -> Option<BoxFuture<'static, ()>> {
        let _ = server;
        None
    }
}

/// The engine's observer when a variant is on: its events pass the variant.
pub struct Filtered {
    pub inner: Arc<dyn Observer>,
    pub variant: Arc<dyn Variant>,
}

impl Observer for Filtered {
    fn emit(&self, event: Event) {
        if let Some(event) = self.variant.event(event) {
            self.inner.emit(event);
        }
    }
}
