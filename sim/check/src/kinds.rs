//! Kinds of record, and the set of kinds a checker reads.
//!
//! A history holds about 10,000 records per swarm seed and most checkers act
//! on a few kinds of them (a commit, a claim's arrival, a callback). Calling
//! every checker for every record cost more than most of them spend judging:
//! `check` calls a checker only for the kinds it declares
//! ([`crate::Checker::reads`]). A checker that judges at every moment (a
//! deadline that passes with time alone) reads [`Kinds::ALL`], the default.
//! `check_reading_every_record` is the reference that ignores the
//! declarations; the crate's cases and `tests/judge_dispatch.rs` hold that
//! both judge every history alike, evaluation counts included.

use leasesim_vocab::history::{Entry, Record};
use leasesim_vocab::truth::Fact;

/// A set of kinds of record, one bit per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kinds(u32);

/// How many kinds there are: every `Fact` variant, testimony, world events.
pub const KIND_COUNT: usize = 24;

impl Kinds {
    pub const ALL: Kinds = Kinds((1 << KIND_COUNT) - 1);
    pub const NONE: Kinds = Kinds(0);
    /// Any of the engine's testimony (`Entry::Engine`).
    pub const ENGINE: Kinds = Kinds(1 << 0);
    /// Any world event (`Entry::World`).
    pub const WORLD: Kinds = Kinds(1 << 1);
    pub const ARRIVED: Kinds = Kinds(1 << 2);
    pub const DROPPED: Kinds = Kinds(1 << 3);
    pub const REFUSED: Kinds = Kinds(1 << 4);
    pub const HANDED: Kinds = Kinds(1 << 5);
    pub const ANSWERED: Kinds = Kinds(1 << 6);
    pub const REPLIED: Kinds = Kinds(1 << 7);
    pub const DRIFT: Kinds = Kinds(1 << 8);
    pub const FINAL: Kinds = Kinds(1 << 9);
    pub const BODY_STARTED: Kinds = Kinds(1 << 10);
    pub const BODY_ENDED: Kinds = Kinds(1 << 11);
    pub const BODY_STOPPED: Kinds = Kinds(1 << 12);
    pub const CALLBACK: Kinds = Kinds(1 << 13);
    pub const CLIENT_CALLED: Kinds = Kinds(1 << 14);
    pub const CLIENT_ANSWERED: Kinds = Kinds(1 << 15);
    pub const NOTE_SENT: Kinds = Kinds(1 << 16);
    pub const NOTE_DELIVERED: Kinds = Kinds(1 << 17);
    pub const TXN_SENT: Kinds = Kinds(1 << 18);
    pub const PARTITIONED: Kinds = Kinds(1 << 19);
    pub const REJOINED: Kinds = Kinds(1 << 20);
    pub const STORE_CRASHED: Kinds = Kinds(1 << 21);
    pub const STORE_RESTARTED: Kinds = Kinds(1 << 22);
    pub const FINAL_QUEUES: Kinds = Kinds(1 << 23);
    /// The records that carry a commit (`crate::commit`).
    pub const COMMIT: Kinds = Kinds::ANSWERED.or(Kinds::DRIFT);

    pub const fn or(self, other: Kinds) -> Kinds {
        Kinds(self.0 | other.0)
    }

    pub const fn contains(self, other: Kinds) -> bool {
        self.0 & other.0 == other.0
    }

    /// The kind of `rec`, as an index below [`KIND_COUNT`].
    pub fn index_of(rec: &Record) -> usize {
        let fact = match &rec.entry {
            Entry::Engine(_) => return 0,
            Entry::World(_) => return 1,
            Entry::Truth(f) => f,
        };
        // A new variant must be added here and given a bit: the match is
        // exhaustive so that the compiler says so.
        2 + match fact {
            Fact::Arrived { .. } => 0,
            Fact::Dropped { .. } => 1,
            Fact::Refused { .. } => 2,
            Fact::Handed { .. } => 3,
            Fact::Answered { .. } => 4,
            Fact::Replied { .. } => 5,
            Fact::Drift { .. } => 6,
            Fact::Final { .. } => 7,
            Fact::BodyStarted { .. } => 8,
            Fact::BodyEnded { .. } => 9,
            Fact::BodyStopped { .. } => 10,
            Fact::Callback { .. } => 11,
            Fact::ClientCalled { .. } => 12,
            Fact::ClientAnswered { .. } => 13,
            Fact::NoteSent { .. } => 14,
            Fact::NoteDelivered { .. } => 15,
            Fact::TxnSent { .. } => 16,
            Fact::Partitioned { .. } => 17,
            Fact::Rejoined { .. } => 18,
            Fact::StoreCrashed { .. } => 19,
            Fact::StoreRestarted => 20,
            Fact::FinalQueues { .. } => 21,
        }
    }

    /// The one kind of `rec`.
    pub fn of(rec: &Record) -> Kinds {
        Kinds(1 << Self::index_of(rec))
    }
}

/// For each kind, the indices (into `readers`) of those that read it.
pub(crate) fn by_kind(reads: impl Iterator<Item = Kinds>) -> Vec<Vec<usize>> {
    let mut lists = vec![Vec::new(); KIND_COUNT];
    for (i, kinds) in reads.enumerate() {
        for (k, list) in lists.iter_mut().enumerate() {
            if kinds.contains(Kinds(1 << k)) {
                list.push(i);
            }
        }
    }
    lists
}

#[cfg(test)]
mod tests {
    use super::{by_kind, Kinds, KIND_COUNT};

    #[test]
    fn every_kind_has_its_own_bit_and_all_holds_them() {
        let bits = [
            Kinds::ENGINE,
            Kinds::WORLD,
            Kinds::ARRIVED,
            Kinds::DROPPED,
            Kinds::REFUSED,
            Kinds::HANDED,
            Kinds::ANSWERED,
            Kinds::REPLIED,
            Kinds::DRIFT,
            Kinds::FINAL,
            Kinds::BODY_STARTED,
            Kinds::BODY_ENDED,
            Kinds::BODY_STOPPED,
            Kinds::CALLBACK,
            Kinds::CLIENT_CALLED,
            Kinds::CLIENT_ANSWERED,
            Kinds::NOTE_SENT,
            Kinds::NOTE_DELIVERED,
            Kinds::TXN_SENT,
            Kinds::PARTITIONED,
            Kinds::REJOINED,
            Kinds::STORE_CRASHED,
            Kinds::STORE_RESTARTED,
            Kinds::FINAL_QUEUES,
        ];
        assert_eq!(bits.len(), KIND_COUNT);
        for (i, b) in bits.iter().enumerate() {
            assert_eq!(*b, Kinds(1 << i), "kind {i}");
            assert!(Kinds::ALL.contains(*b));
        }
        assert!(!Kinds::NONE.contains(Kinds::ENGINE));
    }

    #[test]
    fn readers_are_listed_under_each_kind_they_read() {
        let lists = by_kind([Kinds::ALL, Kinds::COMMIT, Kinds::NONE, Kinds::ARRIVED].into_iter());
        assert_eq!(lists[0], vec![0]);
        assert_eq!(lists[2], vec![0, 3]);
        assert_eq!(lists[6], vec![0, 1]);
        assert_eq!(lists[8], vec![0, 1]);
        assert!(lists.iter().all(|l| !l.contains(&2)));
    }
}
