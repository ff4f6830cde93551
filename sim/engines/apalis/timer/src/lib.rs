//! apalis's timer seam, on the simulator.
//!
//! apalis-core (feature `sleep`) waits only through `futures_timer::Delay`:
//! its heartbeat timer, its poll intervals and backoffs, its long-running
//! timeouts. The original runs its own OS thread on the wall clock, which
//! no seed can replay. This crate implements the same public API, `Delay`
//! (`new`, `reset`, a `Future` of `()`), on madsim-tokio's timers, so under
//! `--cfg madsim` every wait of apalis is simulated time. Written here from
//! the API's documentation; the workspace patches it in for the crates.io
//! crate of the same name and version.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// A future that completes once `dur` has passed since it was created (or
/// last reset), on the simulated clock.
pub struct Delay {
    sleep: Pin<Box<Sleep>>,
}

impl Delay {
    /// A delay that fires `dur` from now.
    pub fn new(dur: Duration) -> Delay {
        Delay { sleep: Box::pin(tokio::time::sleep(dur)) }
    }

    /// Fires `dur` from now instead, whether or not it already fired (the
    /// original's documented behaviour: a reset delay can fire again).
    pub fn reset(&mut self, dur: Duration) {
        self.sleep.as_mut().reset(Instant::now() + dur);
    }
}

impl Future for Delay {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.sleep.as_mut().poll(cx)
    }
}

impl fmt::Debug for Delay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delay").field("deadline", &self.sleep.deadline()).finish()
    }
}
