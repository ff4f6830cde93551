//! The store tap: what each answer's transaction changed in the store, read
//! by the harness itself (not reported by the engine).
//!
//! The tap keeps a mirror of the store's rows: tasks, stage rows and the set
//! of materialized indexes. Each request may change only some rows (its
//! [`Scope`], from the store's API: a completion touches its own task, its
//! stage and the index it builds; a claim or a recovery pass any task; a
//! heartbeat none). The store seam syncs the request's scope twice:
//!
//! - right before the request is handed to the engine's store: a difference
//!   there changed the store *outside* any request's transaction (drift);
//! - right after the engine's store answered, in the same poll (madsim runs
//!   one task at a time, and the store applies a request synchronously, so no
//!   other transaction can interleave): the difference is that answer's
//!   [`Commit`].
//!
//! A request that may change any task row (a claim, a recovery pass, a
//! commit) is synced from the rows the store's task table logged as written
//! since the last such sync ([`Store::tasks_written_since`]), not by
//! comparing every row: the table's rows are private to it, so a row the log
//! does not name has not changed. Debug builds (every `cargo test`) compare
//! the whole table after each such sync as well.
//!
//! At the end of the run the whole store is compared once more, row by row.

use crate::convert as builtin;
use leasesim::ids::{IndexId, StageRef, TaskId};
use leasesim::store::server::StoreServer;
use leasesim::store::{StageRow, Store};
use leasesim::task::Task;
use leasesim_vocab::op::Op;
use leasesim_vocab::truth::{Commit, StageChange, TaskChange};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// The task rows a request may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rows {
    None,
    One(TaskId),
    New,
    /// Any row: the rows written since the last such sync.
    All,
    /// Every row, compared one by one (the end of the run).
    Every,
}

/// The stage rows a request may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StageRows {
    None,
    One(StageRef),
    /// The stage of this task, if it has one.
    OfTask(TaskId),
    All,
}

/// The rows one request may change, as the store's API describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope {
    tasks: Rows,
    stages: StageRows,
    materialized: bool,
}

impl Scope {
    /// Every row, each compared (the end-of-run sync).
    pub const WHOLE: Scope = Scope { tasks: Rows::Every, ..Scope::ALL };
    /// Any row (a request that may write anything).
    const ALL: Scope = Scope { tasks: Rows::All, stages: StageRows::All, materialized: true };
    const NOTHING: Scope = Scope { tasks: Rows::None, stages: StageRows::None, materialized: false };

    /// The rows a request may change, as the built-in store's API
    /// describes it (from the request in the harness's words).
    pub fn of(op: &Op) -> Scope {
        let tasks = |tasks| Scope { tasks, ..Scope::NOTHING };
        match op {
            Op::Enqueue { .. } => tasks(Rows::New),
            Op::EnqueueStage { stage } => {
                let stage = ids_stage(*stage);
                Scope { tasks: Rows::New, stages: StageRows::One(stage), materialized: false }
            }
            Op::CreatePipeline { .. } => Scope { stages: StageRows::All, ..Scope::NOTHING },
            Op::Claim { .. }
            | Op::ReleaseDead { .. }
            | Op::ReleaseOrphans { .. }
            | Op::ReclaimExpired { .. }
            | Op::Repair { .. } => tasks(Rows::All),
            Op::Renew { fence } | Op::LeaseValid { fence } => tasks(Rows::One(fence.task)),
            Op::Complete { fence } | Op::Fail { fence, .. } | Op::ClearStageLink { fence } => {
                Scope { tasks: Rows::One(fence.task), stages: StageRows::OfTask(fence.task), materialized: true }
            }
            Op::Maintain { .. } => Scope { materialized: true, ..Scope::NOTHING },
            Op::Heartbeat { .. }
            | Op::PipelineSnapshot { .. }
            | Op::QueryIndex { .. }
            | Op::Other { .. }
            | Op::Deregister { .. } => Scope::NOTHING,
            // A statement that commits writes whatever its transaction
            // wrote; a rollback must write nothing (both are looked at whole).
            Op::Exec { commit: true, .. } | Op::Rollback { .. } | Op::Commit { .. } => Scope::ALL,
            // Until then, nothing it writes is visible: a difference in the
            // statement's own rows is a leak.
            Op::Exec { stmt, commit: false, .. } => Scope::of(stmt),
            // Not requests of the built-in engine: look at everything.
            Op::ReleaseOwners { .. } | Op::ReturnOwn { .. } => Scope::ALL,
        }
    }
}

