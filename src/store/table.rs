//! The task table: task rows by id, a log of every row handed out for
//! writing, and indexes of the rows the store's scans look for.
//!
//! The log is what lets an observer of the store (the harness's tap, a
//! replication feed) read what a transaction changed from the rows it wrote
//! instead of comparing every row: a row that is not in the log since some
//! moment has not changed since then. The rows are private to this module,
//! so no code path can write one without logging it; the compiler holds
//! that, not a convention.
//!
//! The log is appended to, never read back by the store, and holds one id
//! per write: a repeated write is logged again (folding it into the last
//! entry would hide it from a reader that already read up to that entry).
//!
//! The indexes (ready rows by due time, leased rows by id) spare claims,
//! long polls and recovery passes a walk over every row: a long poll is
//! re-applied on every store change, over a table that keeps its done rows.
//! They stay exact for the same reason the log is complete: a row is only
//! written through [`RowMut`], which files it again when the write ends.

use crate::ids::TaskId;
use crate::task::{Task, TaskState};
use std::collections::btree_map::{Range, Values};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Bound, Deref, DerefMut, Index, RangeBounds};

#[derive(Debug, Clone, Default)]
pub struct TaskTable {
    rows: BTreeMap<TaskId, Task>,
    /// Ids of the rows handed out for writing, in the order they were.
    written: Vec<TaskId>,
    indexes: RowIndex,
}

/// Where the indexes file the rows, by state: the keys are the orders the
/// scans read in (claims by `(retry_at_ms, id)`, recovery passes by id).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct RowIndex {
    ready: BTreeSet<(u64, TaskId)>,
    leased: BTreeSet<TaskId>,
}

/// What of a row its index entries depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Filing {
    Ready {
        retry_at_ms: u64,
    },
    Leased,
    /// Done or dead: in no index (no scan looks for them).
    Unindexed,
}

impl Filing {
    fn of(task: &Task) -> Filing {
        match task.state {
            TaskState::Ready => Filing::Ready { retry_at_ms: task.retry_at_ms },
            TaskState::Leased => Filing::Leased,
            TaskState::Done | TaskState::Dead => Filing::Unindexed,
        }
    }
}

impl RowIndex {
    fn file(&mut self, id: TaskId, filing: Filing) {
        match filing {
            Filing::Ready { retry_at_ms } => self.ready.insert((retry_at_ms, id)),
            Filing::Leased => self.leased.insert(id),
            Filing::Unindexed => false,
        };
    }

    fn unfile(&mut self, id: TaskId, filing: Filing) {
        match filing {
            Filing::Ready { retry_at_ms } => self.ready.remove(&(retry_at_ms, id)),
            Filing::Leased => self.leased.remove(&id),
            Filing::Unindexed => false,
        };
    }
}

/// A row handed out for writing. When the write ends (the guard drops), the
/// row is filed again under what it now is: no write escapes the indexes.
pub struct RowMut<'a> {
    id: TaskId,
    /// How the row was filed when it was handed out.
    filed: Filing,
    row: &'a mut Task,
    indexes: &'a mut RowIndex,
}

impl Deref for RowMut<'_> {
    type Target = Task;

    fn deref(&self) -> &Task {
        self.row
    }
}

impl DerefMut for RowMut<'_> {
    fn deref_mut(&mut self) -> &mut Task {
        self.row
    }
}

impl Drop for RowMut<'_> {
    fn drop(&mut self) {
        debug_assert_eq!(self.row.id, self.id, "a task row keeps its id");
        let now = Filing::of(self.row);
        // Most writes (a renewal, a retry count) leave the filing as it was.
        if now != self.filed {
            self.indexes.unfile(self.id, self.filed);
            self.indexes.file(self.id, now);
        }
    }
}

impl TaskTable {
    pub fn get(&self, id: &TaskId) -> Option<&Task> {
        self.rows.get(id)
    }

    pub fn contains_key(&self, id: &TaskId) -> bool {
        self.rows.contains_key(id)
    }

