//! graphile's statements in the harness's words.
//!
//! Each statement the model recognizes (by graphile's own text, see the
//! model's catalog) is one kind of request: a claim (`get_job`), an outcome
//! (`complete_job`, `fail_job`), a heartbeat, a recovery release of other
//! workers' jobs (`recover_dead_worker_jobs`), an enqueue (`add_job`), a
//! worker handing back its own jobs (`_private_return_jobs`), or something
//! the harness has no concept for (a read, setup, bookkeeping), which must
//! then change no job row. graphile's statements name the job and, at most,
//! the worker, never the grant, so the attempt an outcome speaks for is the
//! one whose body had just returned on its sender when it was sent (the
//! driver's note, [`Book::returned`]); without that note, the latest attempt
//! of that job whose body ran on its sender ([`Book::fence_of`]).

use crate::book::Book;
use crate::driver::{Answer, Statement};
use crate::seam::{micros, queue_id, refusal_of, GraphileStore};
use graphile_worker_database::{DbCell, DbValue};
use leasesim_graphile_model::{Output, Stmt};
use leasesim_vocab::ids::{Fence, Owner, TaskId};
use leasesim_vocab::op::{Grant, Op, Response};
use leasesim_vocab::task::{TaskError, TaskKind, TaskSpec};
use leasesim_vocab::truth::Sender;

/// The request, classified.
pub fn op(book: &Book, from: Sender, req: &Statement, stmt: Option<Stmt>) -> Op {
    match req {
        Statement::Commit { txn } => Op::Commit { txn: *txn },
        Statement::Rollback { txn } => Op::Rollback { txn: *txn },
        Statement::Run { txn, params, returned, .. } => {
            let op = statement(book, from, stmt, params.values(), *returned);
            match txn {
                Some(txn) => Op::Exec { txn: *txn, stmt: Box::new(op), commit: false },
                None => op,
            }
        }
    }
}

/// One statement (outside its transaction), classified.
fn statement(book: &Book, from: Sender, stmt: Option<Stmt>, params: &[DbValue], returned: Option<Fence>) -> Op {
    let by = from.owner();
    let other = |what: &str| Op::Other { what: what.to_string(), by };
    let Some(stmt) = stmt else { return other("unknown statement") };
    let Some(owner) = by else {
        return match stmt {
            Stmt::AddJob | Stmt::AddJobs => enqueue(params),
            _ => other(stmt_name(stmt)),
        };
    };
    // The attempt whose body had just returned, if it is of this job on this
    // process: a worker can run two attempts of one job at once (a sweep
    // released the first while the worker was silent, and the worker claimed
    // the job again), and the first one's outcome may come last.
    let fence = |book: &Book| {
        job_param(params, 0).map(|task| match returned {
            Some(f) if f.task == task && f.owner == owner => f,
            _ => book.fence_of(task, owner),
        })
    };
    match stmt {
        Stmt::GetJob(_) => Op::Claim { owner, max: 1, wait_ms: 0 },
        Stmt::BatchGetJobs(_) => Op::Claim { owner, max: int_param(params, 2).unwrap_or(1), wait_ms: 0 },
        Stmt::CompleteJob { .. } => fence(book).map_or_else(|| other("complete_job"), |fence| Op::Complete { fence }),
        Stmt::FailJob { .. } => match fence(book) {
            Some(fence) => Op::Fail { fence, error: error_param(params, 1) },
            None => other("fail_job"),
        },
        Stmt::WorkerHeartbeat => Op::Heartbeat { owner },
        Stmt::WorkerDeregister => Op::Deregister { owner },
        Stmt::RecoverDeadWorkerJobs => {
            let owners: Vec<Owner> = text_array(params, 0).iter().filter_map(|id| book.owner_of(id)).collect();
            Op::ReleaseOwners { by: owner, owners }
        }
        // `_private_return_jobs($1 worker, $2 ids)`, or one job `array[$2]`.
        Stmt::ReturnJobs => {
            let tasks = int_array(params, 1).into_iter().map(|id| id as TaskId).collect();
            Op::ReturnOwn { owner, tasks, interrupted: false }
        }
        // A running job given back at shutdown, delayed by `recovery_delay`.
        Stmt::ReturnJobForRecovery => {
            Op::ReturnOwn { owner, tasks: job_param(params, 1).into_iter().collect(), interrupted: true }
        }
        Stmt::AddJob | Stmt::AddJobs => enqueue(params),
        _ => other(stmt_name(stmt)),
    }
}

