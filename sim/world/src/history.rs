//! The event history of one run: the engine's events (testimony), the
//! world's own (process lifecycle, faults, phases) and the harness's ground
//! truth from its seams ([`Fact`]), each stamped with simulated time.
//!
//! The canonical history is the sequence of records in emission order; its
//! hash is the run's trace hash. Same seed, same history, same hash.

pub use leasesim_vocab::history::{trace_hash, Entry, Fact, Fnv64, LimitExceeded, Record, WorldEvent, MAX_RECORDS};
use std::sync::{Arc, Mutex};

/// Collects the history. An engine sees it only through its adapter (as
/// its observer seam, if it has one).
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
        Recorder { inner: Arc::new(Mutex::new(spare_buffer())), time, max_records, enabled }
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

    /// Records the engine's testimony (already in the harness's words).
    pub fn testimony(&self, event: leasesim_vocab::testimony::Event) {
        self.push(Entry::Engine(event));
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

/// Emptied history buffers of earlier runs, for the next runs to fill.
/// A swarm history is about 10,000 records: grown from 4,096 every seed, its
/// buffer was copied twice and its fresh pages zeroed, and perf put most of
/// `Recorder::push` in that growth. Each seed runs on a fresh thread, so the
/// spares are shared. Allocation decides nothing a run does, so traces are
/// unchanged.
static SPARE: Mutex<Vec<Vec<Record>>> = Mutex::new(Vec::new());

/// At most this many spares are kept (one or two per job in flight).
const SPARE_BUFFERS: usize = 4;

/// A buffer larger than this (a runaway history) is freed, not kept: a
/// campaign's memory stays flat.
const SPARE_RECORDS_MAX: usize = 1 << 15;

/// A buffer for a new history: a spare if one is kept, else a new one.
fn spare_buffer() -> Vec<Record> {
    let spare = SPARE.lock().unwrap_or_else(|e| e.into_inner()).pop();
    spare.unwrap_or_else(|| Vec::with_capacity(4096))
}

/// Hands a judged history's buffer back for a later run (its records are
/// dropped here).
pub fn recycle(mut history: Vec<Record>) {
    if history.capacity() > SPARE_RECORDS_MAX {
        return;
    }
    history.clear();
    let mut spare = SPARE.lock().unwrap_or_else(|e| e.into_inner());
    if spare.len() < SPARE_BUFFERS {
        spare.push(history);
    }
}