    /// The row `id`, to write (logged as written whether or not it then
    /// changes: the log may say more than changed, never less).
    pub fn get_mut(&mut self, id: &TaskId) -> Option<RowMut<'_>> {
        let row = self.rows.get_mut(id)?;
        self.written.push(*id);
        Some(RowMut { id: *id, filed: Filing::of(row), row, indexes: &mut self.indexes })
    }

    pub fn insert(&mut self, id: TaskId, task: Task) -> Option<Task> {
        assert_eq!(id, task.id, "a task row is stored under its own id");
        self.written.push(id);
        let filing = Filing::of(&task);
        let old = self.rows.insert(id, task);
        let old_filing = old.as_ref().map(Filing::of);
        // A row put back as it was filed (a transaction's statement shows
        // its own version, then the committed one) keeps its key.
        if old_filing != Some(filing) {
            if let Some(old_filing) = old_filing {
                self.indexes.unfile(id, old_filing);
            }
            self.indexes.file(id, filing);
        }
        old
    }

    pub fn values(&self) -> Values<'_, TaskId, Task> {
        self.rows.values()
    }

    pub fn range<R: RangeBounds<TaskId>>(&self, range: R) -> Range<'_, TaskId, Task> {
        self.rows.range(range)
    }

    /// Ids of the ready rows due at `now_ms` (`retry_at_ms <= now_ms`), in
    /// claim order: by due time, then by id.
    pub fn ready_due(&self, now_ms: u64) -> impl Iterator<Item = TaskId> + '_ {
        debug_assert!(self.indexes_exact(), "task indexes disagree with the rows");
        self.indexes.ready.range(..=(now_ms, TaskId::MAX)).map(|&(_, id)| id)
    }

    /// The earliest due time after `now_ms` of a ready row.
    pub fn next_ready_after_ms(&self, now_ms: u64) -> Option<u64> {
        debug_assert!(self.indexes_exact(), "task indexes disagree with the rows");
        let after = (Bound::Excluded((now_ms, TaskId::MAX)), Bound::Unbounded);
        self.indexes.ready.range(after).next().map(|&(retry_at_ms, _)| retry_at_ms)
    }

    /// The leased rows, in id order (the order [`TaskTable::values`] lists
    /// them in, so a pass over them releases in the same order).
    pub fn leased(&self) -> impl Iterator<Item = &Task> + '_ {
        debug_assert!(self.indexes_exact(), "task indexes disagree with the rows");
        self.indexes.leased.iter().map(|id| &self.rows[id])
    }

    /// Do the indexes hold exactly what a walk over every row files? It
    /// costs that walk: for debug builds and tests only. Every row that
    /// should be filed is, and the indexes hold no more entries than there
    /// are such rows (a row has at most one), so none is filed wrongly.
    fn indexes_exact(&self) -> bool {
        let (mut ready, mut leased) = (0, 0);
        let all_filed = self.rows.iter().all(|(&id, row)| match Filing::of(row) {
            Filing::Ready { retry_at_ms } => {
                ready += 1;
                self.indexes.ready.contains(&(retry_at_ms, id))
            }
            Filing::Leased => {
                leased += 1;
                self.indexes.leased.contains(&id)
            }
            Filing::Unindexed => true,
        });
        all_filed && ready == self.indexes.ready.len() && leased == self.indexes.leased.len()
    }

    /// How many writes the log holds: a position to read it from later.
    pub fn writes(&self) -> usize {
        self.written.len()
    }

    /// The ids of the rows written since the log held `from` writes (with
    /// repeats, in write order).
    pub fn written_since(&self, from: usize) -> &[TaskId] {
        &self.written[from.min(self.written.len())..]
    }
}

impl Index<&TaskId> for TaskTable {
    type Output = Task;

