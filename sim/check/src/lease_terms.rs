//! lease-terms: a grant or a renewal commits exactly the lease the
//! configuration promises: expiry = commit time + the kind's TTL; a
//! heartbeat-owned kind gets no expiry at all.
//!
//! Judged at the store seam, against the scenario's `lease_ttl` table.

use super::{commit, granted, promise, Checker, Ctx, Violation};
use crate::Kinds;
use leasesim_vocab::history::Record;
use leasesim_vocab::promise::Capabilities;
use leasesim_vocab::task::TaskState;

pub const NAME: &str = "lease-terms";

#[derive(Default)]
pub struct LeaseTerms {
    evaluations: u64,
}

impl Checker for LeaseTerms {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "store seam: a grant or renewal commits expiry = commit time + the kind's lease TTL (none for heartbeat-owned kinds)"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        let Some(commit) = commit(rec) else { return };
        for change in &commit.tasks {
            let after = &change.after;
            if after.state != TaskState::Leased {
                continue;
            }
            let renewed = change.before.as_ref().is_some_and(|b| {
                b.state == TaskState::Leased && b.attempt == after.attempt && b.lease_expiry_ms != after.lease_expiry_ms
            });
            let what = match (granted(change), renewed) {
                (Some(_), _) => "grant",
                (None, true) => "renewal",
                (None, false) => continue,
            };
            self.evaluations += 1;
            let ttl = promise::lease_ttl_ms(ctx.promises(), after.spec.kind);
            let promised = ttl.map(|ttl| now + ttl);
            if after.lease_expiry_ms != promised {
                let show = |e: Option<u64>| e.map_or_else(|| "no expiry".to_string(), |e| format!("{e} ms"));
                let mut v = Violation::new(
                    NAME,
                    now,
                    format!(
                        "t{}: {what} of attempt {} ({}) at {now} ms committed {} but a {} lease promises {}",
                        after.id,
                        after.attempt,
                        after.spec.kind.name(),
                        show(after.lease_expiry_ms),
                        after.spec.kind.name(),
                        show(promised)
                    ),
                )
                .task(after.id)
                .attempt(after.attempt);
                if let Some(owner) = after.owner {
                    v = v.process(owner);
                }
                out.push(v);
            }
        }
    }

    fn reads(&self) -> Kinds {
        Kinds::COMMIT
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }

    fn applies(&self, caps: &Capabilities) -> bool {
        caps.leases
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::testkit::{cases, o, H, PASS};
    use leasesim_vocab::task::TaskKind;

    cases! {
        promised_grant_and_renewal_pass:
            H::new().up(o(1, 1)).created(1, TaskKind::IndexBuild).created(2, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1)).grant(2, 1, o(1, 1))
                .at(3_000).renew(1, 1, o(1, 1))
                .build()
            => PASS;
        grant_with_a_short_lease:
            H::new().up(o(1, 1)).created(1, TaskKind::IndexBuild)
                .at(10).granted(1, 1, o(1, 1), Some(2_010))
                .build()
            => &[(NAME, Some(1))];
        renewal_extends_from_the_old_expiry:
            H::new().up(o(1, 1)).created(1, TaskKind::IndexBuild)
                .at(10).grant(1, 1, o(1, 1))
                .at(3_000).renewed(1, 1, o(1, 1), 10_010)
                .build()
            => &[(NAME, Some(1))];
        heartbeat_owned_task_gets_an_expiry:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).granted(1, 1, o(1, 1), Some(5_010))
                .build()
            => &[(NAME, Some(1))];
    }
}
