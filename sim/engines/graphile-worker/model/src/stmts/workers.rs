//! Worker registration (m000020/21) and the recovery sweep's statements.

use std::collections::BTreeSet;

use graphile_worker_database::DbCell;

use super::{any_of, eq_some, has_any_key, void};
use crate::params::Params;
use crate::rows::{opt, JobRow, Row, WorkerRow};
use crate::store::{Advisory, Ctx, RowKey, Table, TableLock};
use crate::time::{interval_from_millis, plus_micros};
use crate::{Fail, Output, Ts};

/// `worker_heartbeat(worker_id, metadata)`: upsert, keeping the old metadata
/// when none is given. A JSON `null` is a jsonb `null`, not SQL NULL.
pub(crate) fn heartbeat(ctx: &mut Ctx, p: &Params) -> Result<Output, Fail> {
    let Some(id) = p.text_opt(0)? else {
        return Err(super::error("23502", "null value in column \"id\" of relation \"_private_workers\""));
    };
    let metadata = p.json_opt(1)?;
    ctx.lock_table(Table::Workers, TableLock::RowExclusive)?;
    ctx.lock(RowKey::Worker(id.clone()))?;
    let row = match ctx.worker(&id).cloned() {
        Some(old) => WorkerRow { last_heartbeat_at: ctx.now, metadata: metadata.or(old.metadata), ..old },
        None => WorkerRow { id, last_heartbeat_at: ctx.now, started_at: ctx.now, metadata },
    };
    ctx.put_worker(row);
    void()
}

pub(crate) fn deregister(ctx: &mut Ctx, p: &Params) -> Result<Output, Fail> {
    let id = p.text_opt(0)?;
    ctx.lock_table(Table::Workers, TableLock::RowExclusive)?;
    delete_workers(ctx, id.into_iter().collect())?;
    void()
}

/// `delete from _private_workers where id = any(ids)`, in heap order.
fn delete_workers(ctx: &mut Ctx, ids: Vec<String>) -> Result<(), Fail> {
    let doomed: Vec<String> =
        ctx.workers_in_heap_order().into_iter().map(|w| &w.id).filter(|id| ids.contains(id)).cloned().collect();
    for id in doomed {
        ctx.lock(RowKey::Worker(id.clone()))?;
        ctx.delete_worker(&id);
    }
    Ok(())
}

pub(crate) fn delete_stale(ctx: &mut Ctx, p: &Params) -> Result<Output, Fail> {
    let ids: BTreeSet<String> = p.text_array_opt(0)?.unwrap_or_default().into_iter().collect();
    ctx.lock_table(Table::Workers, TableLock::RowExclusive)?;
    delete_workers(ctx, ids.into_iter().collect())?;
    void()
}

/// `pg_try_advisory_xact_lock($1::integer, $2::integer) as acquired`.
pub(crate) fn try_sweep_lock(ctx: &mut Ctx, p: &Params) -> Result<Output, Fail> {
    let acquired = match (p.i32_opt(0)?, p.i32_opt(1)?) {
        (Some(a), Some(b)) => DbCell::Bool(ctx.advisory_lock(Advisory::Pair(a, b), false)?),
        _ => DbCell::Null,
    };
    Ok(Output::Rows(vec![Row::new(vec![("acquired", acquired)])]))
}

/// `now() - $1::bigint * interval '1 millisecond'`; NULL when the threshold is.
fn cutoff(ctx: &Ctx, p: &Params) -> Result<Option<Ts>, Fail> {
    Ok(p.i64_opt(0)?.map(|ms| plus_micros(ctx.now, -interval_from_millis(ms))))
}

fn worker_ids(ids: impl IntoIterator<Item = String>) -> Output {
    Output::Rows(ids.into_iter().map(|id| Row::new(vec![("worker_id", DbCell::Text(id))])).collect())
}

pub(crate) fn list_stale(ctx: &mut Ctx, p: &Params) -> Result<Output, Fail> {
    let Some(cutoff) = cutoff(ctx, p)? else { return Ok(worker_ids([])) };
    let stale = ctx.all_workers().into_iter().filter(|w| w.last_heartbeat_at < cutoff).map(|w| w.id);
    Ok(worker_ids(stale))
}

/// Owners of job or queue locks older than the threshold that have no
/// `_private_workers` row.
pub(crate) fn list_orphans(ctx: &mut Ctx, p: &Params) -> Result<Output, Fail> {
    let Some(cutoff) = cutoff(ctx, p)? else { return Ok(worker_ids([])) };
    let job_locks = ctx.all_jobs().into_iter().map(|j| (j.locked_by, j.locked_at));
    let queue_locks = ctx.all_queues().into_iter().map(|q| (q.locked_by, q.locked_at));
    let owners: BTreeSet<String> = job_locks
        .chain(queue_locks)
        .filter(|(_, at)| at.is_some_and(|at| at < cutoff))
        .filter_map(|(by, _)| by)
        .collect();
    let orphans: Vec<String> = owners.into_iter().filter(|id| ctx.worker(id).is_none()).collect();
    Ok(worker_ids(orphans))
}

