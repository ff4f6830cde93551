//! complete_job, fail_job (single and the failure batcher's fail_jobs) and
//! `_private_return_jobs`: what a worker sends when it lets go of a job.

use std::collections::BTreeSet;

use graphile_worker_database::DbValue;

use super::{eq_some, void};
use crate::params::Params;
use crate::rows::JobRow;
use crate::store::{Ctx, RowKey, Table, TableLock};
use crate::time::{backoff_micros, interval_from_millis, plus_micros};
use crate::{Fail, Output, Ts};

/// Releases the named queue of each released job when `worker` holds it:
/// `update _private_job_queues .. from j where id = j.job_queue_id and
/// locked_by = $worker`. Answers the number of queue rows updated.
fn release_queues(ctx: &mut Ctx, released: &[Option<i32>], worker: Option<&str>) -> Result<u64, Fail> {
    let mut ids: Vec<i32> = released.iter().flatten().copied().collect();
    ids.sort_unstable();
    ids.dedup();
    let mut updated = 0;
    for id in ids {
        let Some(queue) = ctx.queue(&id).cloned() else { continue };
        if !eq_some(queue.locked_by.as_deref(), worker) {
            continue;
        }
        ctx.lock(RowKey::Queue(id))?;
        ctx.put_queue(crate::QueueRow { locked_by: None, locked_at: None, ..queue });
        updated += 1;
    }
    Ok(updated)
}

pub(crate) fn complete_job(ctx: &mut Ctx, queued: bool, values: &[DbValue]) -> Result<Output, Fail> {
    let p = Params::new(values, if queued { 2 } else { 1 })?;
    let id = p.i64_opt(0)?;
    ctx.lock_table_at_parse(Table::Jobs, TableLock::RowExclusive)?;
    if queued {
        ctx.lock_table_at_parse(Table::Queues, TableLock::RowExclusive)?;
    }
    let deleted = match id.and_then(|id| ctx.job(&id).cloned()) {
        Some(job) => {
            ctx.lock(RowKey::Job(job.id))?;
            ctx.delete_job(job.id)?;
            Some(job)
        }
        None => None,
    };
    if !queued {
        return Ok(Output::Affected(u64::from(deleted.is_some())));
    }
    let worker = p.text_opt(1)?;
    let released: Vec<Option<i32>> = deleted.iter().map(|j| j.job_queue_id).collect();
    Ok(Output::Affected(release_queues(ctx, &released, worker.as_deref())?))
}

/// The retry schedule of a failed attempt, with the lock released.
fn failed(job: &JobRow, error: Option<String>, now: Ts) -> JobRow {
    JobRow {
        last_error: error,
        run_at: plus_micros(now.max(job.run_at), backoff_micros(job.attempts)),
        locked_by: None,
        locked_at: None,
        ..job.clone()
    }
}

pub(crate) fn fail_job(ctx: &mut Ctx, queued: bool, p: &Params) -> Result<Output, Fail> {
    let (id, message, worker, payload) = (p.i64_opt(0)?, p.text_opt(1)?, p.text_opt(2)?, p.json_opt(3)?);
    ctx.lock_table_at_parse(Table::Jobs, TableLock::RowExclusive)?;
    if queued {
        ctx.lock_table_at_parse(Table::Queues, TableLock::RowExclusive)?;
    }
    let job = id.and_then(|id| ctx.job(&id).cloned()).filter(|j| eq_some(j.locked_by.as_deref(), worker.as_deref()));
    let mut released = Vec::new();
    if let Some(job) = job {
        ctx.lock(RowKey::Job(job.id))?;
        let mut row = failed(&job, message, ctx.now);
        if let Some(payload) = payload {
            row.payload = payload;
        }
        released.push(row.job_queue_id);
        ctx.put_job(row);
    }
    if !queued {
        return Ok(Output::Affected(released.len() as u64));
    }
    Ok(Output::Affected(release_queues(ctx, &released, worker.as_deref())?))
}

/// `unnest($1::bigint[], $2::text[]) as input(id, error)`, in input order
/// (the join meets the jobs in that order), the first input row per id
/// (UPDATE .. FROM uses one joined row per target row).
fn failure_input(ids: Vec<i64>, errors: Option<Vec<String>>) -> Vec<(i64, Option<String>)> {
    let errors = errors.unwrap_or_default();
    let mut seen = BTreeSet::new();
    let mut input = Vec::new();
    for (i, id) in ids.into_iter().enumerate() {
        if seen.insert(id) {
            input.push((id, errors.get(i).cloned()));
        }
    }
    input
}

pub(crate) fn fail_jobs(ctx: &mut Ctx, queued: bool, p: &Params) -> Result<Output, Fail> {
    let input = failure_input(p.i64_array(0)?, p.text_array_opt(1)?);
    let worker = p.text_opt(2)?;
    ctx.lock_table_at_parse(Table::Jobs, TableLock::RowExclusive)?;
    if queued {
        ctx.lock_table_at_parse(Table::Queues, TableLock::RowExclusive)?;
    }
    let mut released = Vec::new();
    for (id, message) in input {
        let Some(job) = ctx.job(&id).cloned() else { continue };
        if !eq_some(job.locked_by.as_deref(), worker.as_deref()) {
            continue;
        }
        ctx.lock(RowKey::Job(id))?;
        let row = failed(&job, message, ctx.now);
        released.push(row.job_queue_id);
        ctx.put_job(row);
    }
    if !queued {
        return Ok(Output::Affected(released.len() as u64));
    }
    Ok(Output::Affected(release_queues(ctx, &released, worker.as_deref())?))
}

/// `_private_return_jobs(worker, ids [, delay_ms, error, true])`: gives the
/// worker's jobs back without backoff, its claim's attempt returned unless
/// the job was retired; the recovery form also delays it and notes the error.
pub(crate) fn return_jobs(ctx: &mut Ctx, p: &Params, recovery: bool) -> Result<Output, Fail> {
    let worker = p.text_opt(0)?;
    let (ids, delay_ms, recovery_error) = if recovery {
        (p.i64_opt(1)?.into_iter().collect(), p.i64_opt(2)?, p.text_opt(3)?)
    } else {
        (p.i64_array(1)?, None, None)
    };
    let owned = |ctx: &Ctx| -> Vec<JobRow> {
        ctx.all_jobs()
            .into_iter()
            .filter(|j| ids.contains(&j.id) && eq_some(j.locked_by.as_deref(), worker.as_deref()))
            .collect()
    };
    for job in owned(ctx) {
        ctx.lock(RowKey::Job(job.id))?;
    }
    ctx.lock_table(Table::Jobs, TableLock::RowExclusive)?;
    ctx.lock_table(Table::Queues, TableLock::RowExclusive)?;
    let mut released = Vec::new();
    for job in owned(ctx) {
        let mut row = job.clone();
        if !ctx.retired(job.id) {
            row.attempts = returned_attempt(job.attempts);
        }
        row.locked_by = None;
        row.locked_at = None;
        if recovery {
            if let Some(ms) = delay_ms {
                row.run_at = job.run_at.max(plus_micros(ctx.now, interval_from_millis(ms)));
            }
            row.last_error = recovery_error.clone().or(job.last_error.clone());
            row.updated_at = ctx.now;
        }
        released.push(row.job_queue_id);
        ctx.put_job(row);
    }
    release_queues(ctx, &released, worker.as_deref())?;
    void()
}

/// `greatest(0, attempts - 1)` (computed as int4, so it cannot overflow).
pub(crate) fn returned_attempt(attempts: i16) -> i16 {
    i16::try_from((i32::from(attempts) - 1).max(0)).expect("within smallint")
}
