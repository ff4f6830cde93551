//! The event history of one run: the engine's events (testimony), the
//! world's own (process lifecycle, faults, phases) and the harness's ground
//! truth from its seams ([`Fact`]), each stamped with simulated time.
//!
//! The canonical history is the sequence of records in emission order; its
//! hash is the run's trace hash. Same seed, same history, same hash.

pub use crate::truth::Fact;
use leasesim::event::{Event, Observer};
use leasesim::ids::{Owner, ProcId};
use serde::{Deserialize, Serialize};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

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

/// Collects the history; the engine sees it only as an [`Observer`].
#[derive(Clone)]
pub struct Recorder {
    inner: Arc<Mutex<Vec<Record>>>,
    time: crate::world::sim_clock::SimTime,
    max_records: usize,
    /// Off only in `bench`'s phase timing: the same world without its
    /// history (nothing the world does reads the history back).
    enabled: bool,
}

impl Recorder {
    pub fn new(time: crate::world::sim_clock::SimTime, max_records: usize, enabled: bool) -> Self {
        Recorder { inner: Arc::new(Mutex::new(Vec::with_capacity(4096))), time, max_records, enabled }
    }

    /// Whether anything is recorded (the tap skips its reads when not).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn now_ms(&self) -> u64 {
        self.time.now_ms()
    }

    pub fn world(&self, event: WorldEvent) {
        self.push(Entry::World(event));
    }

    /// Records ground truth seen at one of the harness's seams.
    pub fn fact(&self, fact: Fact) {
        self.push(Entry::Truth(fact));
    }

    fn push(&self, entry: Entry) {
        if !self.enabled {
            return;
        }
        let at_ms = self.now_ms();
        let mut records = self.inner.lock().expect("history lock");
        if records.len() >= self.max_records {
            drop(records);
            // A runaway world (an event storm) must not take the campaign's
            // memory with it: the seed ends here as a failure of its own kind.
            std::panic::panic_any(LimitExceeded { records: self.max_records });
        }
        records.push(Record { at_ms, entry });
    }

    pub fn take(&self) -> Vec<Record> {
        std::mem::take(&mut *self.inner.lock().expect("history lock"))
    }
}

impl Observer for Recorder {
    fn emit(&self, event: Event) {
        self.push(Entry::Engine(event));
    }
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