pub(crate) fn holds_resilient_locks(ctx: &mut Ctx, p: &Params) -> Result<Output, Fail> {
    let (worker, flags) = (p.text_opt(0)?, p.text_array_opt(1)?);
    let holds = ctx.all_jobs().iter().any(|j| {
        eq_some(j.locked_by.as_deref(), worker.as_deref())
            && has_any_key(j.flags.as_ref(), flags.as_deref()) == Some(true)
    });
    Ok(Output::Rows(vec![Row::new(vec![("has_resilient_locks", DbCell::Bool(holds))])]))
}

pub(crate) fn last_heartbeat(ctx: &mut Ctx, p: &Params) -> Result<Output, Fail> {
    let id = p.text_opt(0)?;
    let rows = id
        .and_then(|id| ctx.worker(&id).cloned())
        .map(|w| Row::new(vec![("last_heartbeat_at", DbCell::TimestampTz(w.last_heartbeat_at))]));
    Ok(Output::Rows(rows.into_iter().collect()))
}

fn locked_by_any(ctx: &Ctx, ids: Option<&[String]>) -> Vec<JobRow> {
    ctx.all_jobs().into_iter().filter(|j| any_of(j.locked_by.as_ref(), ids)).collect()
}

/// `recover_dead_worker_jobs(worker_ids, delay)`: every job the workers hold
/// is given back (its attempt returned unless retired), delayed, and their
/// queues released.
pub(crate) fn recover_dead_worker_jobs(ctx: &mut Ctx, p: &Params) -> Result<Output, Fail> {
    let ids = p.text_array_opt(0)?;
    let delay_ms = p.i64_opt(1)?;
    for job in locked_by_any(ctx, ids.as_deref()) {
        ctx.lock(RowKey::Job(job.id))?;
    }
    ctx.lock_table(Table::Jobs, TableLock::RowExclusive)?;
    let mut recovered = 0;
    for job in locked_by_any(ctx, ids.as_deref()) {
        let retired = ctx.retired(job.id);
        let run_at = delay_ms.map(|ms| plus_micros(ctx.now, interval_from_millis(ms)));
        let row = JobRow {
            attempts: if retired { job.attempts } else { super::release::returned_attempt(job.attempts) },
            locked_by: None,
            locked_at: None,
            // greatest() ignores a NULL argument.
            run_at: run_at.map_or(job.run_at, |at| at.max(job.run_at)),
            last_error: Some("Job recovered after worker interruption".into()),
            updated_at: ctx.now,
            ..job
        };
        ctx.put_job(row);
        recovered += 1;
    }
    ctx.lock_table(Table::Queues, TableLock::RowExclusive)?;
    unlock_queues(ctx, ids.as_deref())?;
    Ok(Output::Rows(vec![Row::new(vec![("recovered_count", DbCell::I32(recovered))])]))
}

/// `update _private_job_queues set locked_by = null, locked_at = null where locked_by = any(ids)`.
pub(crate) fn unlock_queues(ctx: &mut Ctx, ids: Option<&[String]>) -> Result<(), Fail> {
    let queues: Vec<_> =
        ctx.queues_in_heap_order().into_iter().filter(|q| any_of(q.locked_by.as_ref(), ids)).cloned().collect();
    for queue in queues {
        ctx.lock(RowKey::Queue(queue.id))?;
        ctx.put_queue(crate::QueueRow { locked_by: None, locked_at: None, ..queue });
    }
    Ok(())
}

/// `select jobs.*, tasks.identifier as task_identifier .. where locked_by = any($1) order by id`.
pub(crate) fn locked_jobs(ctx: &mut Ctx, p: &Params) -> Result<Output, Fail> {
    let ids = p.text_array_opt(0)?;
    let rows = locked_by_any(ctx, ids.as_deref())
        .into_iter()
        .filter_map(|job| {
            let task = ctx.task(&job.task_id)?.identifier.clone();
            let mut cells = job.cells();
            cells.push(("task_identifier", DbCell::Text(task)));
            Some(Row::new(cells))
        })
        .collect();
    Ok(Output::Rows(rows))
}

/// WorkerUtils::list_active_workers: `order by last_heartbeat_at desc`
/// (ties by id here; PostgreSQL leaves their order open).
pub(crate) fn list_active(ctx: &mut Ctx) -> Output {
    let mut workers = ctx.all_workers();
    workers.sort_by(|a, b| b.last_heartbeat_at.cmp(&a.last_heartbeat_at).then_with(|| a.id.cmp(&b.id)));
    let rows = workers
        .into_iter()
        .map(|w| {
            Row::new(vec![
                ("worker_id", DbCell::Text(w.id)),
                ("last_heartbeat_at", DbCell::TimestampTz(w.last_heartbeat_at)),
                ("started_at", DbCell::TimestampTz(w.started_at)),
                ("metadata", opt(w.metadata, DbCell::Json)),
            ])
        })
        .collect();
    Output::Rows(rows)
}
