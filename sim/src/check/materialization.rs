//! materialization (liveness): every index build enqueued before heal
//! materializes its index within the bound after heal. And (safety) once an
//! index is materialized, no query is answered "not materialized".

use super::{Checker, Ctx, Violation};
use crate::history::{Entry, Record};
use leasesim::event::Event;
use leasesim::ids::{IndexId, TaskId};
use leasesim::task::TaskKind;
use std::collections::{BTreeMap, BTreeSet};

pub const NAME: &str = "materialization";

#[derive(Default)]
pub struct Materialization {
    /// Per index: its first build task and when it was created.
    builds: BTreeMap<IndexId, (TaskId, u64)>,
    /// Indexes already judged against the bound.
    judged: BTreeSet<IndexId>,
    evaluations: u64,
}

impl Materialization {
    /// Judges every index whose build was created before `heal` (once `now` is
    /// past `heal + bound`).
    fn judge(&mut self, now: u64, heal: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        let bound = ctx.scenario.bounds.materialize_bound_ms;
        let deadline = heal + bound;
        if now <= deadline {
            return;
        }
        for (&index, &(task, created_ms)) in &self.builds {
            if created_ms >= heal || !self.judged.insert(index) {
                continue;
            }
            self.evaluations += 1;
            if !ctx.view.materialized.contains_key(&index) {
                out.push(
                    Violation::new(
                        NAME,
                        now,
                        format!(
                            "index {index} (built by t{task}, enqueued at {created_ms} ms) is not materialized \
                             at {now} ms, past heal {heal} ms + {bound} ms"
                        ),
                    )
                    .task(task),
                );
            }
        }
    }
}

impl Checker for Materialization {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        if let Some(heal) = ctx.view.heal_ms {
            self.judge(now, heal, ctx, out);
        }
        match &rec.entry {
            Entry::Engine(Event::TaskCreated { task, spec, .. }) => {
                if let (TaskKind::IndexBuild, Some(index)) = (spec.kind, spec.index) {
                    self.builds.entry(index).or_insert((*task, now));
                }
            }
            Entry::Engine(Event::QueryAnswered { index, materialized, .. }) => {
                self.evaluations += 1;
                if let (false, Some(&(at, by))) = (*materialized, ctx.view.materialized.get(index)) {
                    out.push(
                        Violation::new(
                            NAME,
                            now,
                            format!("index {index}: query answered 'not materialized' at {now} ms, after t{by} materialized it at {at} ms"),
                        )
                        .task(by),
                    );
                }
            }
            _ => {}
        }
    }

    fn finish(&mut self, end_ms: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        self.evaluations += 1;
        self.judge(end_ms, ctx.view.heal_or(end_ms), ctx, out);
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::check::testkit::{cases, o, Pass, Violates, H};

    cases! {
        index_materializes_after_heal_passes:
            H::new().up(o(1, 1)).created_index(1, 7)
                .at(100).answered(7, false)
                .at(1_000).heal()
                .attempt_ok(2_000, 1, 1, o(1, 1)).materialized(7, 1)
                .at(2_200).answered(7, true)
                .at(20_000).end().build()
            => Pass;
        index_never_materializes:
            H::new().up(o(1, 1)).created_index(1, 7)
                .at(10).granted(1, 1, o(1, 1), Some(600_000)).permit(o(1, 1), 1, 1)
                .at(1_000).heal()
                .at(4_001).end().build()
            => Violates(NAME, Some(1));
        index_materializes_too_late:
            // Claimed before heal, but its build ends past heal + 3000 ms.
            H::new().up(o(1, 1)).created_index(2, 8)
                .at(10).granted(2, 1, o(1, 1), Some(600_000)).permit(o(1, 1), 2, 1)
                .at(1_000).heal()
                .at(4_001).finished(2, 1, o(1, 1), true).completed(2, 1, o(1, 1)).materialized(8, 2)
                .build()
            => Violates(NAME, Some(2));
        stale_not_materialized_answer:
            H::new().up(o(1, 1)).created_index(3, 9)
                .attempt_ok(10, 3, 1, o(1, 1)).materialized(9, 3)
                .at(500).answered(9, false)
                .build()
            => Violates(NAME, Some(3));
    }
}