    fn index(&self, id: &TaskId) -> &Task {
        &self.rows[id]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::{TaskKind, TaskSpec};
    use proptest::prelude::*;
    use proptest::test_runner::RngSeed;

    fn row(id: TaskId) -> Task {
        let spec = TaskSpec { kind: TaskKind::Job, group: None, stage: None, index: None, not_before_ms: 0 };
        Task::new(id, spec, 0)
    }

    #[test]
    fn every_write_is_logged_and_reads_are_not() {
        let mut table = TaskTable::default();
        table.insert(1, row(1));
        table.insert(2, row(2));
        let from = table.writes();
        assert_eq!(table.get(&1).map(|t| t.attempt), Some(0));
        assert_eq!(table.values().count(), 2);
        assert_eq!(table.written_since(from), &[] as &[TaskId]);
        table.get_mut(&2).expect("row 2").attempt += 1;
        let read_up_to = table.writes();
        table.get_mut(&2).expect("row 2").attempt += 1;
        table.get_mut(&1).expect("row 1").attempt += 1;
        assert!(table.get_mut(&9).is_none(), "a missing row is not written");
        assert_eq!(table.written_since(from), &[2, 2, 1]);
        // A row written again after a reader read up to its last write.
        assert_eq!(table.written_since(read_up_to), &[2, 1]);
        assert_eq!(table.written_since(0), &[1, 2, 2, 2, 1]);
        assert_eq!(table[&2].attempt, 2);
    }

    /// The indexes as a walk over every row computes them, written here
    /// from the rules (not with `Filing`).
    fn scanned(table: &TaskTable) -> RowIndex {
        let rows = || table.values();
        RowIndex {
            ready: rows().filter(|t| t.state == TaskState::Ready).map(|t| (t.retry_at_ms, t.id)).collect(),
            leased: rows().filter(|t| t.state == TaskState::Leased).map(|t| t.id).collect(),
        }
    }

    /// Each indexed read against the full scan the store made before the
    /// indexes: the same ids, in the same order.
    fn assert_reads_match_scans(table: &TaskTable, now_ms: u64) {
        let mut due: Vec<(u64, TaskId)> = table
            .values()
            .filter(|t| t.state == TaskState::Ready && t.retry_at_ms <= now_ms)
            .map(|t| (t.retry_at_ms, t.id))
            .collect();
        due.sort_unstable();
        let due: Vec<TaskId> = due.into_iter().map(|(_, id)| id).collect();
        assert_eq!(table.ready_due(now_ms).collect::<Vec<_>>(), due, "due at {now_ms}");
        let next_due_ms = table
            .values()
            .filter(|t| t.state == TaskState::Ready && t.retry_at_ms > now_ms)
            .map(|t| t.retry_at_ms)
            .min();
        assert_eq!(table.next_ready_after_ms(now_ms), next_due_ms, "next due after {now_ms}");
        let leased: Vec<TaskId> = table.values().filter(|t| t.state == TaskState::Leased).map(|t| t.id).collect();
        assert_eq!(table.leased().map(|t| t.id).collect::<Vec<_>>(), leased);
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// A new row, or a row replaced whole (as a transaction installs one).
        Insert { id: TaskId, state: TaskState, retry_at_ms: u64 },
        /// A write through the guard.
        Write { id: TaskId, state: TaskState, retry_at_ms: u64 },
        /// A row handed out for writing and left as it was.
        Touch { id: TaskId },
    }

    fn op() -> impl Strategy<Value = Op> {
        let id = 0..8u64;
        let state =
            prop_oneof![Just(TaskState::Ready), Just(TaskState::Leased), Just(TaskState::Done), Just(TaskState::Dead)];
        // Few due times, so rows share them (ties are ordered by id), and
        // the extremes of the range.
        let retry_at_ms = prop_oneof![0..6u64, Just(u64::MAX)];
        prop_oneof![
            (id.clone(), state.clone(), retry_at_ms.clone()).prop_map(|(id, state, retry_at_ms)| Op::Insert {
                id,
                state,
                retry_at_ms
            }),
            (id.clone(), state, retry_at_ms).prop_map(|(id, state, retry_at_ms)| Op::Write { id, state, retry_at_ms }),
            id.prop_map(|id| Op::Touch { id }),
        ]
    }

    fn apply(table: &mut TaskTable, op: &Op) {
        match *op {
            Op::Insert { id, state, retry_at_ms } => {
                table.insert(id, Task { state, retry_at_ms, ..row(id) });
            }
            Op::Write { id, state, retry_at_ms } => {
                if let Some(mut task) = table.get_mut(&id) {
                    task.state = state;
                    task.retry_at_ms = retry_at_ms;
                }
            }
            Op::Touch { id } => {
                table.get_mut(&id);
            }
        }
    }

    fn proptest_config() -> ProptestConfig {
        let base = ProptestConfig::default();
        let rng_seed =
            if std::env::var_os("PROPTEST_RNG_SEED").is_some() { base.rng_seed } else { RngSeed::Fixed(0x7ab1e) };
        ProptestConfig { cases: 512, failure_persistence: None, rng_seed, ..base }
    }

    proptest! {
        #![proptest_config(proptest_config())]

        #[test]
        fn indexes_stay_exact_through_every_write(
            ops in proptest::collection::vec(op(), 0..40),
            nows_ms in proptest::collection::vec(prop_oneof![0..7u64, Just(u64::MAX)], 1..4),
        ) {
            let mut table = TaskTable::default();
            for op in &ops {
                apply(&mut table, op);
                prop_assert_eq!(&table.indexes, &scanned(&table), "after {:?}", op);
                prop_assert!(table.indexes_exact());
                for &now_ms in &nows_ms {
                    assert_reads_match_scans(&table, now_ms);
                }
            }
        }
    }

    #[test]
    fn a_claim_and_a_failure_refile_the_row() {
        let mut table = TaskTable::default();
        for id in 1..=3 {
            table.insert(id, Task { retry_at_ms: 10 * id, ..row(id) });
        }
        assert_eq!(table.ready_due(20).collect::<Vec<_>>(), [1, 2]);
        // Claimed: leased, no longer due.
        table.get_mut(&1).expect("row 1").state = TaskState::Leased;
        assert_eq!(table.ready_due(20).collect::<Vec<_>>(), [2]);
        assert_eq!(table.leased().map(|t| t.id).collect::<Vec<_>>(), [1]);
        // Failed: ready again, due later than row 3; ties break by id.
        let mut task = table.get_mut(&1).expect("row 1");
        task.state = TaskState::Ready;
        task.retry_at_ms = 30;
        drop(task);
        assert_eq!(table.ready_due(u64::MAX).collect::<Vec<_>>(), [2, 1, 3]);
        assert_eq!(table.next_ready_after_ms(20), Some(30));
        assert_eq!(table.next_ready_after_ms(30), None);
        assert_eq!(table.leased().count(), 0);
    }

    #[test]
    fn the_exactness_check_sees_a_stale_index() {
        let mut table = TaskTable::default();
        table.insert(1, row(1));
        table.insert(2, Task { state: TaskState::Leased, ..row(2) });
        assert!(table.indexes_exact());
        // An entry for a row that is not filed so, and one missing.
        table.indexes.leased.insert(1);
        assert!(!table.indexes_exact());
        table.indexes.leased.remove(&1);
        table.indexes.leased.remove(&2);
        assert!(!table.indexes_exact());
        table.indexes.leased.insert(2);
        table.indexes.ready.insert((5, 1));
        assert!(!table.indexes_exact(), "row 1 filed under a due time it does not have");
    }
}
