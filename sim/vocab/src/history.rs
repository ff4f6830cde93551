//! The event history of one run: testimony (the engine's own events), the
//! world's own (process lifecycle, faults, phases) and the harness's ground
//! truth from its seams ([`Fact`]), each stamped with simulated time.
//!
//! The canonical history is the sequence of records in emission order; its
//! hash is the run's trace hash. Same seed, same history, same hash.

use crate::ids::{Owner, ProcId};
use crate::testimony::Event;
pub use crate::truth::Fact;
use serde::{Deserialize, Serialize};
use std::hash::{Hash, Hasher};

/// What the world itself did (not the engine).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "world", rename_all = "kebab-case")]
pub enum WorldEvent {
    /// A worker process (re)started with this incarnation.
    ProcessUp { owner: Owner },
    /// The process was killed: all its tasks, permits and open calls are gone.
    ProcessKilled { owner: Owner },
    /// The process stopped running (a hung/paused process) ...
    ProcessPaused { proc: ProcId },
    /// ... and runs again.
    ProcessResumed { proc: ProcId },
    /// From here on this process's clock reads global time + `offset_ms`.
    ClockOffset { proc: ProcId, offset_ms: i64 },
    /// A fault was injected. `kind` is the fault kind's stable name.
    Fault { kind: String, detail: String },
    /// Faults stop; from here on the liveness phase runs.
    Heal,
    /// The run ended here.
    End,
    // ---- new variants go last: a history's hash covers the variant's index ----
    /// The process exited on its own (its worker returned, after an error
    /// or a shutdown): gone as a killed one is, but no one killed it.
    ProcessExited { owner: Owner },
    /// The world asked the process to stop (a SIGTERM from its supervisor):
    /// an engine that can stop gracefully ends its work and exits.
    StopRequested { owner: Owner },
}

impl WorldEvent {
    /// The incarnation this event ends, killed or exited: what every
    /// reader that only needs to know a process is gone matches, so an
    /// exit is judged exactly as a kill.
    pub fn gone(&self) -> Option<Owner> {
        match self {
            WorldEvent::ProcessKilled { owner } | WorldEvent::ProcessExited { owner } => Some(*owner),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Entry {
    Engine(Event),
    World(WorldEvent),
    Truth(Fact),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Record {
    /// Simulated milliseconds since the start of the run.
    pub at_ms: u64,
    #[serde(flatten)]
    pub entry: Entry,
}

/// At most this many records per run (about 1 GiB of history at worst).
pub const MAX_RECORDS: usize = 4_000_000;

/// The panic payload of a run that went past [`MAX_RECORDS`].
#[derive(Debug, Clone, Copy)]
pub struct LimitExceeded {
    pub records: usize,
}

/// FNV-1a, 64 bit: a stable hash (std's SipHash keys are per process).
pub struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Self {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv64 {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= *b as u64;
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// The trace hash: a stable hash of the canonical history.
pub fn trace_hash(history: &[Record]) -> u64 {
    let mut h = Fnv64::default();
    history.hash(&mut h);
    h.finish()
}
