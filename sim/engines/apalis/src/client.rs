//! The application's client: one call pushes one task through apalis's own
//! sink (`RedisStorage::push_task`), over a connection of the harness's.
//! The task's id is the application's (`TaskId::Int`, drawn from the
//! world's book): apalis's default ULIDs draw on the OS, which no seed
//! replays. It is not retried: the application makes one attempt. A job
//! the application schedules is pushed with its `run_at` (whole seconds).

use crate::config::ApalisConfig;
use crate::conn::SimRedis;
use crate::wire::LinkWire;
use crate::Apalis;
use apalis_core::backend::{Filter, ListTasks, ListWorkers, Metrics, TaskSink};
use apalis_core::task::builder::TaskBuilder;
use apalis_core::task::task_id::TaskId as ApalisTaskId;
use apalis_redis::RedisStorage;
use leasesim_vocab::truth::ClientAnswer;
use leasesim_world::engine::ClientWorld;
use leasesim_world::world::Action;
use std::sync::Arc;

pub async fn call(cfg: ApalisConfig, c: ClientWorld<Apalis>, action: Action) -> ClientAnswer {
    let Action::Enqueue(spec) = action else {
        // The adapter's validation refuses workloads with anything but jobs.
        unreachable!("apalis's workload only pushes jobs");
    };
    let conn = SimRedis::new(Arc::new(LinkWire { link: c.link, owner: None }), cfg.response_timeout_ms);
    let mut sink = RedisStorage::<u64, SimRedis>::new(conn).with_config(cfg.apalis());
    if cfg.dashboard_every > 0 && c.call.is_multiple_of(u64::from(cfg.dashboard_every)) {
        dashboard(&sink).await;
    }
    let id = c.shared.next_task();
    let mut task = TaskBuilder::new(id).task_id(ApalisTaskId::Int(id));
    // apalis's own default unless the scenario sets a budget.
    if cfg.max_attempts != crate::config::DEFAULT_MAX_ATTEMPTS {
        task = task.max_attempts(cfg.max_attempts as usize);
    }
    if spec.not_before_ms > 0 {
        // apalis schedules in whole seconds of the wall clock (`run_at`,
        // the score in its scheduled set): the first second at or after
        // the time the application asked for, so the job is never due
        // sooner than asked.
        let wall_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let asked_wall_ms = wall_ms + spec.not_before_ms.saturating_sub(c.rec.now_ms());
        task = task.run_at_timestamp(asked_wall_ms.div_ceil(1_000));
    }
    let task = task.build();
    match sink.push_task(task).await {
        Ok(()) => ClientAnswer::Enqueued { task: Some(id) },
        Err(error) => {
            tracing::debug!(%error, "push failed");
            ClientAnswer::Enqueued { task: None }
        }
    }
}

/// An operator's dashboard looks at the queue, as apalis offers it: global
/// and per-queue statistics, the queue's tasks and its workers. Their
/// answers are not judged (they are no promise of a lease engine, and
/// apalis-redis 1.0.0 answers all four wrongly: docs/findings/apalis.md,
/// dashboard-calls); what is judged is that none of their commands changes
/// a task.
async fn dashboard(storage: &RedisStorage<u64, SimRedis>) {
    let global = storage.global().await.map(|s| s.len());
    let by_queue = storage.fetch_by_queue().await.map(|s| s.len());
    let tasks = storage.list_tasks(&Filter { status: None, page: 1, page_size: None }).await.map(|t| t.len());
    let workers = storage.list_workers().await.map(|w| w.len());
    tracing::debug!(?global, ?by_queue, ?tasks, ?workers, "dashboard");
}
