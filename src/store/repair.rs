//! Group repair: reclaim expired leases of workflow runs and pipelines.
//!
//! Repair judges a group by every open task in it: an expired lease anywhere
//! makes repair needed, and only the expired tasks are reclaimed; tasks whose
//! leases are healthy are left untouched (owner, attempt, lease).

use super::{RepairState, Store};
use crate::defects::Defect;
use crate::event::{Event, Observer, ReleaseCause};
use crate::ids::{GroupId, TaskId};
use crate::proto::Response;
use crate::task::Task;
use std::collections::BTreeMap;

impl Store {
    pub(super) fn repair_groups(&mut self, now_ms: u64, obs: &dyn Observer) -> Response {
        let mut leased: BTreeMap<GroupId, Vec<&Task>> = BTreeMap::new();
        // Rows a transaction holds are skipped (SKIP LOCKED) until it ends,
        // but their expiries (read without the lock) still bound the
        // group's next look: once the lock goes, an expired lease must not
        // wait out a backoff computed without it.
        let mut locked_expiry: BTreeMap<GroupId, u64> = BTreeMap::new();
        for task in self.tasks.leased() {
            if let (Some(group), Some(expiry)) = (task.spec.group, task.lease_expiry_ms) {
                if self.locked(task.id) {
                    let earliest = locked_expiry.entry(group).or_insert(expiry);
                    *earliest = (*earliest).min(expiry);
                } else {
                    leased.entry(group).or_default().push(task);
                }
            }
        }
        let mut decisions: Vec<(GroupId, Vec<TaskId>, u64)> = Vec::new();
        for (group, tasks) in leased {
            let state = self.repair.get(&group).cloned().unwrap_or_default();
            if now_ms < state.next_at_ms {
                continue;
            }
            let next_expiry_ms = tasks.iter().filter_map(|t| t.lease_expiry_ms).filter(|&e| e > now_ms).min();
            // A locked row's lease already out: look again at the next pass.
            let locked_ms = locked_expiry.get(&group).map(|&e| e.max(now_ms));
            let next_expiry_ms = next_expiry_ms.into_iter().chain(locked_ms).min();
            let hide = self.cfg.defects.on(Defect::RepairHidesExpiredLease);
            decisions.push((group, expired_tasks(&tasks, now_ms, hide), next_expiry_ms.unwrap_or(u64::MAX)));
        }
        let mut reclaimed_total = 0;
        for (group, expired, next_expiry_ms) in decisions {
            let needed = !expired.is_empty();
            for id in &expired {
                self.release(now_ms, *id, ReleaseCause::Repair, obs);
            }
            reclaimed_total += expired.len() as u32;
            let state = self.repair.entry(group).or_default();
            if needed {
                *state = RepairState { misses: 0, next_at_ms: now_ms };
            } else {
                state.misses += 1;
                // Back off, but look again no later than the next lease expiry:
                // a lease that expires must not wait out a long backoff.
                state.next_at_ms = (now_ms + self.cfg.repair_backoff_ms(state.misses)).min(next_expiry_ms);
            }
            tracing::debug!(group, needed, reclaimed = ?expired, "store: repair decision");
            obs.emit(Event::RepairDecision { group, needed, reclaimed: expired });
        }
        Response::Released { tasks: reclaimed_total }
    }
}

/// The run summary used by repair: every leased task whose lease has expired.
fn expired_tasks(leased: &[&Task], now_ms: u64, oldest_only: bool) -> Vec<TaskId> {
    if oldest_only {
        // C2: the summary picks the oldest leased task (a healthy activity,
        // say) and judges the whole run by it.
        let oldest = leased.iter().min_by_key(|t| (t.updated_ms, t.id));
        return oldest
            .filter(|t| t.lease_expiry_ms.is_some_and(|e| e <= now_ms))
            .map(|t| vec![t.id])
            .unwrap_or_default();
    }
    leased.iter().filter(|t| t.lease_expiry_ms.is_some_and(|e| e <= now_ms)).map(|t| t.id).collect()
}
