//! The store as a process: one [`Store`] behind a lock, answering requests.
//!
//! Long polls and lag-bounded queries are held open here: the request is
//! re-applied whenever the store changes or a ready task becomes due, until it
//! has an answer or its wait runs out. A held claim does not know whether its
//! caller is still alive; it claims for whoever asked.

use super::Store;
use crate::clock::Clock;
use crate::config::EngineConfig;
use crate::event::{Event, Observer};
use crate::proto::{Rejection, Request, Response};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

pub struct StoreServer {
    store: Mutex<Store>,
    changed: Notify,
    clock: Arc<dyn Clock>,
    obs: Arc<dyn Observer>,
    maintenance_work_ms: u64,
    /// How long a request may wait for a row lock.
    lock_wait_ms: u64,
}

impl StoreServer {
    pub fn new(cfg: EngineConfig, clock: Arc<dyn Clock>, obs: Arc<dyn Observer>) -> Self {
        let (maintenance_work_ms, lock_wait_ms) = (cfg.maintenance_work_ms, cfg.txn_timeout_ms);
        let store = Mutex::new(Store::new(cfg));
        StoreServer { store, changed: Notify::new(), clock, obs, maintenance_work_ms, lock_wait_ms }
    }

    /// Applies `req` now (one transaction, or one statement of one).
    pub fn apply_now(&self, req: &Request) -> Response {
        let now_ms = self.clock.now_ms();
        let mut store = self.store.lock().expect("store lock");
        let ends = store.txn_ends();
        let resp = store.apply(now_ms, req, &*self.obs);
        // A transaction that ended released its locks: waiters look again.
        let released = store.txn_ends() != ends;
        drop(store);
        if released || changes_state(req, &resp) {
            self.changed.notify_waiters();
        }
        resp
    }

    /// The store process restarted: what committed survives, the
    /// transactions it had open do not.
    pub fn lose_open_transactions(&self) {
        self.store.lock().expect("store lock").abort_all_txns();
        self.changed.notify_waiters();
    }

    /// Applies `req` once no other transaction holds a row it writes, or
    /// when it has waited `txn_timeout_ms` for one (it then times out).
    async fn apply_unlocked(&self, req: &Request) -> Response {
        let give_up_ms = self.clock.now_ms() + self.lock_wait_ms;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let now_ms = self.clock.now_ms();
            let blocked = self.store.lock().expect("store lock").blocked_until(now_ms, req);
            let Some(holder_deadline_ms) = blocked.filter(|_| now_ms < give_up_ms) else {
                return self.apply_now(req);
            };
            let wake_ms = give_up_ms.min(holder_deadline_ms).max(now_ms + 1);
            tokio::select! {
                biased;
                _ = &mut changed => {}
                _ = tokio::time::sleep(Duration::from_millis(wake_ms - now_ms)) => {}
            }
        }
    }

    /// A read-only look at the state (for end-of-run reports and tests).
    pub fn with_store<R>(&self, f: impl FnOnce(&Store) -> R) -> R {
        f(&self.store.lock().expect("store lock"))
    }

    /// Serves one request, holding it open as its kind demands.
    pub async fn handle(&self, req: Request) -> Response {
        match req {
            Request::Claim { wait_ms, .. } if wait_ms > 0 => {
                let deadline_ms = self.clock.now_ms() + wait_ms;
                self.hold(&req, deadline_ms, |r| matches!(r, Response::Claimed { grants } if !grants.is_empty())).await
            }
            Request::QueryIndex { index, lag_timeout_ms } => {
                let start_ms = self.clock.now_ms();
                let resp = self
                    .hold(&req, start_ms + lag_timeout_ms, |r| matches!(r, Response::Query { materialized: true }))
                    .await;
                let materialized = matches!(resp, Response::Query { materialized: true });
                let waited_ms = self.clock.now_ms() - start_ms;
                self.obs.emit(Event::QueryAnswered { index, materialized, waited_ms });
                resp
            }
            Request::Maintain { timeout_ms, .. } => {
                // A pass does real work on the store side before it commits,
                // under its statement timeout.
                if timeout_ms.is_some_and(|t| t < self.maintenance_work_ms) {
                    tokio::time::sleep(Duration::from_millis(timeout_ms.unwrap_or(0))).await;
                    return Response::Rejected { reason: Rejection::TimedOut };
                }
                tokio::time::sleep(Duration::from_millis(self.maintenance_work_ms)).await;
                self.apply_now(&req)
            }
            _ => self.apply_unlocked(&req).await,
        }
    }

    /// Re-applies `req` until `done` accepts the answer or the deadline passes.
    async fn hold(&self, req: &Request, deadline_ms: u64, done: impl Fn(&Response) -> bool) -> Response {
        loop {
            // Register interest before looking, so no change is missed between.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let resp = self.apply_now(req);
            let now_ms = self.clock.now_ms();
            if done(&resp) || now_ms >= deadline_ms {
                return resp;
            }
            // A task becoming due, or a transaction timing out (its rows
            // are no longer skipped), may change the answer.
            let (next_due_ms, next_txn_end_ms) = self.with_store(|s| (s.next_due_ms(now_ms), s.next_txn_deadline_ms()));
            let wake_ms = deadline_ms.min(next_due_ms.unwrap_or(u64::MAX)).min(next_txn_end_ms.unwrap_or(u64::MAX));
            tokio::select! {
                biased;
                _ = &mut changed => {}
                _ = tokio::time::sleep(Duration::from_millis(wake_ms - now_ms)) => {}
            }
        }
    }
}

/// Did applying `req` (answered by `resp`) change what a held request sees?
/// Only real changes wake held requests; an empty claim waking the others
/// would make long polls wake each other forever at one instant.
fn changes_state(req: &Request, resp: &Response) -> bool {
    match (req, resp) {
        (_, Response::Rejected { .. }) => false,
        (Request::Claim { .. }, Response::Claimed { grants }) => !grants.is_empty(),
        (Request::Heartbeat { .. }, _) => false,
        // Only a commit or a rollback changes what others see.
        (Request::Exec { commit, .. }, _) => *commit,
        (Request::QueryIndex { .. } | Request::PipelineSnapshot { .. } | Request::LeaseValid { .. }, _) => false,
        (
            Request::ReleaseDead { .. }
            | Request::ReleaseOrphans { .. }
            | Request::ReclaimExpired { .. }
            | Request::Repair { .. },
            Response::Released { tasks },
        ) => *tasks > 0,
        _ => true,
    }
}
