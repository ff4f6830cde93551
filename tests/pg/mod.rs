//! PostgreSQL as a second implementation of the store: a throwaway cluster
//! ([`cluster`]), every store request as SQL ([`store`]), and the rows both
//! implementations are compared on ([`Rows`]), and a session per
//! transaction that spans round trips ([`sessions`]).

pub mod cluster;
pub mod sessions;
pub mod store;

use leasesim::ids::{Fence, GroupId, IndexId, Owner, StageRef, TaskId};
use leasesim::store::{StageRow, Store};
use leasesim::task::Task;
use std::fmt::Debug;

/// Everything the store keeps, table by table, in key order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rows {
    pub tasks: Vec<Task>,
    /// Enqueue idempotency keys and the task each created.
    pub keys: Vec<(u64, TaskId)>,
    /// The attempt that completed each done task.
    pub completions: Vec<Fence>,
    pub stages: Vec<(StageRef, StageRow)>,
    /// Indexes built and waiting for a finalization pass, and their builder.
    pub built: Vec<(IndexId, TaskId)>,
    pub materialized: Vec<IndexId>,
    /// Last sign of life per incarnation. The model's newest incarnation per
    /// process is not a table of its own: it is the largest incarnation here.
    pub heartbeats: Vec<(Owner, u64)>,
    /// (group, misses, next_at_ms) of group repair.
    pub repair: Vec<(GroupId, u32, u64)>,
}

impl Rows {
    pub fn of_model(store: &Store) -> Rows {
        Rows {
            tasks: store.tasks().cloned().collect(),
            keys: store.enqueue_keys().collect(),
            completions: store.completions().collect(),
            stages: store.stages().map(|(stage, row)| (*stage, row.clone())).collect(),
            built: store.built_by().collect(),
            materialized: store.materialized().collect(),
            heartbeats: store.heartbeats().collect(),
            repair: store.repair_schedule().collect(),
        }
    }

    /// The first row in which PostgreSQL (`pg`) differs from the model (`self`).
    pub fn difference(&self, pg: &Rows) -> Option<String> {
        first_difference("tasks", &self.tasks, &pg.tasks)
            .or_else(|| first_difference("enqueue keys", &self.keys, &pg.keys))
            .or_else(|| first_difference("completions", &self.completions, &pg.completions))
            .or_else(|| first_difference("stages", &self.stages, &pg.stages))
            .or_else(|| first_difference("built_indexes", &self.built, &pg.built))
            .or_else(|| first_difference("materialized_indexes", &self.materialized, &pg.materialized))
            .or_else(|| first_difference("heartbeats", &self.heartbeats, &pg.heartbeats))
            .or_else(|| first_difference("group_repair", &self.repair, &pg.repair))
    }
}

fn first_difference<T: PartialEq + Debug>(table: &str, model: &[T], pg: &[T]) -> Option<String> {
    if model == pg {
        return None;
    }
    let i = model.iter().zip(pg).take_while(|(m, p)| m == p).count();
    Some(format!("{table}, row {i}:\n  model:      {:?}\n  PostgreSQL: {:?}", model.get(i), pg.get(i)))
}
