//! retry-clock: a failed task is not granted again before its failure's
//! commit time plus the policy's backoff (`retry_base_ms * 2^(n-1)`, capped
//! at `retry_cap_ms`), nor a scheduled task before its `not_before_ms`, nor
//! a recovered task (a dead holder's, an expired lease's, an interrupted
//! attempt's) before its recovery's statement time plus the engine's
//! `recovery_delay_ms`; a
//! peer note carries the retry time the store committed; a peer that hears
//! the task is ready again plans its claim no later than that time plus one
//! idle poll.
//!
//! Grants and failures are judged at the store seam against the policy (not
//! against the retry time the store chose to commit); notes at the network
//! seam; the planned claim is the engine's testimony (`RetryPlanned`).

use super::{commit, granted, promise, Checker, Ctx, Violation};
use crate::Kinds;
use leasesim_vocab::history::{Entry, Record};
use leasesim_vocab::ids::TaskId;
use leasesim_vocab::promise::StatementTime;
use leasesim_vocab::task::TaskState;
use leasesim_vocab::testimony::Event;
use leasesim_vocab::truth::Fact;
use std::collections::BTreeMap;

pub const NAME: &str = "retry-clock";

#[derive(Default)]
pub struct RetryClock {
    /// (task, failures spent) -> the retry time the store committed then.
    committed: BTreeMap<(TaskId, u32), u64>,
    evaluations: u64,
}

impl RetryClock {
    fn judge_grants(&mut self, now: u64, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let Some(commit) = commit(rec) else { return };
        for change in &commit.tasks {
            let after = &change.after;
            if after.retries > change.before.as_ref().map_or(0, |b| b.retries) && after.state == TaskState::Ready {
                self.committed.insert((after.id, after.retries), after.retry_at_ms);
            }
            let Some(fence) = granted(change) else { continue };
            self.evaluations += 1;
            let Some(t) = ctx.view.task(fence.task) else { continue };
            let (earliest, why) = match &t.last_failure {
                Some(f) => (
                    promise::retry_due_ms(ctx.promises(), f),
                    format!("failure {} committed at {} ms + backoff", f.retries, f.committed_ms),
                ),
                None => (0, String::new()),
            };
            // A recovered task waits out the recovery delay, from the
            // recovery's statement time (its commit, or at a store that
            // stamps the start, its transaction's start).
            let (earliest, why) = match (t.recovered, ctx.promises().recovery_delay_ms) {
                (true, delay) if delay > 0 => {
                    let origin = match ctx.promises().statement_time {
                        StatementTime::Start => t.recovered_ms,
                        StatementTime::Commit => t.ready_since_ms,
                    };
                    let due = origin + delay;
                    if due > earliest {
                        (due, format!("recovered at {origin} ms + the recovery delay of {delay} ms"))
                    } else {
                        (earliest, why)
                    }
                }
                _ => (earliest, why),
            };
            // The application's wish, not the row's copy of it: an engine
            // that lost the schedule writes a row that agrees with itself.
            let not_before_ms = t.not_before_ms();
            let (earliest, why) = if not_before_ms > earliest {
                (not_before_ms, "its not-before time".to_string())
            } else {
                (earliest, why)
            };
            if now < earliest {
                out.push(
                    Violation::new(
                        NAME,
                        now,
                        format!(
                            "t{}: attempt {} granted to {} at {now} ms, before {earliest} ms ({why})",
                            fence.task, fence.attempt, fence.owner
                        ),
                    )
                    .fence(&fence),
                );
            }
        }
    }

    fn judge_note(&mut self, now: u64, rec: &Record, out: &mut Vec<Violation>) {
        let Entry::Truth(Fact::NoteSent { from, note }) = &rec.entry else { return };
        let Some(&committed) = self.committed.get(&(note.task, note.retries)) else { return };
        self.evaluations += 1;
        if note.retry_at_ms != committed {
            out.push(
                Violation::new(
                    NAME,
                    now,
                    format!(
                        "t{}: {from} sent a peer note after failure {} carrying retry time {} ms; the store committed {committed} ms",
                        note.task, note.retries, note.retry_at_ms
                    ),
                )
                .task(note.task)
                .process(*from),
            );
        }
    }

    fn judge_plan(&mut self, now: u64, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let Entry::Engine(Event::RetryPlanned { owner, task, retries, wake_at_ms }) = &rec.entry else { return };
        let Some(&committed) = self.committed.get(&(*task, *retries)) else { return };
        self.evaluations += 1;
        let latest = committed + ctx.promises().idle_poll_ms;
        if *wake_at_ms > latest {
            out.push(
                Violation::new(
                    NAME,
                    now,
                    format!(
                        "t{task}: {owner} planned its claim after failure {retries} for {wake_at_ms} ms, \
                         {} ms after the committed retry time {committed} ms (allowed: one idle poll)",
                        wake_at_ms - committed
                    ),
                )
                .task(*task)
                .process(*owner),
            );
        }
    }
}

