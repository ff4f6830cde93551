//! The rows of graphile's tables, typed, and rows as a statement answers them.

use std::collections::HashMap;

use graphile_worker_database::{DbCell, DbRow};
use serde_json::Value;

use crate::time::Ts;

/// A row of `_private_jobs`, with its queue's name and its task's identifier
/// (never changed for a given id, so they are kept beside the ids).
#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    pub id: i64,
    pub job_queue_id: Option<i32>,
    pub queue_name: Option<String>,
    pub task_id: i32,
    pub task_identifier: String,
    pub payload: Value,
    pub priority: i16,
    pub run_at: Ts,
    pub attempts: i16,
    pub max_attempts: i16,
    pub last_error: Option<String>,
    pub created_at: Ts,
    pub updated_at: Ts,
    pub key: Option<String>,
    pub locked_at: Option<Ts>,
    pub locked_by: Option<String>,
    pub revision: i32,
    pub flags: Option<Value>,
}

impl JobRow {
    /// The generated column `is_available`.
    pub fn is_available(&self) -> bool {
        self.locked_at.is_none() && self.attempts < self.max_attempts
    }

    /// The columns of `returning *` (and of the row type `_private_jobs`), in
    /// table order, as the tokio-postgres driver decodes them.
    pub fn cells(&self) -> Vec<(&'static str, DbCell)> {
        vec![
            ("id", DbCell::I64(self.id)),
            ("job_queue_id", opt(self.job_queue_id, DbCell::I32)),
            ("task_id", DbCell::I32(self.task_id)),
            ("payload", DbCell::Json(self.payload.clone())),
            ("priority", DbCell::I16(self.priority)),
            ("run_at", DbCell::TimestampTz(self.run_at)),
            ("attempts", DbCell::I16(self.attempts)),
            ("max_attempts", DbCell::I16(self.max_attempts)),
            ("last_error", opt(self.last_error.clone(), DbCell::Text)),
            ("created_at", DbCell::TimestampTz(self.created_at)),
            ("updated_at", DbCell::TimestampTz(self.updated_at)),
            ("key", opt(self.key.clone(), DbCell::Text)),
            ("locked_at", opt(self.locked_at, DbCell::TimestampTz)),
            ("locked_by", opt(self.locked_by.clone(), DbCell::Text)),
            ("revision", DbCell::I32(self.revision)),
            ("flags", opt(self.flags.clone(), DbCell::Json)),
            ("is_available", DbCell::Bool(self.is_available())),
        ]
    }
}

/// A row of `_private_job_queues`.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueRow {
    pub id: i32,
    pub queue_name: String,
    pub locked_at: Option<Ts>,
    pub locked_by: Option<String>,
}

impl QueueRow {
    pub fn is_available(&self) -> bool {
        self.locked_at.is_none()
    }
}

/// A row of `_private_tasks`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRow {
    pub id: i32,
    pub identifier: String,
}

/// A row of `_private_workers`.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerRow {
    pub id: String,
    pub last_heartbeat_at: Ts,
    pub started_at: Ts,
    pub metadata: Option<Value>,
}

/// A row of `migrations` (its `ts` is not modelled: nothing graphile sends reads it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationRow {
    pub id: i32,
    pub breaking: bool,
}

pub(crate) fn opt<T>(value: Option<T>, cell: impl FnOnce(T) -> DbCell) -> DbCell {
    value.map_or(DbCell::Null, cell)
}

/// One row of a statement's answer: its columns in the order PostgreSQL
/// returns them, each decoded as graphile_worker_database 0.1.8's
/// tokio-postgres driver decodes it. `DbRow` itself cannot list its columns
/// nor be compared, so the model answers this and converts on demand.
#[derive(Debug, Clone)]
pub struct Row {
    cells: Vec<(&'static str, DbCell)>,
}

impl Row {
    /// A row may repeat a column name, as PostgreSQL's do (`update .. from j
    /// returning *` returns j's columns after the table's).
    pub(crate) fn new(cells: Vec<(&'static str, DbCell)>) -> Row {
        Row { cells }
    }

    pub fn columns(&self) -> &[(&'static str, DbCell)] {
        &self.cells
    }

    /// The last column of that name (the one the driver's map keeps).
    pub fn get(&self, name: &str) -> Option<&DbCell> {
        self.cells.iter().rev().find(|(n, _)| *n == name).map(|(_, cell)| cell)
    }

    /// What the driver hands graphile for this row: a map by name, in which
    /// a repeated name keeps its last column, as the driver's does.
    pub fn to_db_row(&self) -> DbRow {
        let cells: HashMap<String, DbCell> = self.cells.iter().map(|(n, c)| (n.to_string(), c.clone())).collect();
        DbRow::new(cells)
    }
}

/// Equality of two cells (`DbCell` has none of its own).
pub fn cell_eq(a: &DbCell, b: &DbCell) -> bool {
    match (a, b) {
        (DbCell::Null, DbCell::Null) => true,
        (DbCell::Bool(x), DbCell::Bool(y)) => x == y,
        (DbCell::I16(x), DbCell::I16(y)) => x == y,
        (DbCell::I32(x), DbCell::I32(y)) => x == y,
        (DbCell::I64(x), DbCell::I64(y)) => x == y,
        (DbCell::Json(x), DbCell::Json(y)) => x == y,
        (DbCell::Text(x), DbCell::Text(y)) => x == y,
        (DbCell::TimestampTz(x), DbCell::TimestampTz(y)) => x == y,
        _ => false,
    }
}
