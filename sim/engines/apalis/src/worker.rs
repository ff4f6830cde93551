//! One worker process: apalis's own worker (`WorkerBuilder` with
//! `RedisStorage<u64, SimRedis>`), named after its process so that the name
//! stays the same across restarts, running the harness's task body for
//! every task, as an application's `main` runs it: `worker.run().await`.
//! When it returns (apalis stops a worker on a failed heartbeat, fetch or
//! event write) the process exits, and the world's supervisor starts a new
//! one after `restart_delay_ms`.

use crate::book::Book;
use crate::config::ApalisConfig;
use crate::conn::SimRedis;
use crate::wire::LinkWire;
use crate::Apalis;
use apalis_core::error::BoxDynError;
use apalis_core::task::data::Data;
use apalis_core::task::task_id::TaskId as ApalisTaskId;
use apalis_core::worker::builder::WorkerBuilder;
use apalis_redis::RedisStorage;
use leasesim_vocab::ids::Owner;
use leasesim_vocab::task::{TaskError, TaskKind};
use leasesim_world::engine::WorkerWorld;
use leasesim_world::world::SimHandler;
use std::sync::Arc;

/// What a task's handler needs, as worker data.
#[derive(Clone)]
pub struct BodySeam {
    pub handler: SimHandler,
    pub book: Book,
    pub owner: Owner,
}

pub async fn run(cfg: ApalisConfig, w: WorkerWorld<Apalis>) {
    let wire = LinkWire { link: w.link.clone(), owner: Some(w.owner) };
    let conn = SimRedis::new(Arc::new(wire), cfg.response_timeout_ms);
    let storage = RedisStorage::<u64, SimRedis>::new(conn).with_config(cfg.apalis());
    let seam = BodySeam { handler: w.body.clone(), book: w.shared.clone(), owner: w.owner };
    let name = w.shared.name_of(w.owner);
    let worker = WorkerBuilder::new(name).backend(storage).data(seam).build(job);
    match worker.run().await {
        Ok(()) => tracing::info!(owner = %w.owner, "apalis worker stopped"),
        Err(error) => tracing::info!(%error, owner = %w.owner, "apalis worker failed; the process exits"),
    }
}

/// The application's task: the harness's body, for the attempt this
/// process was granted (the store seam numbered it at the fetch).
async fn job(_args: u64, id: ApalisTaskId, seam: Data<BodySeam>) -> Result<(), BoxDynError> {
    let task = match &id {
        ApalisTaskId::Int(n) => *n,
        other => other.to_string().parse().map_err(|_| format!("task id {other} is not the application's"))?,
    };
    let fence = seam.book.held_by(task, seam.owner);
    match seam.handler.run(fence, TaskKind::Job).await {
        Ok(_) => Ok(()),
        Err(TaskError::Conflict) => Err("leasesim: conflict".into()),
        Err(TaskError::Fatal) => Err("leasesim: fatal".into()),
    }
}
