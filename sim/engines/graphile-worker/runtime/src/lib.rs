//! graphile_worker's runtime seam, on the simulator.
//!
//! graphile_worker reaches its async runtime only through the public API of
//! `graphile_worker_runtime` (spawn, sleep, intervals, timeouts, a notify,
//! channels and locks). This crate implements that API on madsim-tokio, so
//! that under `--cfg madsim` every task graphile spawns runs on the
//! simulator's scheduler and every timer is simulated time. Written here
//! from the API's documented behaviour; the workspace patches it in for the
//! crates.io crate of the same name and version.
//!
//! Channels and async locks are runtime-independent crates; they are
//! re-exported as the original does. Everything that touches the scheduler
//! or the clock is below.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

pub use async_channel::{bounded as channel, Receiver, Sender};
pub use async_lock::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
/// A notify with the documented semantics (`notify_one` keeps one permit
/// when nobody waits; `notify_waiters` wakes every future created before
/// it): tokio's, whose waiters wake in the order they registered.
pub use tokio::sync::futures::Notified;
pub use tokio::sync::Notify;

/// Why a spawned task produced no value.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error("task was aborted")]
    Aborted,
    #[error("task failed: {0}")]
    Failed(String),
}

/// Aborts a spawned task (it may be cloned and kept apart from its handle).
#[derive(Clone)]
pub struct AbortHandle(futures::future::AbortHandle);

impl AbortHandle {
    pub fn abort(&self) {
        self.0.abort();
    }
}

/// A spawned task: await it for its value, or abort it.
pub struct JoinHandle<T> {
    abort: AbortHandle,
    inner: tokio::task::JoinHandle<Result<T, futures::future::Aborted>>,
}

impl<T> JoinHandle<T> {
    pub fn abort_handle(&self) -> AbortHandle {
        self.abort.clone()
    }
}

impl<T: Send + 'static> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.inner).poll(cx).map(|joined| match joined {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(futures::future::Aborted)) => Err(JoinError::Aborted),
            Err(error) => Err(JoinError::Failed(error.to_string())),
        })
    }
}

/// Spawns `future` on the current node of the simulation. Abortable through
/// its handle; dropping the handle does not stop it.
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (handle, registration) = futures::future::AbortHandle::new_pair();
    let inner = tokio::spawn(futures::future::Abortable::new(future, registration));
    JoinHandle { abort: AbortHandle(handle), inner }
}

/// A deadline passed before the future finished.
#[derive(Debug, thiserror::Error)]
#[error("operation timed out")]
pub struct TimeoutError;

/// Sleeps for `duration` of (simulated) time.
pub fn sleep(duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(tokio::time::sleep(duration))
}

/// Sleeps until `deadline` (the process's monotonic clock, which the
/// simulator provides); at once if it has passed.
pub fn sleep_until(deadline: Instant) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        let left = deadline.saturating_duration_since(Instant::now());
        if !left.is_zero() {
            tokio::time::sleep(left).await;
        }
    })
}

/// Runs `future` until `deadline`; past it, answers [`TimeoutError`] (also
/// at once when the deadline has already passed). When both are ready, the
/// deadline wins, as in the original.
pub async fn timeout_at<F: Future>(deadline: Instant, future: F) -> Result<F::Output, TimeoutError> {
    if deadline <= Instant::now() {
        return Err(TimeoutError);
    }
    let timeout = sleep_until(deadline);
    tokio::pin!(future);
    tokio::select! {
        biased;
        _ = timeout => Err(TimeoutError),
        value = &mut future => Ok(value),
    }
}

/// Ticks every `duration`; the first tick is immediate. A tick missed by
/// more than a period is not caught up: the next one is a period after it.
pub fn interval(duration: Duration) -> Interval {
    assert!(duration > Duration::ZERO, "`period` must be non-zero.");
    Interval { duration, next: Instant::now() }
}

pub struct Interval {
    duration: Duration,
    next: Instant,
}

impl Interval {
    pub async fn tick(&mut self) {
        sleep_until(self.next).await;
        self.next += self.duration;
        let now = Instant::now();
        if self.next < now {
            self.next = now + self.duration;
        }
    }
}