/// `add_job(identifier, payload, queue_name, run_at, ...)`.
fn enqueue(params: &[DbValue]) -> Op {
    let queue = match params.get(2) {
        Some(DbValue::TextOpt(Some(name)) | DbValue::Text(name)) => Some(queue_id(name)),
        _ => None,
    };
    let spec = TaskSpec { queue, ..TaskSpec::job(0) };
    Op::Enqueue { spec, key: None }
}

/// The statement kind's name, for `Op::Other`.
fn stmt_name(stmt: Stmt) -> &'static str {
    match stmt {
        Stmt::ServerVersion => "server-version",
        Stmt::LastMigration => "last-migration",
        Stmt::RegisterTasks | Stmt::SelectTasks => "task-registration",
        Stmt::WorkerDeregister => "worker-deregister",
        Stmt::TrySweepLock => "sweep-lock",
        Stmt::ListStaleWorkers | Stmt::ListOrphanLockedWorkers | Stmt::HoldsResilientLocks => "list-dead-workers",
        Stmt::WorkerLastHeartbeat | Stmt::ListActiveWorkers => "read-workers",
        Stmt::DeleteStaleWorkers => "delete-stale-workers",
        Stmt::LockedJobsForRecovery => "read-locked-jobs",
        _ => "other",
    }
}

fn job_param(params: &[DbValue], i: usize) -> Option<TaskId> {
    match params.get(i) {
        Some(DbValue::I64(id)) => Some(*id as TaskId),
        _ => None,
    }
}

fn int_param(params: &[DbValue], i: usize) -> Option<u32> {
    match params.get(i) {
        Some(DbValue::I32(n)) => Some((*n).max(0) as u32),
        Some(DbValue::I64(n)) => Some((*n).max(0) as u32),
        _ => None,
    }
}

fn text_array(params: &[DbValue], i: usize) -> Vec<String> {
    match params.get(i) {
        Some(DbValue::TextArray(ids) | DbValue::TextArrayOpt(Some(ids))) => ids.clone(),
        _ => Vec::new(),
    }
}

fn int_array(params: &[DbValue], i: usize) -> Vec<i64> {
    match params.get(i) {
        Some(DbValue::I64Array(ids)) => ids.clone(),
        Some(DbValue::I32Array(ids)) => ids.iter().map(|&id| id as i64).collect(),
        _ => Vec::new(),
    }
}

/// The failure a body reported, as its message names it (the body seam
/// writes `leasesim: conflict` or `leasesim: fatal`).
fn error_param(params: &[DbValue], i: usize) -> TaskError {
    match params.get(i) {
        Some(DbValue::Text(message)) if message.contains("fatal") => TaskError::Fatal,
        _ => TaskError::Conflict,
    }
}

/// The answer, normalized.
pub fn response(store: &GraphileStore, op: &Op, resp: &Answer) -> Response {
    let rows = match resp {
        Err(e) => return Response::Rejected { reason: refusal_of(e.code()) },
        Ok(Output::Affected(n)) => return Response::Rows { count: *n },
        Ok(Output::Rows(rows)) => rows,
    };
    match op.statement() {
        Op::Claim { .. } => Response::Claimed { grants: rows.iter().filter_map(|r| grant(store, r)).collect() },
        Op::Enqueue { .. } => match rows.first().and_then(|r| r.get("id")) {
            Some(DbCell::I64(id)) => Response::Enqueued { task: *id as TaskId },
            _ => Response::Rows { count: rows.len() as u64 },
        },
        Op::ReleaseOwners { .. } => match rows.first().and_then(|r| r.get("recovered_count")) {
            Some(DbCell::I32(n)) => Response::Released { tasks: (*n).max(0) as u32 },
            _ => Response::Rows { count: rows.len() as u64 },
        },
        _ => Response::Rows { count: rows.len() as u64 },
    }
}

