//! The liveness phase, and its quiet end.
//!
//! A seed's liveness phase is long enough for the slowest recovery its
//! bounds allow, but most seeds settle long before it ends: every task done
//! or dead, and from then on only heartbeats, polls and maintenance passes
//! that change nothing. In a swarm seed that idle tail was about half of the
//! records. With `phases.quiet_end_ms` set, the world looks at the store
//! four times per `quiet_end_ms` after the heal (FoundationDB's "quiet
//! database" check at the end of a test) and ends the run at the first look
//! that finds it settled and unchanged for a whole `quiet_end_ms`, so every
//! run still ends with at least one whole period of nothing changing, judged
//! like any other: heartbeats, renewals and passes must keep their cadence
//! in it.
//!
//! "Settled" is said in the harness's words, from the store as the harness
//! reads it (`StoreSeam::last_look`), never from the engine's word: a world
//! that still owes anything (a task not done, a stage not created, a built
//! index not materialized, a client call unanswered, a task body still
//! running) runs the whole phase, so a liveness failure is judged exactly
//! as before. Nothing here is one engine's notion: every engine's store is
//! read through the same `last_look`, so any engine's world ends early.
//!
//! A body still running is owed too: the engine has not yet said what
//! became of it, and what it says (a late, stale outcome) is exactly what
//! the safety checkers exist to judge.

use crate::engine::{EngineUnderTest, LastLook, StoreSeam};
use leasesim_vocab::task::{TaskKind, TaskState};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the world still waits for outside the store, counted as it
/// happens at the harness's own seams.
#[derive(Debug, Default)]
pub struct Open {
    /// Client calls not answered yet, planned ones included.
    pub calls: AtomicUsize,
    /// Task bodies started and not yet returned or dropped.
    pub bodies: AtomicUsize,
}

impl Open {
    pub fn new(planned_calls: usize) -> Arc<Open> {
        Arc::new(Open { calls: AtomicUsize::new(planned_calls), bodies: AtomicUsize::new(0) })
    }

    fn any(&self) -> bool {
        self.calls.load(Ordering::Relaxed) > 0 || self.bodies.load(Ordering::Relaxed) > 0
    }
}

/// Runs the liveness phase of `heal_phase_ms`, ending it early when the
/// world is quiet (`quiet_end_ms`) and nothing is [`Open`].
pub async fn liveness_phase<E: EngineUnderTest>(
    seam: &E::Store,
    heal_phase_ms: u64,
    quiet_end_ms: Option<u64>,
    open: &Open,
) {
    let Some(quiet_ms) = quiet_end_ms.filter(|&q| q > 0 && q < heal_phase_ms) else {
        tokio::time::sleep(Duration::from_millis(heal_phase_ms)).await;
        return;
    };
    // Looked at four times a period: a run ends between one and one and a
    // quarter periods after its last change.
    let look_every_ms = (quiet_ms / LOOKS_PER_PERIOD).max(1);
    let mut waited_ms = 0;
    // The settled store, and how long after the heal it was first seen so:
    // it has been unchanged at least since then.
    let mut quiet: Option<(LastLook, u64)> = None;
    while waited_ms < heal_phase_ms {
        let step_ms = look_every_ms.min(heal_phase_ms - waited_ms);
        tokio::time::sleep(Duration::from_millis(step_ms)).await;
        waited_ms += step_ms;
        let look = seam.last_look();
        if open.any() || !settled(&look) {
            quiet = None;
            continue;
        }
        match &quiet {
            Some((before, since_ms)) if same(before, &look) => {
                if waited_ms - since_ms >= quiet_ms {
                    return;
                }
            }
            _ => quiet = Some((look, waited_ms)),
        }
    }
}

/// Looks at the store per quiet period.
const LOOKS_PER_PERIOD: u64 = 4;

