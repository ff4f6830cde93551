//! A process's stop signal: the world's SIGTERM. The supervisor asks one
//! incarnation to stop; an engine that can stop gracefully
//! (`Capabilities::graceful_stop`) watches the signal at its documented
//! seam (a shutdown future, a signal handler) and exits on its own. One that
//! does not is killed when the plan's window ends, as a supervisor's
//! SIGKILL would.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

#[derive(Clone, Default)]
pub struct Stop {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    asked: AtomicBool,
    notify: Notify,
}

impl Stop {
    /// Asks the process to stop (once; asking again changes nothing).
    pub fn ask(&self) {
        self.inner.asked.store(true, Ordering::Relaxed);
        self.inner.notify.notify_waiters();
    }

    pub fn asked(&self) -> bool {
        self.inner.asked.load(Ordering::Relaxed)
    }

    /// Resolves once the process has been asked to stop.
    pub async fn requested(self) {
        loop {
            // Made before the flag is read: `notify_waiters` wakes every
            // future made before it, polled or not, so no ask is missed.
            let notified = self.inner.notify.notified();
            if self.asked() {
                return;
            }
            notified.await;
        }
    }
}
