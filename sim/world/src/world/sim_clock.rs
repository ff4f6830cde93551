//! Simulated time as the harness and the engine's processes read it.
//!
//! `Instant::now()` under madsim goes through its libc `clock_gettime`
//! override: a thread-local lookup of the runtime and two reference-count
//! bumps per read. The world reads the time for every record, every fault
//! roll and every engine decision, so it keeps one handle to the runtime's
//! clock instead. Both read the same simulated nanoseconds, so every value
//! (and every trace) is the same as through `Instant`.

use madsim::time::TimeHandle;
use std::time::Duration;

/// The world's time: simulated milliseconds since the world started.
#[derive(Clone)]
pub struct SimTime {
    handle: TimeHandle,
    /// The runtime's elapsed time when the world started.
    origin: Duration,
}

impl SimTime {
    /// Starts counting now. Must be called inside the world's runtime.
    pub fn start() -> Self {
        let handle = TimeHandle::current();
        let origin = handle.elapsed();
        SimTime { handle, origin }
    }

    pub fn now_ms(&self) -> u64 {
        (self.handle.elapsed() - self.origin).as_millis() as u64
    }
}

/// A process's clock: the world's time plus the process's fixed offset
/// (the `clock-offset` fault), never below zero.
pub struct SimClock {
    time: SimTime,
    offset_ms: i64,
}

impl SimClock {
    pub fn new(time: SimTime, offset_ms: i64) -> Self {
        SimClock { time, offset_ms }
    }
}

impl SimClock {
    /// The process's time in ms: the world's, plus its offset.
    pub fn now_ms(&self) -> u64 {
        (self.time.now_ms() as i64 + self.offset_ms).max(0) as u64
    }
}