/// Does the store owe nothing more? Every task done or dead, every stage
/// done (or its task dead: that pipeline ends there), every index whose
/// build is done materialized.
pub fn settled(look: &LastLook) -> bool {
    let states: BTreeMap<u64, TaskState> = look.tasks.iter().map(|t| (t.id, t.state)).collect();
    let tasks_ended = states.values().all(|s| s.is_terminal());
    let stages_ended = look
        .stages
        .iter()
        .all(|(_, row)| row.done || row.task.is_some_and(|id| states.get(&id) == Some(&TaskState::Dead)));
    let built = look.tasks.iter().filter(|t| t.spec.kind == TaskKind::IndexBuild && t.state == TaskState::Done);
    let indexes_materialized = built.filter_map(|t| t.spec.index).all(|index| look.materialized.contains(&index));
    tasks_ended && stages_ended && indexes_materialized
}

/// The same store at two looks (`LastLook` is data, compared field by field).
fn same(a: &LastLook, b: &LastLook) -> bool {
    a.tasks == b.tasks && a.stages == b.stages && a.materialized == b.materialized && a.queues == b.queues
}

#[cfg(test)]
mod tests {
    use super::settled;
    use crate::engine::LastLook;
    use leasesim_vocab::ids::StageRef;
    use leasesim_vocab::task::{Row, StageRow, TaskKind, TaskSpec, TaskState};

    fn row(id: u64, kind: TaskKind, state: TaskState, index: Option<u64>) -> Row {
        let spec = TaskSpec { kind, group: None, stage: None, index, not_before_ms: 0, queue: None };
        let (owner, attempt, lease_expiry_ms, retries, retry_at_ms, updated_ms, repair_count) =
            (None, 1, None, 0, 0, 0, 0);
        Row { id, spec, state, owner, attempt, lease_expiry_ms, retries, retry_at_ms, updated_ms, repair_count }
    }

    fn look(tasks: Vec<Row>, stages: Vec<(StageRef, StageRow)>, materialized: Vec<u64>) -> LastLook {
        LastLook { tasks, stages, materialized, queues: Vec::new() }
    }

    fn stage(index: u32) -> StageRef {
        StageRef { pipeline: 1, index }
    }

    /// Each case: what the store holds, and whether it owes nothing more.
    #[test]
    fn settled_only_when_nothing_is_owed() {
        use TaskKind::{IndexBuild, Job, Stage};
        use TaskState::{Dead, Done, Leased, Ready};
        let cases: Vec<(&str, LastLook, bool)> = vec![
            ("an empty store", look(vec![], vec![], vec![]), true),
            ("every task ended", look(vec![row(1, Job, Done, None), row(2, Job, Dead, None)], vec![], vec![]), true),
            ("a task ready", look(vec![row(1, Job, Done, None), row(2, Job, Ready, None)], vec![], vec![]), false),
            ("a task leased", look(vec![row(1, Job, Leased, None)], vec![], vec![]), false),
            (
                "a stage not created yet",
                look(
                    vec![row(1, Stage, Done, None)],
                    vec![
                        (stage(0), StageRow { task: Some(1), done: true }),
                        (stage(1), StageRow { task: None, done: false }),
                    ],
                    vec![],
                ),
                false,
            ),
            (
                "a stage whose task died",
                look(
                    vec![row(1, Stage, Dead, None)],
                    vec![(stage(0), StageRow { task: Some(1), done: false })],
                    vec![],
                ),
                true,
            ),
            ("a built index not materialized", look(vec![row(1, IndexBuild, Done, Some(7))], vec![], vec![]), false),
            ("a built index materialized", look(vec![row(1, IndexBuild, Done, Some(7))], vec![], vec![7]), true),
            ("a dead build owes no index", look(vec![row(1, IndexBuild, Dead, Some(7))], vec![], vec![]), true),
        ];
        for (name, store, want) in cases {
            assert_eq!(settled(&store), want, "{name}");
        }
    }
}
