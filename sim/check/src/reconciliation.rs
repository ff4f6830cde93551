//! reconciliation: the checkers' own model equals the store. The store never
//! changes outside a request's transaction (the tap finds such drift before
//! each request and at the end), every row it commits is well formed, and
//! at the end of the run the model equals the store's final state, task by
//! task (state, attempt, owner, lease, retries, retry time), stage by stage
//! and index by index.
//!
//! Judged at the store seam, from the rows the harness read itself.

use super::{commit, fact, Checker, Ctx, Violation};
use crate::Kinds;
use leasesim_vocab::history::Record;
use leasesim_vocab::task::{Row, TaskState};
use leasesim_vocab::truth::{Fact, TaskChange};

pub const NAME: &str = "reconciliation";

#[derive(Default)]
pub struct Reconciliation {
    evaluations: u64,
}

/// What is wrong with a committed row, if anything.
fn malformed(change: &TaskChange, ctx: &Ctx) -> Option<String> {
    let t = &change.after;
    if change.before.is_none() {
        if ctx.view.task(t.id).is_some() {
            return Some("created again: the id was already in use".into());
        }
        if t.state != TaskState::Ready || t.attempt != 0 || t.retries != 0 || t.owner.is_some() {
            return Some(format!("created {:?} at attempt {} with {} retries", t.state, t.attempt, t.retries));
        }
    }
    match t.state {
        TaskState::Leased if t.owner.is_none() || t.attempt == 0 => {
            Some(format!("leased with owner {:?} at attempt {}", t.owner, t.attempt))
        }
        TaskState::Leased => None,
        _ if t.owner.is_some() || t.lease_expiry_ms.is_some() => {
            Some(format!("{:?} but still has owner {:?} and lease {:?}", t.state, t.owner, t.lease_expiry_ms))
        }
        _ => None,
    }
}

fn row_line(t: &Row) -> String {
    format!(
        "{:?} attempt {} owner {:?} lease {:?} retries {} retry at {}",
        t.state, t.attempt, t.owner, t.lease_expiry_ms, t.retries, t.retry_at_ms
    )
}

impl Reconciliation {
    fn judge_final(&mut self, now: u64, ctx: &Ctx, f: &Fact, out: &mut Vec<Violation>) {
        let Fact::Final { tasks, stages, materialized } = f else { return };
        for t in tasks {
            self.evaluations += 1;
            let model = ctx.view.task(t.id).map(|v| &v.row);
            if model != Some(t) {
                let model = model.map_or_else(|| "no such task".to_string(), row_line);
                out.push(
                    Violation::new(
                        NAME,
                        now,
                        format!("t{}: the store ends with {} but the model has {model}", t.id, row_line(t)),
                    )
                    .task(t.id),
                );
            }
        }
        for id in ctx.view.tasks.keys().filter(|id| !tasks.iter().any(|t| t.id == **id)) {
            out.push(
                Violation::new(NAME, now, format!("t{id}: in the model but not in the store at the end")).task(*id),
            );
        }
        for (stage, row) in stages {
            self.evaluations += 1;
            if ctx.view.stages.get(stage).map(|s| &s.row) != Some(row) {
                out.push(Violation::new(
                    NAME,
                    now,
                    format!("stage {stage}: the store ends with {row:?}, the model differs"),
                ));
            }
        }
        let model: Vec<u64> = ctx.view.materialized.keys().copied().collect();
        if model != *materialized {
            out.push(Violation::new(
                NAME,
                now,
                format!("materialized indexes: the store ends with {materialized:?}, the model has {model:?}"),
            ));
        }
    }
}

impl Checker for Reconciliation {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "store seam: the store changes only inside requests, commits well-formed rows, and ends equal to the checkers' model"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        if let Some(f @ Fact::Final { .. }) = fact(rec) {
            self.judge_final(now, ctx, f, out);
            return;
        }
        if let Some(Fact::Drift { commit }) = fact(rec) {
            for c in &commit.tasks {
                let before = c.before.as_ref().map_or_else(|| "nothing".to_string(), row_line);
                out.push(
                    Violation::new(
                        NAME,
                        now,
                        format!(
                            "t{}: changed outside any request by {now} ms: {before} -> {}",
                            c.after.id,
                            row_line(&c.after)
                        ),
                    )
                    .task(c.after.id),
                );
            }
            for s in &commit.stages {
                out.push(Violation::new(
                    NAME,
                    now,
                    format!("stage {}: changed outside any request by {now} ms", s.stage),
                ));
            }
        }
        let Some(commit) = commit(rec) else { return };
        for change in &commit.tasks {
            self.evaluations += 1;
            if let Some(problem) = malformed(change, ctx) {
                out.push(
                    Violation::new(NAME, now, format!("t{}: committed at {now} ms: {problem}", change.after.id))
                        .task(change.after.id),
                );
            }
        }
    }

    fn reads(&self) -> Kinds {
        Kinds::FINAL.or(Kinds::COMMIT)
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::testkit::{cases, o, H, PASS};
    use leasesim_vocab::task::{TaskKind, TaskState};
    use leasesim_vocab::truth::{Commit, Fact, TaskChange};

    cases! {
        model_equals_the_store_passes:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job).attempt_ok(10, 1, 1, o(1, 1)).end().build()
            => PASS;
        store_changed_outside_any_request:
            {
                let h = H::new().up(o(1, 1)).created(1, TaskKind::Job);
                let mut after = h.row(1);
                after.retry_at_ms = 5_000;
                let before = Some(h.row(1));
                h.at(10).fact(Fact::Drift { commit: Commit { tasks: vec![TaskChange { before, after }], ..Commit::default() } }).build()
            }
            => &[(NAME, Some(1))];
        store_ends_unlike_the_model:
            {
                let h = H::new().up(o(1, 1)).created(1, TaskKind::Job).at(100).end();
                let mut records = h.build();
                let last = records.last_mut().expect("a final record");
                if let leasesim_vocab::history::Entry::Truth(Fact::Final { tasks, .. }) = &mut last.entry {
                    tasks[0].state = TaskState::Dead;
                }
                records
            }
            => &[(NAME, Some(1))];
        released_task_keeps_its_owner:
            {
                let h = H::new().up(o(1, 1)).up(o(2, 1)).created(1, TaskKind::WorkflowTask).at(10).grant(1, 1, o(1, 1));
                h.at(3_100).answer(
                    leasesim_vocab::truth::Sender::Worker(o(2, 1)),
                    leasesim_vocab::op::Op::ReclaimExpired { by: o(2, 1) },
                    leasesim_vocab::op::Response::Released { tasks: 1 },
                    vec![leasesim_vocab::testimony::Event::LeaseReleased {
                        fence: crate::testkit::fence(1, 1, o(1, 1)),
                        cause: leasesim_vocab::testimony::ReleaseCause::Expired,
                    }],
                    &[(1, &|t: &mut leasesim_vocab::task::Row| { t.state = TaskState::Ready; t.lease_expiry_ms = None; })],
                ).build()
            }
            => &[(NAME, Some(1)), ("store-reply", Some(1))];
    }
}
