//! Deadlines that are forgotten when dropped, as tokio's are: the timeouts
//! an adapter's connection puts around each call to the store.
//!
//! Why not `tokio::time::timeout`: the simulator's timer (madsim 0.2.34)
//! cannot cancel. Every pending poll of a sleep adds an entry that stays in
//! the timer's heap until its deadline, and then wakes whoever polled it,
//! even if the sleep was dropped long before. A connection that answers in
//! milliseconds under a 30 s timeout leaves one such entry per poll: the
//! heap grows with the call rate, and 30 s after each call the engine's task
//! is woken for nothing. Real tokio wakes nobody for a dropped sleep, and an
//! engine that reacts to every wake (apalis fetches on each) would be kept
//! busy, and kept alive, by the harness.
//!
//! Here one process keeps its open deadlines in a [`Deadlines`] map, and one
//! task of that process (the wheel) sleeps until the earliest of them. A
//! call that ends removes its entry; the wheel wakes only calls whose
//! deadline has passed. The simulator's heap holds about one entry per
//! process instead of one per call.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::time::Instant;

/// The deadline passed before the call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

/// One process's open deadlines. Clones share them. Build it inside the
/// process (its wheel is spawned on the node of the first call), and build
/// a new one for a new incarnation.
#[derive(Clone, Default)]
pub struct Deadlines {
    inner: Arc<Mutex<Inner>>,
}

/// An open deadline's key: when, then the order it was opened in, so that
/// deadlines at one instant are woken in a fixed order.
type Key = (Instant, u64);

#[derive(Default)]
struct Inner {
    open: BTreeMap<Key, Waker>,
    next_seq: u64,
    /// The wheel's waker, while a wheel task is alive.
    wheel: Option<Waker>,
    /// The deadline the wheel's sleep is armed for.
    armed: Option<Instant>,
}

impl Inner {
    /// Wakes every open deadline that has passed, once, and forgets it, as
    /// a timer fires once: its call sees the deadline passed when it is next
    /// polled, and a call that is not polled again (its task paused, or
    /// gone) is not woken again and again.
    fn wake_due(&mut self, now: Instant) {
        let later = self.open.split_off(&(now, u64::MAX));
        for waker in std::mem::replace(&mut self.open, later).into_values() {
            waker.wake();
        }
    }

    fn earliest_after(&self, now: Instant) -> Option<Instant> {
        self.open.range((now, u64::MAX)..).next().map(|((at, _), _)| *at)
    }
}

impl Deadlines {
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `call` for at most `after`; past it, answers [`Elapsed`]. As
    /// with tokio's `timeout`, the call is polled first: a call that is
    /// ready when its deadline passes is answered.
    pub async fn timeout<F: Future>(&self, after: Duration, call: F) -> Result<F::Output, Elapsed> {
        let deadline = Instant::now() + after;
        let open = Open { deadlines: self, deadline, key: None, waker: None };
        tokio::pin!(call);
        open.race(call).await
    }

    /// How many deadlines are open: not yet passed, their calls not ended
    /// (for tests).
    pub fn open(&self) -> usize {
        self.inner.lock().expect("deadlines").open.len()
    }

    /// Opens a deadline, or refreshes its waker; wakes (or spawns) the
    /// wheel if this deadline is earlier than the one it sleeps for.
    fn register(&self, key: &mut Option<Key>, deadline: Instant, waker: &Waker) {
        let mut inner = self.inner.lock().expect("deadlines");
        if let Some(k) = key {
            // Still open: a call is polled here only before its deadline,
            // and the wheel forgets a deadline only after it.
            let entry = inner.open.get_mut(k).expect("a deadline not yet passed is open");
            *entry = waker.clone();
            return;
        }
        let k = (deadline, inner.next_seq);
        inner.next_seq += 1;
        inner.open.insert(k, waker.clone());
        *key = Some(k);
        if inner.armed.is_some_and(|armed| armed <= deadline) {
            return;
        }
        // A wheel spawned but not yet run holds a no-op waker: it sees this
        // deadline when it first runs.
        match &inner.wheel {
            Some(wheel) => wheel.wake_by_ref(),
            None => {
                inner.wheel = Some(Waker::noop().clone());
                drop(inner);
                tokio::spawn(Wheel { inner: self.inner.clone(), sleep: None });
            }
        }
    }

    fn close(&self, key: Key) {
        self.inner.lock().expect("deadlines").open.remove(&key);
    }
}

impl Drop for Deadlines {
    /// The last handle gone: the wheel, if asleep with nothing open, is
    /// woken to end (a client's connection lives for one call).
    fn drop(&mut self) {
        if Arc::strong_count(&self.inner) == 2 {
            if let Ok(inner) = self.inner.lock() {
                if let Some(wheel) = &inner.wheel {
                    wheel.wake_by_ref();
                }
            }
        }
    }
}

/// One call's open deadline.
struct Open<'a> {
    deadlines: &'a Deadlines,
    deadline: Instant,
    key: Option<Key>,
    /// The waker its entry holds: a poll by the same task leaves the entry
    /// alone, without taking the lock.
    waker: Option<Waker>,
}

impl Open<'_> {
    async fn race<F: Future>(mut self, mut call: Pin<&mut F>) -> Result<F::Output, Elapsed> {
        std::future::poll_fn(move |cx| {
            if let Poll::Ready(out) = call.as_mut().poll(cx) {
                return Poll::Ready(Ok(out));
            }
            if Instant::now() >= self.deadline {
                return Poll::Ready(Err(Elapsed));
            }
            if !self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                self.deadlines.register(&mut self.key, self.deadline, cx.waker());
                self.waker = Some(cx.waker().clone());
            }
            Poll::Pending
        })
        .await
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.deadlines.close(key);
        }
    }
}

