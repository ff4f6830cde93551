//! single-owner: at most one unexpired lease per task at any instant.
//!
//! Judged at the store seam: a commit that grants a task to a new attempt
//! while the task's previous holder still had an unexpired lease (or a
//! heartbeat-owned one, which never expires by itself) gave it two owners.

use super::{commit, granted, Checker, Ctx, Violation};
use crate::Kinds;
use leasesim_vocab::history::Record;
use leasesim_vocab::task::TaskState;

pub const NAME: &str = "single-owner";

#[derive(Default)]
pub struct SingleOwner {
    evaluations: u64,
}

impl Checker for SingleOwner {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "store seam: a task is never granted while another attempt holds an unexpired lease on it"
    }

    fn on_record(&mut self, rec: &Record, _ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        let Some(commit) = commit(rec) else { return };
        for change in &commit.tasks {
            let Some(fence) = granted(change) else { continue };
            self.evaluations += 1;
            let Some(before) = change.before.as_ref().filter(|b| b.state == TaskState::Leased) else {
                continue;
            };
            let lease = match before.lease_expiry_ms {
                Some(e) if e <= now => continue,
                Some(e) => format!("a lease until {e} ms"),
                None => "a heartbeat-owned lease".to_string(),
            };
            let holder = before.owner.map_or_else(|| "?".to_string(), |o| o.to_string());
            out.push(
                Violation::new(
                    NAME,
                    now,
                    format!(
                        "t{}: attempt {} granted to {} at {now} ms while attempt {} ({holder}) holds {lease}",
                        fence.task, fence.attempt, fence.owner, before.attempt
                    ),
                )
                .fence(&fence),
            );
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
    use crate::testkit::{cases, o, H};
    use leasesim_vocab::task::TaskKind;

    cases! {
        regrant_after_expiry_passes:
            // Expired at 3010 but never released: a direct regrant is still one
            // owner (a claim takes only ready tasks, so store-reply objects).
            H::new().up(o(1, 1)).up(o(2, 1)).created(1, TaskKind::WorkflowTask)
                .at(10).grant(1, 1, o(1, 1))
                .at(3_010).grant(1, 2, o(2, 1))
                .build()
            => &[("store-reply", Some(1))];
        grant_over_an_unexpired_lease:
            H::new().up(o(1, 1)).up(o(2, 1)).created(1, TaskKind::WorkflowTask)
                .at(10).grant(1, 1, o(1, 1))
                .at(500).grant(1, 2, o(2, 1))
                .build()
            => &[(NAME, Some(1)), ("lease-revocation", Some(1)), ("store-reply", Some(1))];
        grant_over_a_renewed_lease:
            H::new().up(o(1, 1)).up(o(2, 1)).created(2, TaskKind::WorkflowTask)
                .at(10).grant(2, 1, o(1, 1))
                .at(2_000).renew(2, 1, o(1, 1))
                .at(3_500).grant(2, 2, o(2, 1))
                .build()
            => &[(NAME, Some(2)), ("lease-revocation", Some(2)), ("store-reply", Some(2))];
        grant_over_a_heartbeat_owned_lease:
            H::new().up(o(1, 1)).up(o(2, 1)).heartbeat(o(1, 1)).created(3, TaskKind::Job)
                .at(10).grant(3, 1, o(1, 1))
                .at(9_000).heartbeat(o(1, 1)).grant(3, 2, o(2, 1))
                .build()
            => &[(NAME, Some(3)), ("lease-revocation", Some(3)), ("store-reply", Some(3))];
    }
}
