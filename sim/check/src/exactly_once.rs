//! exactly-once-completion: a task is completed at most once, and the
//! application receives its completion callback at most once, from the
//! attempt whose completion the store committed, on that attempt's process.
//!
//! Completions are judged at the store seam (the commit that made the task
//! done, and the request that did it); callbacks at the task-body seam,
//! where the application receives them.

use super::{answer, commit, fact, Checker, Ctx, Violation};
use crate::Kinds;
use leasesim_vocab::history::Record;
use leasesim_vocab::ids::{Fence, TaskId};
use leasesim_vocab::op::Op;
use leasesim_vocab::task::TaskState;
use leasesim_vocab::truth::Fact;
use std::collections::BTreeMap;

pub const NAME: &str = "exactly-once-completion";

#[derive(Default)]
pub struct ExactlyOnce {
    /// Per task: when it was done, and the completion that did it.
    done: BTreeMap<TaskId, (u64, Option<Fence>)>,
    /// Per task: the first callback (time, attempt).
    callbacks: BTreeMap<TaskId, (u64, Fence)>,
    evaluations: u64,
}

impl ExactlyOnce {
    fn judge_done(&mut self, now: u64, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let Some(commit) = commit(rec) else { return };
        let completion = answer(rec, ctx).and_then(|a| match a.request.request {
            Op::Complete { fence } => Some(fence),
            _ => None,
        });
        for change in &commit.tasks {
            let after = &change.after;
            if after.state != TaskState::Done || change.before.as_ref().is_some_and(|b| b.state == TaskState::Done) {
                continue;
            }
            self.evaluations += 1;
            let by = completion.filter(|f| f.task == after.id);
            if let Some((first_ms, _)) = self.done.get(&after.id) {
                out.push(
                    Violation::new(
                        NAME,
                        now,
                        format!("t{}: done again at {now} ms (first at {first_ms} ms)", after.id),
                    )
                    .task(after.id),
                );
                continue;
            }
            self.done.insert(after.id, (now, by));
        }
    }

    fn judge_callback(&mut self, now: u64, rec: &Record, out: &mut Vec<Violation>) {
        let Some(Fact::Callback { fence, on }) = fact(rec) else { return };
        self.evaluations += 1;
        let task = fence.task;
        let problem = if let Some((first_ms, first)) = self.callbacks.get(&task) {
            Some(format!(
                "second callback at {now} ms (attempt {}); the first was at {first_ms} ms for attempt {} ({})",
                fence.attempt, first.attempt, first.owner
            ))
        } else {
            match self.done.get(&task) {
                Some((_, Some(by))) if by == fence && *on == fence.owner => None,
                Some((_, Some(by))) if by == fence => {
                    Some(format!("callback of attempt {} delivered on {on}", fence.attempt))
                }
                Some((done_ms, by)) => Some(format!(
                    "callback at {now} ms for attempt {} ({}), but the task was completed at {done_ms} ms by {}",
                    fence.attempt,
                    fence.owner,
                    by.map_or_else(
                        || "no completion write".to_string(),
                        |f| format!("attempt {} ({})", f.attempt, f.owner)
                    )
                )),
                None => Some(format!(
                    "callback at {now} ms for attempt {} ({}), but no completion was committed",
                    fence.attempt, fence.owner
                )),
            }
        };
        self.callbacks.entry(task).or_insert((now, *fence));
        if let Some(problem) = problem {
            out.push(Violation::new(NAME, now, format!("t{task}: {problem}")).fence(fence));
        }
    }
}

impl Checker for ExactlyOnce {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "store and body seams: a task is completed once, and the application gets one callback, from the attempt whose completion committed"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        self.judge_done(rec.at_ms, rec, ctx, out);
        self.judge_callback(rec.at_ms, rec, out);
    }

    fn reads(&self) -> Kinds {
        Kinds::COMMIT.or(Kinds::CALLBACK)
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::testkit::{cases, o, H, PASS};
    use leasesim_vocab::task::TaskKind;

    cases! {
        one_completion_one_callback_passes:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job).created(2, TaskKind::Job)
                .attempt_ok(10, 1, 1, o(1, 1))
                .attempt_ok(200, 2, 1, o(1, 1))
                .build()
            => PASS;
        callback_published_twice:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(5, TaskKind::Job)
                .attempt_ok(10, 5, 1, o(1, 1))
                .at(200).callback(5, 1, o(1, 1))
                .build()
            => &[(NAME, Some(5))];
        callback_for_a_rejected_completion:
            // p1's attempt 1 lost the task; its completion was refused, yet
            // the application gets a callback from it.
            H::new().up(o(1, 1)).up(o(2, 1)).heartbeat(o(1, 1)).heartbeat(o(2, 1)).created(3, TaskKind::WorkflowTask)
                .at(10).grant(3, 1, o(1, 1)).permit(o(1, 1), 3, 1).started(3, 1, o(1, 1))
                .at(100).paused(1)
                .at(3_100).released(3, 1, o(2, 1))
                .attempt_ok(3_200, 3, 2, o(2, 1))
                .at(3_500).resumed(1).finished(3, 1, o(1, 1), true).callback(3, 1, o(1, 1)).unpermit(o(1, 1), 3, 1)
                .build()
            => &[(NAME, Some(3))];
    }
}