/// The task that sleeps until a process's earliest open deadline. It arms
/// one simulator timer per deadline it sleeps for, never one per poll.
struct Wheel {
    inner: Arc<Mutex<Inner>>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Future for Wheel {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let now = Instant::now();
        let mut inner = self.inner.lock().expect("deadlines");
        if inner.open.is_empty() && Arc::strong_count(&self.inner) == 1 {
            // Nobody can open a deadline any more.
            return Poll::Ready(());
        }
        inner.wake_due(now);
        if !inner.wheel.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            inner.wheel = Some(cx.waker().clone());
        }
        let next = inner.earliest_after(now);
        if next == inner.armed {
            return Poll::Pending;
        }
        inner.armed = next;
        drop(inner);
        self.sleep = next.map(|at| Box::pin(tokio::time::sleep_until(at)));
        if let Some(sleep) = self.sleep.as_mut() {
            // Polled once, when armed: each poll of a pending sleep adds a
            // timer entry. Its deadline is in the future, so it is pending.
            let _ = sleep.as_mut().poll(cx);
        }
        Poll::Pending
    }
}

impl Drop for Wheel {
    /// Ended, or killed with its node: the next call spawns a new wheel.
    fn drop(&mut self) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.wheel = None;
            inner.armed = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn in_sim<F: Future<Output = ()> + Send + 'static>(f: F) {
        let rt = madsim::runtime::Runtime::with_seed_and_config(1, madsim::Config::default());
        std::thread::spawn(move || rt.block_on(f)).join().expect("sim thread");
    }

    fn ms_since(start: Instant) -> u128 {
        // (madsim advances its clock by a few ns per poll: whole ms compared.)
        start.elapsed().as_millis()
    }

    /// Counts its polls, and never ends: how often a task was woken.
    struct Polls(Arc<AtomicU32>);

    impl Future for Polls {
        type Output = ();
        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Poll::Pending
        }
    }

    /// A task makes one call that is answered in 5 ms under a 30 s
    /// deadline, then waits on nothing; how many times is it polled while
    /// it waits, over the next minute?
    async fn polls_after_answered(deadline_forgotten: bool) -> u32 {
        let polls = Arc::new(AtomicU32::new(0));
        let counted = polls.clone();
        tokio::spawn(async move {
            let call = tokio::time::sleep(Duration::from_millis(5));
            if deadline_forgotten {
                Deadlines::new().timeout(Duration::from_secs(30), call).await.expect("answered");
            } else {
                tokio::time::timeout(Duration::from_secs(30), call).await.expect("answered");
            }
            Polls(counted).await;
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
        polls.load(Ordering::SeqCst)
    }

    #[test]
    fn an_answered_call_leaves_nothing_to_wake_its_task() {
        in_sim(async {
            assert_eq!(polls_after_answered(true).await, 1, "polled once, never woken again");
            // Why this module exists: the simulator's timer wakes the task
            // again at the forgotten deadline.
            assert_eq!(polls_after_answered(false).await, 2, "madsim's timeout: woken at its stale deadline");
        });
    }

    #[test]
    fn a_call_not_answered_fails_at_its_deadline_and_closes_it() {
        in_sim(async {
            let deadlines = Deadlines::new();
            let start = Instant::now();
            let out = deadlines.timeout(Duration::from_millis(500), std::future::pending::<()>()).await;
            assert_eq!(out, Err(Elapsed));
            assert_eq!(ms_since(start), 500);
            assert_eq!(deadlines.open(), 0);
            let answered = deadlines.timeout(Duration::from_millis(500), async { 7 }).await;
            assert_eq!(answered, Ok(7), "polled first: a ready call is answered");
            assert_eq!(deadlines.open(), 0);
        });
    }

    #[test]
    fn each_deadline_passes_at_its_own_instant_even_one_earlier_than_the_wheel_sleeps_for() {
        in_sim(async {
            let deadlines = Deadlines::new();
            let start = Instant::now();
            let mut calls = Vec::new();
            // 900 ms first (the wheel sleeps for it), then shorter ones, and
            // one answered in time.
            for (after_ms, answer_ms) in [(900, None), (300, None), (600, Some(100)), (100, None)] {
                let d = deadlines.clone();
                calls.push(tokio::spawn(async move {
                    let call = async move {
                        match answer_ms {
                            Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                            None => std::future::pending().await,
                        }
                    };
                    let out = d.timeout(Duration::from_millis(after_ms), call).await;
                    (out, ms_since(start))
                }));
                tokio::task::yield_now().await;
            }
            let mut ended = Vec::new();
            for call in calls {
                ended.push(call.await.expect("call task"));
            }
            assert_eq!(ended, vec![(Err(Elapsed), 900), (Err(Elapsed), 300), (Ok(()), 100), (Err(Elapsed), 100)]);
            assert_eq!(deadlines.open(), 0);
        });
    }

    #[test]
    fn the_wheel_ends_when_its_last_handle_is_dropped() {
        in_sim(async {
            let deadlines = Deadlines::new();
            let shared = Arc::downgrade(&deadlines.inner);
            let call = async {
                tokio::time::sleep(Duration::from_millis(5)).await;
                1
            };
            assert_eq!(deadlines.timeout(Duration::from_secs(30), call).await, Ok(1));
            tokio::task::yield_now().await;
            assert_eq!(shared.strong_count(), 2, "the wheel holds it while a handle can open deadlines");
            drop(deadlines);
            tokio::time::sleep(Duration::from_millis(1)).await;
            assert_eq!(shared.strong_count(), 0, "the wheel ended: nothing outlives a client's call");
        });
    }
}
