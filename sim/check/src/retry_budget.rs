//! retry-budget: every committed failure spends exactly one retry; a task
//! dies exactly when a failure is fatal or brings it past `max_retries`, and
//! a retried one goes back to ready; nothing but a failure spends the budget
//! or kills a task.
//!
//! Judged at the store seam: the error is the one the failure request
//! carried, the retries and states are what the store committed.

use super::{commit, promise, Checker, Ctx, Violation};
use crate::Kinds;
use leasesim_vocab::history::{Entry, Record};
use leasesim_vocab::op::Op;
use leasesim_vocab::task::TaskError;
use leasesim_vocab::task::TaskState;
use leasesim_vocab::truth::Fact;

pub const NAME: &str = "retry-budget";

#[derive(Default)]
pub struct RetryBudget {
    evaluations: u64,
}

impl Checker for RetryBudget {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "store seam: a failure spends exactly one retry; a task dies exactly on a fatal error or past max_retries; nothing else spends retries or kills a task"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        let Some(commit) = commit(rec) else { return };
        let failure = match &rec.entry {
            Entry::Truth(Fact::Answered { req, .. }) => ctx.view.request(*req).and_then(|r| match &r.request {
                Op::Fail { fence, error } => Some((*fence, *error)),
                _ => None,
            }),
            _ => None,
        };
        let cfg = ctx.promises();
        for change in &commit.tasks {
            let (Some(before), after) = (change.before.as_ref(), &change.after) else { continue };
            let spent = after.retries != before.retries;
            let died = after.state == TaskState::Dead && before.state != TaskState::Dead;
            let failed_here = failure.filter(|(fence, _)| fence.task == after.id);
            let problem = match failed_here {
                None if spent || died => {
                    self.evaluations += 1;
                    Some(format!(
                        "retries {} -> {}, state {:?} -> {:?} without a failure",
                        before.retries, after.retries, before.state, after.state
                    ))
                }
                None => None,
                Some((_, error)) => {
                    self.evaluations += 1;
                    let fatal = error == TaskError::Fatal;
                    let should_die = promise::dies(cfg, before.retries + 1, fatal);
                    if after.retries != before.retries + 1 {
                        Some(format!("a failure took retries from {} to {}", before.retries, after.retries))
                    } else if should_die && after.state != TaskState::Dead {
                        Some(format!(
                            "failure {} ({error:?}) left it {:?}; it must die (max_retries {})",
                            after.retries, after.state, cfg.max_retries
                        ))
                    } else if !should_die && after.state != TaskState::Ready {
                        Some(format!(
                            "failure {} ({error:?}) left it {:?}; it must be retried (max_retries {})",
                            after.retries, after.state, cfg.max_retries
                        ))
                    } else {
                        None
                    }
                }
            };
            if let Some(problem) = problem {
                out.push(Violation::new(NAME, now, format!("t{}: at {now} ms {problem}", after.id)).task(after.id));
            }
        }
    }

    fn reads(&self) -> Kinds {
        Kinds::COMMIT
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::testkit::{cases, o, H, PASS};
    use leasesim_vocab::op::{Op, Response};
    use leasesim_vocab::task::TaskError;
    use leasesim_vocab::task::{TaskKind, TaskState};
    use leasesim_vocab::testimony::{Event, WriteKind};
    use leasesim_vocab::truth::Sender;

    /// Job t1 run `n` times by p1, each failing with a conflict.
    fn failing(n: u32, dies: bool) -> H {
        let mut h = H::new().up(o(1, 1)).created(1, TaskKind::Job);
        for k in 1..=n {
            let at = h.now() + 10_000;
            let last = k == n && dies;
            h = h
                .at(at)
                .grant(1, k, o(1, 1))
                .permit(o(1, 1), 1, k)
                .started(1, k, o(1, 1))
                .at(at + 100)
                .finished(1, k, o(1, 1), false)
                .failed(1, k, o(1, 1), k, (!last).then_some(at + 100 + 1_000 * (1 << (k - 1))))
                .unpermit(o(1, 1), 1, k);
        }
        h
    }

    cases! {
        retried_within_the_budget_then_dead_passes:
            // max_retries 2: failures 1 and 2 are retried, failure 3 kills it.
            failing(3, true).build()
            => PASS;
        dead_one_failure_early:
            failing(2, true).build()
            => &[(NAME, Some(1))];
        retried_past_the_budget:
            failing(3, false).build()
            => &[(NAME, Some(1))];
        failure_spends_no_retry:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .at(100).finished(1, 1, o(1, 1), false)
                .failed(1, 1, o(1, 1), 0, Some(1_100)).unpermit(o(1, 1), 1, 1)
                .build()
            // The engine also says "failed" where the store only released it.
            => &[(NAME, Some(1)), ("testimony", Some(1))];
        fatal_error_retried:
            {
                let f = crate::testkit::fence(1, 1, o(1, 1));
                H::new().up(o(1, 1)).created(1, TaskKind::Job)
                    .at(10).grant(1, 1, o(1, 1))
                    .at(100).answer(
                        Sender::Worker(o(1, 1)),
                        Op::Fail { fence: f, error: TaskError::Fatal },
                        Response::Applied { retries: 1, retry_at_ms: Some(1_100) },
                        vec![Event::WriteApplied { fence: f, write: WriteKind::Fail, retries: 1, retry_at_ms: Some(1_100), terminal: false }],
                        &[(1, &|t: &mut leasesim_vocab::task::Row| {
                            t.state = TaskState::Ready;
                            t.owner = None;
                            t.retries = 1;
                            t.retry_at_ms = 1_100;
                        })],
                    )
                    .build()
            }
            => &[(NAME, Some(1)), ("outcome-truth", Some(1))];
    }
}
