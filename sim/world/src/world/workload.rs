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

/// A seed's workload, drawn once ([`Drawn::draw`]) and carried down to the
/// client process: its calls in time order, and which long-lived client makes
/// each (empty: each call its own client).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Drawn {
    pub calls: Vec<(u64, Action)>,
    pub clients: Vec<u64>,
}

impl Drawn {
    pub fn draw(seed: u64, w: &Workload, heal_ms: u64) -> Drawn {
        let calls = plan(seed, w, heal_ms);
        let clients = clients(seed, w, calls.len());
        Drawn { calls, clients }
    }
}

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
    schedule(seed, w, &mut out);
    out.sort_by_key(|(t, _)| *t);
    out
}

/// Scheduled jobs' not-before times and queries' lags, drawn from a stream
/// of their own (in generation order), so that worlds without them replay
/// as before.
fn schedule(seed: u64, w: &Workload, out: &mut [(u64, Action)]) {
    if w.scheduled_rate == 0.0 && w.query_lag_max_ms == 0 {
        return;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(mix(seed, 0x7363_6864, 0));
    for (at_ms, action) in out.iter_mut() {
        match action {
            Action::Enqueue(spec)
                if spec.kind == TaskKind::Job && w.scheduled_rate > 0.0 && rng.gen_bool(w.scheduled_rate) =>
            {
                spec.not_before_ms = *at_ms + rng.gen_range(1..=w.scheduled_max_ms);
            }
            Action::Query { lag_timeout_ms, .. } if w.query_lag_max_ms > 0 => {
                *lag_timeout_ms = rng.gen_range(w.query_lag_timeout_ms..=w.query_lag_max_ms);
            }
            _ => {}
        }
    }
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

#[cfg(test)]
mod tests {
    use super::{plan, Action};
    use crate::scenario::Workload;
    use leasesim_vocab::task::TaskKind;

    fn workload() -> Workload {
        Workload { enqueue_window_ms: 60_000, index_builds: 4, jobs: 12, ..Workload::default() }
    }

    #[test]
    fn schedules_and_lags_change_nothing_else() {
        let plain = plan(7, &workload(), 100_000);
        let w = Workload { scheduled_rate: 1.0, scheduled_max_ms: 30_000, query_lag_max_ms: 20_000, ..workload() };
        let drawn = plan(7, &w, 100_000);
        assert_eq!(plain.len(), drawn.len());
        let (mut scheduled, mut long_lags) = (0, 0);
        for ((at_ms, before), (at2_ms, after)) in plain.iter().zip(&drawn) {
            assert_eq!(at_ms, at2_ms, "an action moved");
            match (before, after) {
                (Action::Enqueue(a), Action::Enqueue(b)) if a.kind == TaskKind::Job => {
                    assert_eq!(a.not_before_ms, 0);
                    assert!(b.not_before_ms > *at_ms && b.not_before_ms <= at_ms + 30_000, "{b:?} at {at_ms}");
                    assert_eq!(a.clone(), leasesim_vocab::task::TaskSpec { not_before_ms: 0, ..b.clone() });
                    scheduled += 1;
                }
                (Action::Query { lag_timeout_ms: l1, index: i1 }, Action::Query { lag_timeout_ms: l2, index: i2 }) => {
                    assert_eq!((i1, *l1), (i2, 5_000));
                    assert!((5_000..=20_000).contains(l2));
                    long_lags += u32::from(*l2 > 10_000);
                }
                (a, b) => assert_eq!(a, b),
            }
        }
        assert_eq!(scheduled, 12, "a rate of 1 schedules every job");
        assert!(long_lags > 0, "some lags are past 10 s");
    }
}
