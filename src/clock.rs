//! The engine reads time only through [`Clock`], so a deployment can give each
//! process its own (possibly skewed) wall clock.

/// A process's view of wall-clock time in milliseconds.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> u64;
}

/// Wall time measured from the tokio clock's start, plus a fixed offset.
/// Under a simulator the tokio clock is the simulated one.
#[derive(Debug, Clone)]
pub struct TokioClock {
    origin: tokio::time::Instant,
    offset_ms: i64,
}

impl TokioClock {
    pub fn new(origin: tokio::time::Instant, offset_ms: i64) -> Self {
        TokioClock { origin, offset_ms }
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> u64 {
        let elapsed = self.origin.elapsed().as_millis() as i64;
        (elapsed + self.offset_ms).max(0) as u64
    }
}
