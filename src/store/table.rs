//! The task table: task rows by id, and a log of every row handed out for
//! writing.
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

use crate::ids::TaskId;
use crate::task::Task;
use std::collections::btree_map::{Range, Values};
use std::collections::BTreeMap;
use std::ops::{Index, RangeBounds};

#[derive(Debug, Clone, Default)]
pub struct TaskTable {
    rows: BTreeMap<TaskId, Task>,
    /// Ids of the rows handed out for writing, in the order they were.
    written: Vec<TaskId>,
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
    pub fn get_mut(&mut self, id: &TaskId) -> Option<&mut Task> {
        let row = self.rows.get_mut(id)?;
        self.written.push(*id);
        Some(row)
    }

    pub fn insert(&mut self, id: TaskId, task: Task) -> Option<Task> {
        assert_eq!(id, task.id, "a task row is stored under its own id");
        self.written.push(id);
        self.rows.insert(id, task)
    }

    pub fn values(&self) -> Values<'_, TaskId, Task> {
        self.rows.values()
    }

    pub fn range<R: RangeBounds<TaskId>>(&self, range: R) -> Range<'_, TaskId, Task> {
        self.rows.range(range)
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
}