fn ids_stage(s: leasesim_vocab::ids::StageRef) -> StageRef {
    StageRef { pipeline: s.pipeline, index: s.index }
}

#[derive(Debug, Default)]
struct Mirror {
    tasks: TaskRows,
    stages: BTreeMap<StageRef, StageRow>,
    materialized: BTreeSet<IndexId>,
}

/// The mirror's task rows, sorted by id. A vector, not a map: claims and
/// recovery passes compare every row twice per request, and a walk over a
/// slice beside the store's map costs a third of a walk over two maps.
/// Rows are only ever added (the store never deletes a task row), almost
/// always at the end.
#[derive(Debug, Default)]
struct TaskRows {
    rows: Vec<Task>,
    /// The store's task-row writes already looked at by an `All` sync.
    synced_writes: usize,
}

impl TaskRows {
    fn position(&self, id: TaskId) -> Result<usize, usize> {
        self.rows.binary_search_by_key(&id, |t| t.id)
    }

    fn next_id(&self) -> TaskId {
        self.rows.last().map_or(0, |t| t.id + 1)
    }

    /// Records `task` as it is in the store now, with what it was.
    fn record(&mut self, task: &Task, out: &mut Vec<TaskChange>) {
        match self.position(task.id) {
            Ok(i) if self.rows[i] == *task => {}
            Ok(i) => {
                out.push(TaskChange { before: Some(builtin::row(&self.rows[i])), after: builtin::row(task) });
                self.rows[i] = task.clone();
            }
            Err(i) => {
                out.push(TaskChange { before: None, after: builtin::row(task) });
                self.rows.insert(i, task.clone());
            }
        }
    }
}

#[derive(Debug, Default)]
pub struct Tap {
    mirror: Mutex<Mirror>,
}

impl Tap {
    /// Brings the mirror up to date with the store within `scope` and returns
    /// what differed, row by row.
    pub fn sync(&self, server: &StoreServer, scope: Scope) -> Commit {
        let mut mirror = self.mirror.lock().expect("tap mirror");
        server.with_store(|store| {
            let mut commit = Commit::default();
            sync_tasks(&mut mirror.tasks, store, scope.tasks, &mut commit.tasks);
            let stage_rows = match scope.stages {
                StageRows::OfTask(id) => match store.task(id).and_then(|t| t.spec.stage) {
                    Some(stage) => StageRows::One(stage),
                    None => StageRows::None,
                },
                other => other,
            };
            sync_stages(&mut mirror.stages, store, stage_rows, &mut commit.stages);
            if scope.materialized {
                for index in store.materialized() {
                    if mirror.materialized.insert(index) {
                        commit.materialized.push(index);
                    }
                }
            }
            commit
        })
    }
}

fn sync_tasks(mirror: &mut TaskRows, store: &Store, rows: Rows, out: &mut Vec<TaskChange>) {
    match rows {
        Rows::None => {}
        Rows::One(id) => {
            if let Some(task) = store.task(id) {
                mirror.record(task, out);
            }
        }
        Rows::New => {
            for task in store.tasks_from(mirror.next_id()) {
                mirror.record(task, out);
            }
        }
        Rows::All => {
            let mut written = store.tasks_written_since(mirror.synced_writes).to_vec();
            written.sort_unstable();
            written.dedup();
            // In id order, as a walk over the whole table reports them.
            for id in written {
                if let Some(task) = store.task(id) {
                    mirror.record(task, out);
                }
            }
            mirror.synced_writes = store.task_writes();
            debug_assert!(
                mirror.rows.iter().eq(store.tasks()),
                "the store's task log named every row that changed since the last sync"
            );
        }
        Rows::Every => {
            sync_all_tasks(mirror, store.tasks(), out);
            mirror.synced_writes = store.task_writes();
        }
    }
}

/// Every task row (`store`, in id order) against the mirror, walking both
/// side by side.
fn sync_all_tasks<'a>(mirror: &mut TaskRows, store: impl Iterator<Item = &'a Task>, out: &mut Vec<TaskChange>) {
    let rows = &mut mirror.rows;
    let mut i = 0;
    let mut unknown = Vec::new();
    for task in store {
        // Rows the store no longer has stay in the mirror.
        while i < rows.len() && rows[i].id < task.id {
            i += 1;
        }
        match rows.get_mut(i) {
            Some(row) if row.id == task.id => {
                if row != task {
                    out.push(TaskChange { before: Some(builtin::row(row)), after: builtin::row(task) });
                    *row = task.clone();
                }
                i += 1;
            }
            _ => {
                out.push(TaskChange { before: None, after: builtin::row(task) });
                unknown.push(task);
            }
        }
    }
    for task in unknown {
        let at = mirror.position(task.id).expect_err("an unknown row is not in the mirror");
        mirror.rows.insert(at, task.clone());
    }
}