/// One claimed job as a grant: its attempt number is the book's.
fn grant(store: &GraphileStore, row: &leasesim_graphile_model::Row) -> Option<Grant> {
    let (Some(DbCell::I64(id)), Some(DbCell::TimestampTz(at)), Some(DbCell::Text(by))) =
        (row.get("id"), row.get("locked_at"), row.get("locked_by"))
    else {
        return None;
    };
    let task = *id as TaskId;
    let owner = store.book.owner_of(by)?;
    let attempt = store.book.attempt(task, micros(*at))?;
    Some(Grant { fence: Fence { task, attempt, owner }, kind: TaskKind::Job, lease_expiry_ms: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    const P3: Owner = Owner { proc: 3, incarnation: 1 };

    /// What the driver does: the statement carries the attempt whose body
    /// returned on its process since that process's previous statement.
    fn send(book: &Book, owner: Owner, stmt: Stmt, params: Vec<DbValue>) -> Op {
        let returned = book.take_returned(owner);
        let req = Statement::Run { txn: None, sql: "-- graphile's text".into(), params: params.into(), returned };
        op(book, Sender::Worker(owner), &req, Some(stmt))
    }

    fn complete_job(task: TaskId) -> (Stmt, Vec<DbValue>) {
        (Stmt::CompleteJob { queued: false }, vec![DbValue::I64(task as i64)])
    }

    /// `fail_job($1 id, $2 message, $3 worker id, ...)`.
    fn fail_job(task: TaskId) -> (Stmt, Vec<DbValue>) {
        let params =
            vec![DbValue::I64(task as i64), DbValue::Text("leasesim: conflict".into()), DbValue::Text("w3".into())];
        (Stmt::FailJob { queued: false }, params)
    }

    /// p3 holds two attempts of job 31 at once: it was paused running
    /// attempt 1, a sweep released the job, and p3 claimed it again as
    /// attempt 2 when it resumed.
    fn two_runs_on_one_worker() -> Book {
        let book = Book::default();
        book.register("w3", P3);
        assert_eq!(book.grant(31, 1_000, P3), 1);
        book.ran(31, 1, P3);
        assert_eq!(book.grant(31, 2_000, P3), 2);
        book.ran(31, 2, P3);
        book
    }

    fn fence(attempt: u32) -> Fence {
        Fence { task: 31, attempt, owner: P3 }
    }

    // graphile-recovery seed 100288: attempt 2's body succeeded and its
    // complete_job went out; then attempt 1's body failed, and its fail_job
    // was classified as attempt 2's (the latest that ran on p3), which
    // outcome-truth reported as "fail for attempt 2 ..., but its body
    // succeeded".
    #[test]
    fn a_late_outcome_speaks_for_the_attempt_whose_body_returned() {
        let book = two_runs_on_one_worker();
        book.returned(fence(2));
        let (stmt, params) = complete_job(31);
        assert_eq!(send(&book, P3, stmt, params), Op::Complete { fence: fence(2) });
        book.returned(fence(1));
        let (stmt, params) = fail_job(31);
        assert_eq!(send(&book, P3, stmt, params), Op::Fail { fence: fence(1), error: TaskError::Conflict });
    }

    #[test]
    fn the_note_is_taken_by_the_next_statement_only() {
        let book = two_runs_on_one_worker();
        book.returned(fence(1));
        // The process's next statement takes the note, whatever it is.
        assert!(matches!(send(&book, P3, Stmt::WorkerHeartbeat, Vec::new()), Op::Heartbeat { .. }));
        // A later outcome without a note: the latest attempt that ran there.
        let (stmt, params) = fail_job(31);
        assert_eq!(send(&book, P3, stmt, params), Op::Fail { fence: fence(2), error: TaskError::Conflict });
    }

    #[test]
    fn a_note_of_another_job_or_process_is_not_this_outcomes() {
        let book = two_runs_on_one_worker();
        book.grant(7, 3_000, P3);
        book.ran(7, 1, P3);
        book.returned(Fence { task: 7, attempt: 1, owner: P3 });
        let (stmt, params) = complete_job(31);
        assert_eq!(send(&book, P3, stmt, params), Op::Complete { fence: fence(2) });
        // Another process's note stays with that process.
        let p1 = Owner { proc: 1, incarnation: 1 };
        book.returned(Fence { task: 31, attempt: 1, owner: p1 });
        let (stmt, params) = complete_job(31);
        assert_eq!(send(&book, P3, stmt, params), Op::Complete { fence: fence(2) });
        assert_eq!(book.take_returned(p1), Some(Fence { task: 31, attempt: 1, owner: p1 }));
    }
}
