//! The client's plan: what it enqueues and queries, and when. Drawn from the
//! seed alone (independent of faults), then played by the client process.

use super::handler::mix;
use crate::scenario::Workload;
use leasesim_vocab::ids::{GroupId, IndexId};
use leasesim_vocab::task::{TaskKind, TaskSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Enqueue(TaskSpec),
    CreatePipeline { pipeline: GroupId, stages: u32 },
    Query { index: IndexId, lag_timeout_ms: u64 },
}

/// First group ids of workflow runs and pipelines (distinct ranges).
const RUN_BASE: GroupId = 1_000;
const PIPELINE_BASE: GroupId = 2_000;

/// First index id of the builds enqueued after the heal.
const LATE_INDEX_BASE: IndexId = 10_000;

/// The plan, sorted by time (ties keep generation order). `heal_ms` is when
/// the heal comes (the work enqueued after it counts from there).
pub fn plan(seed: u64, w: &Workload, heal_ms: u64) -> Vec<(u64, Action)> {
    let mut rng = ChaCha8Rng::seed_from_u64(mix(seed, 0x776f_726b, 0));
    let at = |rng: &mut ChaCha8Rng| rng.gen_range(0..=w.enqueue_window_ms);
    let mut out = Vec::new();
    let spec =
        |kind, group, index, not_before_ms| TaskSpec { kind, group, stage: None, index, not_before_ms, queue: None };
    for i in 0..w.index_builds {
        let t = at(&mut rng);
        let index = i as IndexId + 1;
        out.push((t, Action::Enqueue(spec(TaskKind::IndexBuild, None, Some(index), 0))));
        out.push((t + w.query_after_ms, Action::Query { index, lag_timeout_ms: w.query_lag_timeout_ms }));
    }
    for _ in 0..w.authz_materializations {
        let t = at(&mut rng);
        out.push((t, Action::Enqueue(spec(TaskKind::AuthzMaterialization, None, None, 0))));
    }
    for _ in 0..w.jobs {
        let t = at(&mut rng);
        out.push((t, Action::Enqueue(spec(TaskKind::Job, None, None, 0))));
    }
    for p in 0..w.pipelines {
        let t = at(&mut rng);
        out.push((t, Action::CreatePipeline { pipeline: PIPELINE_BASE + p as GroupId, stages: w.stages_per_pipeline }));
    }
    for r in 0..w.workflow_runs {
        let t = at(&mut rng);
        let run = Some(RUN_BASE + r as GroupId);
        out.push((t, Action::Enqueue(spec(TaskKind::Activity, run, None, 0))));
        for j in 0..w.workflow_tasks_per_run {
            // Workflow tasks arrive one gap apart (a signal, an activity result...).
            out.push((
                t + j as u64 * w.workflow_task_gap_ms,
                Action::Enqueue(spec(TaskKind::WorkflowTask, run, None, 0)),
            ));
        }
    }
    for s in &w.script {
        out.push((s.at_ms, Action::Enqueue(spec(s.kind, s.group, s.index, 0))));
        if let (TaskKind::IndexBuild, Some(index)) = (s.kind, s.index) {
            out.push((s.at_ms + w.query_after_ms, Action::Query { index, lag_timeout_ms: w.query_lag_timeout_ms }));
        }
    }
    // Drawn after everything else, so that worlds without late work replay as before.
    let late_at = |rng: &mut ChaCha8Rng| heal_ms + w.after_heal_delay_ms + rng.gen_range(0..=w.after_heal_window_ms);
    for i in 0..w.after_heal_index_builds {
        let t = late_at(&mut rng);
        let index = LATE_INDEX_BASE + i as IndexId;
        out.push((t, Action::Enqueue(spec(TaskKind::IndexBuild, None, Some(index), 0))));
        out.push((t + w.query_after_ms, Action::Query { index, lag_timeout_ms: w.query_lag_timeout_ms }));
    }
    for _ in 0..w.after_heal_jobs {
        let t = late_at(&mut rng);
        out.push((t, Action::Enqueue(spec(TaskKind::Job, None, None, 0))));
    }
    // Drawn after everything else, so that worlds without queues replay as before.
    if w.queues > 0 {
        for (_, action) in out.iter_mut() {
            if let Action::Enqueue(spec) = action {
                if spec.kind == TaskKind::Job && rng.gen_bool(w.queue_rate) {
                    spec.queue = Some(rng.gen_range(1..=w.queues));
                }
            }
        }
    }
    out.sort_by_key(|(t, _)| *t);
    out
}

/// Which long-lived client makes each of the plan's `calls` calls, in plan
/// order: ids 1 to `workload.clients`, drawn uniformly from a stream of
/// their own (so the plan itself is the same with or without them). Empty
/// when every call has a client of its own.
pub fn clients(seed: u64, w: &Workload, calls: usize) -> Vec<u64> {
    if w.clients == 0 {
        return Vec::new();
    }
    let mut rng = ChaCha8Rng::seed_from_u64(mix(seed, 0x636c_6e74, 0));
    (0..calls).map(|_| rng.gen_range(1..=w.clients as u64)).collect()
}
