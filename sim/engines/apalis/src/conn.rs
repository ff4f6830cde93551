//! apalis's connection seam, written here: a `redis::aio::ConnectionLike`
//! (what `RedisStorage<Args, Conn>` is generic over) that sends every
//! command over the harness's wire to the store process, as the `redis`
//! crate's `ConnectionManager` that apalis users deploy sends it to
//! redis-server.
//!
//! What that connection does that matters to a job queue, modelled:
//! - one connection per process, shared by its clones: commands reach the
//!   server in the order they were sent and are answered in that order, so
//!   a command waits for the one before it (Redis answers one command at a
//!   time on a connection; a slow script holds up the rest);
//! - a command whose answer does not come back within the response timeout
//!   (500 ms, the `redis` crate's default) fails with an I/O error, and its
//!   effect is unknown to the caller; the next command is sent on a fresh
//!   connection (the manager reconnects), so the late answer is dropped;
//! - server errors come back as the crate's own parser reads them off the
//!   socket ([`crate::resp`]), NOSCRIPT included.
//!
//! Pub/sub is not modelled: `RedisStorage` polls (apalis's pub/sub wake-ups
//! belong to `RedisStorageFactory`, which builds its own connections).

use crate::resp;
use futures::future::BoxFuture;
use leasesim_redis_model::Reply;
use redis::aio::ConnectionLike;
use redis::{Arg, Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use std::sync::Arc;
use std::time::Duration;

/// The `redis` crate's default response timeout.
pub const RESPONSE_TIMEOUT_MS: u64 = 500;

/// How a command reaches the store and its answer comes back (the world's
/// link, or a test's direct line). It never times out on its own: a lost
/// request or answer leaves the future pending.
pub trait Wire: Send + Sync + 'static {
    fn call(&self, argv: Vec<Vec<u8>>) -> BoxFuture<'static, Reply>;
}

/// One process's connection to the simulated Redis.
#[derive(Clone)]
pub struct SimRedis {
    wire: Arc<dyn Wire>,
    /// Held while a command is out: the next waits its turn.
    turn: Arc<tokio::sync::Mutex<()>>,
    response_timeout: Duration,
}

impl std::fmt::Debug for SimRedis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimRedis(timeout {:?})", self.response_timeout)
    }
}

impl SimRedis {
    pub fn new(wire: Arc<dyn Wire>, response_timeout_ms: u64) -> SimRedis {
        assert!(response_timeout_ms > 0, "a connection needs a response timeout");
        SimRedis {
            wire,
            turn: Arc::new(tokio::sync::Mutex::new(())),
            response_timeout: Duration::from_millis(response_timeout_ms),
        }
    }

    /// Sends one command and waits for its answer, at most the timeout.
    ///
    /// The deadline runs in a task of its own. The simulator's timer does
    /// not forget a sleep that is dropped before its deadline: it still
    /// wakes whoever polled it, then. Raced in the caller's task, every
    /// answered command would wake apalis's worker again 500 ms later, and
    /// apalis fetches on every wake: a worker kept busy polling by the
    /// harness, and kept alive by it where a lost wake-up would leave a
    /// real one asleep. tokio's timer wakes nobody for a dropped sleep.
    async fn send(&self, argv: Vec<Vec<u8>>) -> RedisResult<Value> {
        let _turn = self.turn.lock().await;
        let (wire, timeout) = (self.wire.clone(), self.response_timeout);
        let (tx, rx) = futures::channel::oneshot::channel();
        tokio::spawn(async move {
            let _ = tx.send(tokio::time::timeout(timeout, wire.call(argv)).await);
        });
        match rx.await {
            Ok(Ok(reply)) => resp::to_value(&reply),
            Ok(Err(_)) | Err(_) => Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the simulated Redis did not answer within the response timeout",
            ))),
        }
    }
}

/// A command's words, as they would be written to the socket.
pub fn argv(cmd: &Cmd) -> Vec<Vec<u8>> {
    cmd.args_iter()
        .map(|arg| match arg {
            Arg::Simple(bytes) => bytes.to_vec(),
            // apalis never scans; a cursor (or any kind of argument a later
            // `redis` adds) starts from the beginning.
            _ => b"0".to_vec(),
        })
        .collect()
}

impl ConnectionLike for SimRedis {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let argv = argv(cmd);
        Box::pin(async move { self.send(argv).await })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            // apalis 1.0.0 sends no pipeline; a plain one is its commands in
            // order. MULTI/EXEC is not modelled, and is refused rather than
            // run as if it were atomic.
            if pipeline.is_transaction() {
                return Err(RedisError::from(std::io::Error::other(
                    "the simulated Redis does not model MULTI/EXEC (apalis 1.0.0 sends none)",
                )));
            }
            let mut values = Vec::new();
            for cmd in pipeline.cmd_iter() {
                values.push(self.send(argv(cmd)).await?);
            }
            Ok(values.into_iter().skip(offset).take(count).collect())
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}