fn sync_stages(mirror: &mut BTreeMap<StageRef, StageRow>, store: &Store, rows: StageRows, out: &mut Vec<StageChange>) {
    let mut one = |stage: StageRef, row: &StageRow| match mirror.get(&stage) {
        Some(known) if known == row => {}
        known => {
            out.push(StageChange {
                stage: builtin::stage(stage),
                before: known.map(builtin::stage_row),
                after: builtin::stage_row(row),
            });
            mirror.insert(stage, row.clone());
        }
    };
    match rows {
        StageRows::None | StageRows::OfTask(_) => {}
        StageRows::One(stage) => {
            if let Some(row) = store.stage(stage) {
                one(stage, row);
            }
        }
        StageRows::All => {
            for (stage, row) in store.stages() {
                one(*stage, row);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: TaskId, attempt: u32) -> Task {
        let spec = leasesim::task::TaskSpec {
            kind: leasesim::task::TaskKind::Job,
            group: None,
            stage: None,
            index: None,
            not_before_ms: 0,
        };
        Task { attempt, ..Task::new(id, spec, 0) }
    }

    /// A change as (task, attempt before, attempt after).
    type Change = (TaskId, Option<u32>, u32);

    fn ids_and_attempts(changes: &[TaskChange]) -> Vec<Change> {
        // (the changes come out in the harness's words, as rows)
        changes.iter().map(|c| (c.after.id, c.before.as_ref().map(|b| b.attempt), c.after.attempt)).collect()
    }

    /// One whole-table sync against a mirror holding `mirror`: the changes it
    /// reports and the mirror's rows after it.
    fn sync_all(mirror: Vec<Task>, store: &[Task]) -> (Vec<Change>, Vec<(TaskId, u32)>) {
        let mut rows = TaskRows { rows: mirror, synced_writes: 0 };
        let mut out = Vec::new();
        sync_all_tasks(&mut rows, store.iter(), &mut out);
        (ids_and_attempts(&out), rows.rows.iter().map(|t| (t.id, t.attempt)).collect())
    }

    #[test]
    fn a_whole_table_sync_reports_changed_and_new_rows_in_store_order() {
        let mirror = vec![row(1, 0), row(3, 0), row(5, 0)];
        let store = [row(1, 1), row(2, 0), row(3, 0), row(4, 2), row(5, 0), row(6, 0)];
        let (changes, after) = sync_all(mirror, &store);
        assert_eq!(changes, vec![(1, Some(0), 1), (2, None, 0), (4, None, 2), (6, None, 0)]);
        assert_eq!(after, vec![(1, 1), (2, 0), (3, 0), (4, 2), (5, 0), (6, 0)]);
    }

    #[test]
    fn a_row_the_store_lost_stays_in_the_mirror_and_nothing_else_moves() {
        let mirror = vec![row(1, 0), row(2, 0), row(3, 0)];
        let (changes, after) = sync_all(mirror, &[row(1, 0), row(3, 1)]);
        assert_eq!(changes, vec![(3, Some(0), 1)]);
        assert_eq!(after, vec![(1, 0), (2, 0), (3, 1)]);
        let (changes, after) = sync_all(vec![row(1, 0), row(2, 0)], &[row(1, 0), row(2, 0)]);
        assert_eq!(changes, vec![]);
        assert_eq!(after, vec![(1, 0), (2, 0)]);
    }

    #[test]
    fn one_row_syncs_keep_the_mirror_sorted() {
        let mut rows = TaskRows::default();
        let mut out = Vec::new();
        for (id, attempt) in [(4, 0), (2, 0), (4, 1), (9, 0), (2, 0)] {
            rows.record(&row(id, attempt), &mut out);
        }
        assert_eq!(ids_and_attempts(&out), vec![(4, None, 0), (2, None, 0), (4, Some(0), 1), (9, None, 0)]);
        assert_eq!(rows.rows.iter().map(|t| t.id).collect::<Vec<_>>(), vec![2, 4, 9]);
        assert_eq!(rows.next_id(), 10);
    }
}