impl Checker for RetryClock {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "store and network seams: a failed task is not granted before its failure's commit time + the policy's backoff; peer notes carry the committed retry time and peers plan their claim by it"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        self.judge_grants(now, rec, ctx, out);
        self.judge_note(now, rec, out);
        self.judge_plan(now, rec, ctx, out);
    }

    fn reads(&self) -> Kinds {
        Kinds::COMMIT.or(Kinds::NOTE_SENT).or(Kinds::ENGINE)
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
    use leasesim_vocab::task::{TaskKind, TaskSpec};
    use leasesim_vocab::testimony::ReleaseCause;

    fn job_at(not_before_ms: u64) -> TaskSpec {
        TaskSpec { kind: TaskKind::Job, group: None, stage: None, index: None, not_before_ms, queue: None }
    }

    /// Job t1 fails once at 100 ms: the policy says retry at 1100 ms.
    fn failed_once() -> H {
        H::new()
            .up(o(1, 1))
            .up(o(2, 1))
            .created(1, TaskKind::Job)
            .at(10)
            .grant(1, 1, o(1, 1))
            .permit(o(1, 1), 1, 1)
            .started(1, 1, o(1, 1))
            .at(100)
            .finished(1, 1, o(1, 1), false)
            .failed(1, 1, o(1, 1), 1, Some(1_100))
            .unpermit(o(1, 1), 1, 1)
    }

    /// Job t1, granted to p1.1 at 10 ms, is handed back at 200 ms by an
    /// interrupted return (a recovery: the test spec's delay is 2000 ms)
    /// and granted again at `at`.
    fn recovered_then_granted_at(at: u64) -> Vec<leasesim_vocab::history::Record> {
        let returned = Op::ReturnOwn { owner: o(1, 1), tasks: vec![1], interrupted: true };
        H::new()
            .up(o(1, 1))
            .heartbeat(o(1, 1))
            .created(1, TaskKind::Job)
            .at(10)
            .grant(1, 1, o(1, 1))
            .at(200)
            .released_by(1, o(1, 1), returned, ReleaseCause::Orphaned)
            .at(at)
            .grant(1, 2, o(1, 1))
            .build()
    }

    #[test]
    fn a_recovered_task_is_granted_no_sooner_than_its_recovery_delay() {
        let spec = crate::testkit::spec_delaying_recovery();
        crate::testkit::run_case_in("when its delay is over", &spec, recovered_then_granted_at(2_200), PASS);
        let early = recovered_then_granted_at(2_199);
        crate::testkit::run_case_in("a millisecond early", &spec, early, &[(NAME, Some(1))]);
        // With no delay promised, at once is on time.
        crate::testkit::run_case("no delay promised", recovered_then_granted_at(200), PASS);
    }

    cases! {
        claim_at_the_promised_time_and_note_kept_pass:
            failed_once().note_sent(o(1, 1), 1, 1, 1_100)
                .at(1_100).retry_planned(o(2, 1), 1, 1, 1_100).grant(1, 2, o(2, 1))
                .build()
            => PASS;
        claimed_before_the_backoff:
            // A claim takes only due tasks, so store-reply objects as well.
            failed_once().at(1_099).grant(1, 2, o(1, 1)).build()
            => &[(NAME, Some(1)), ("store-reply", Some(1))];
        backoff_lost_at_the_store:
            // The store commits the failure time as the retry time; the
            // claim that follows is early by the policy.
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .at(100).finished(1, 1, o(1, 1), false).failed(1, 1, o(1, 1), 1, Some(100)).unpermit(o(1, 1), 1, 1)
                .at(600).grant(1, 2, o(1, 1))
                .build()
            => &[(NAME, Some(1))];
        scheduled_task_claimed_early:
            H::new().up(o(1, 1))
                .created_spec(7, TaskSpec { kind: TaskKind::Job, group: None, stage: None, index: None, not_before_ms: 3_000, queue: None })
                .at(2_000).grant(7, 1, o(1, 1))
                .build()
            => &[(NAME, Some(7)), ("store-reply", Some(7))];
        schedule_lost_on_the_way:
            // The client asked for 3000 ms; the engine sent the enqueue
            // without it, so the row agrees with the early grant and only
            // the application's call tells.
            H::new().up(o(1, 1))
                .created_as(7, job_at(3_000), job_at(0))
                .at(2_000).grant(7, 1, o(1, 1))
                .build()
            => &[(NAME, Some(7))];
        scheduled_task_claimed_on_time_pass:
            H::new().up(o(1, 1))
                .created_as(7, job_at(3_000), job_at(3_000))
                .at(3_000).grant(7, 1, o(1, 1))
                .build()
            => PASS;
        note_carries_the_wrong_retry_time:
            failed_once().note_sent(o(1, 1), 1, 1, 900).build()
            => &[(NAME, Some(1))];
        note_receipt_time_replaces_retry_clock:
            // The receiver restarts the backoff from receipt at 1100.
            failed_once().at(1_100).retry_planned(o(2, 1), 1, 1, 2_100).build()
            => &[(NAME, Some(1))];
    }
}
