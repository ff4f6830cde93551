//! concurrency-bound: a worker runs at most `concurrency` task bodies at
//! once, and never claims more than it has room for: a claim asks for at
//! most `claim_batch_max` tasks, and what it asks for plus the bodies that
//! process is running never exceeds `concurrency`.
//!
//! Judged at the task-body seam (bodies really running on each process) and
//! the store seam (claims as they arrived, with the sender the network saw).

use super::{fact, Checker, Ctx, Violation};
use crate::Kinds;
use leasesim_vocab::history::Record;
use leasesim_vocab::op::Op;
use leasesim_vocab::truth::{Fact, Sender};

pub const NAME: &str = "concurrency-bound";

#[derive(Default)]
pub struct ConcurrencyBound {
    evaluations: u64,
}

impl Checker for ConcurrencyBound {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "body and store seams: at most `concurrency` bodies run at once per process, and a claim asks for at most claim_batch_max and only the room it has"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        let cfg = ctx.promises();
        let running = |owner| ctx.view.owner(owner).map_or(0, |o| o.bodies.len() as u32);
        match fact(rec) {
            Some(Fact::BodyStarted { fence, on, .. }) => {
                self.evaluations += 1;
                let n = running(*on) + 1;
                if n > cfg.concurrency {
                    out.push(
                        Violation::new(
                            NAME,
                            now,
                            format!(
                                "t{}: {on} runs {n} bodies at {now} ms after starting attempt {}, more than its concurrency {}",
                                fence.task, fence.attempt, cfg.concurrency
                            ),
                        )
                        .fence(fence)
                        .process(*on),
                    );
                }
            }
            // A second delivery was asked for when its first one was.
            Some(Fact::Arrived {
                from: Sender::Worker(owner),
                request: Op::Claim { max, .. },
                duplicate: false,
                ..
            }) => {
                self.evaluations += 1;
                let bodies = running(*owner);
                let problem = if *max > cfg.claim_batch_max {
                    Some(format!("asks for {max} tasks, more than claim_batch_max {}", cfg.claim_batch_max))
                } else if max + bodies > cfg.concurrency {
                    Some(format!(
                        "asks for {max} tasks while running {bodies} bodies (concurrency {})",
                        cfg.concurrency
                    ))
                } else {
                    None
                };
                if let Some(problem) = problem {
                    out.push(
                        Violation::new(NAME, now, format!("a claim of {owner} at {now} ms {problem}")).process(*owner),
                    );
                }
            }
            _ => {}
        }
    }

    fn reads(&self) -> Kinds {
        Kinds::BODY_STARTED.or(Kinds::ARRIVED)
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::testkit::{cases, o, H, PASS};
    use leasesim_vocab::op::Op;
    use leasesim_vocab::task::TaskKind;
    use leasesim_vocab::truth::Sender;

    fn three_jobs() -> H {
        H::new().up(o(1, 1)).created(1, TaskKind::Job).created(2, TaskKind::Job).created(3, TaskKind::Job)
    }

    cases! {
        two_bodies_at_concurrency_two_pass:
            three_jobs().at(10)
                .grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .grant(2, 1, o(1, 1)).permit(o(1, 1), 2, 1).started(2, 1, o(1, 1))
                .at(100).finished(1, 1, o(1, 1), true).completed(1, 1, o(1, 1)).callback(1, 1, o(1, 1)).unpermit(o(1, 1), 1, 1)
                .grant(3, 1, o(1, 1)).permit(o(1, 1), 3, 1).started(3, 1, o(1, 1))
                .build()
            => PASS;
        three_bodies_at_once:
            three_jobs().at(10)
                .grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .grant(2, 1, o(1, 1)).permit(o(1, 1), 2, 1).started(2, 1, o(1, 1))
                .grant(3, 1, o(1, 1)).started(3, 1, o(1, 1))
                .build()
            // Its claim asked for room it did not have, and it has no permit.
            => &[(NAME, Some(3)), (NAME, None), ("no-permit-leak", Some(3))];
        claim_for_more_than_its_room:
            three_jobs().at(10)
                .grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .arrive(Sender::Worker(o(1, 1)), Op::Claim { owner: o(1, 1), max: 2, wait_ms: 0 }).0
                .build()
            => &[(NAME, None)];
    }
}
