//! store-reply: what the store tells a caller is what its transaction did,
//! and the transaction does only what the request asks for.
//!
//! Judged at the store seam, answer by answer: the request as it arrived, the
//! answer the store gave, and the rows the harness read before and after.
//! A claim grants at most what was asked and reports every grant it made; a
//! fenced write reports "applied" exactly when it changed its task, and is
//! refused only when its fence no longer holds (or, for a lock wait given
//! up, when another open transaction holds its row); reads change nothing and
//! tell the truth (lease checks, pipeline snapshots); recovery passes only
//! release; an enqueue creates exactly the task it names.

use super::view::{held_by, TaskView};
use super::{answer, Answer, Checker, Ctx, Violation};
use crate::Kinds;
use leasesim_vocab::history::Record;
use leasesim_vocab::ids::{Fence, Owner, StageRef, TaskId};
use leasesim_vocab::op::{Grant, Op, Refusal, Response};
use leasesim_vocab::promise::ClaimOrder;
use leasesim_vocab::task::{Row, TaskKind, TaskSpec, TaskState};
use leasesim_vocab::truth::{Commit, TaskChange};

pub const NAME: &str = "store-reply";

#[derive(Default)]
pub struct StoreReply {
    evaluations: u64,
}

fn is_release(c: &TaskChange) -> bool {
    c.before.as_ref().is_some_and(|b| {
        b.state == TaskState::Leased
            && c.after.state == TaskState::Ready
            && c.after.owner.is_none()
            && b.attempt == c.after.attempt
            && b.retries == c.after.retries
    })
}

/// A claim may take a ready task, or one whose lease had expired.
fn is_grant_to(c: &TaskChange, owner: leasesim_vocab::ids::Owner, now: u64) -> bool {
    let takeable = |b: &leasesim_vocab::task::Row| {
        b.state == TaskState::Ready || (b.state == TaskState::Leased && b.lease_expiry_ms.is_some_and(|e| e <= now))
    };
    c.before.as_ref().is_some_and(takeable) && c.after.state == TaskState::Leased && c.after.owner == Some(owner)
}

/// The stages due in the view: not done, no task, previous stage done.
fn due_stages(ctx: &Ctx) -> Vec<StageRef> {
    let stages = &ctx.view.stages;
    stages
        .iter()
        .filter(|(stage, s)| {
            let previous_done = stage.index == 0
                || stages
                    .get(&StageRef { pipeline: stage.pipeline, index: stage.index - 1 })
                    .is_some_and(|p| p.done.is_some());
            !s.row.done && s.row.task.is_none() && previous_done
        })
        .map(|(stage, _)| *stage)
        .collect()
}

/// A statement refused by its lock wait (SQLSTATE 55P03, `lock_timeout`)
/// on a row another transaction, open by the view, still holds: the refusal
/// says nothing of its fence. (A 55P03 on a row nobody else holds is still
/// judged as a refusal while held.)
fn lock_wait_given_up(a: &Answer, ctx: &Ctx, now: u64) -> bool {
    let Response::Rejected { reason: Refusal::LockTimeout } = a.response else { return false };
    let Some(task) = a.request.request.fence().map(|f| f.task) else { return false };
    let own = a.request.txn.map(|(txn, _)| txn);
    ctx.view.txns.iter().any(|(id, t)| {
        Some(*id) != own
            && t.locks.contains(&task)
            && t.in_time(now, ctx.view.txn_timeout_ms)
            && !ctx.view.disconnected(id.owner)
    })
}

/// What is wrong with this answer, if anything.
fn judge(a: &Answer, ctx: &Ctx, now: u64) -> Option<String> {
    let j = Judge { a, ctx, now, c: a.commit, resp: a.response };
    // A transaction's statements, rollbacks, and requests that gave up on
    // a row lock: what they may say is judged by `transactions`; here, that
    // nothing uncommitted shows.
    let lock_or_txn = matches!(a.response, Response::Rejected { reason: Refusal::TimedOut | Refusal::TxnClosed })
        || lock_wait_given_up(a, ctx, now);
    let uncommitted = matches!(a.request.txn, Some((_, false)));
    if lock_or_txn || uncommitted {
        if !j.c.is_empty() {
            return Some(format!("{} that did not commit changed the store", a.request.request.op_name()));
        }
        if lock_or_txn || matches!(a.request.request, Op::Rollback { .. }) {
            return None;
        }
        // A statement on a row its own transaction already wrote sees that
        // write, which the view (committed rows only) does not show.
        let own = a.request.txn.and_then(|(txn, _)| ctx.view.txns.get(&txn));
        let fence = a.request.request.fence();
        if fence.is_some_and(|f| own.is_some_and(|t| t.locks.contains(&f.task))) {
            return None;
        }
    }
    // A request whose code the store did not have ran nothing, whatever it
    // would have done (Redis's NOSCRIPT; apalis loads the script and sends
    // the request again).
    if let Response::Rejected { reason: Refusal::NotLoaded } = a.response {
        return (!j.c.is_empty())
            .then(|| format!("{} refused as not loaded changed the store", a.request.request.op_name()));
    }
    match &a.request.request {
        Op::Heartbeat { .. } | Op::QueryIndex { .. } | Op::Other { .. } | Op::Deregister { .. } if !j.c.is_empty() => {
            Some("a read changed the store".into())
        }
        Op::LeaseValid { fence } => j.lease_valid(fence),
        Op::PipelineSnapshot { .. } => j.snapshot(),
        Op::Claim { owner, max, .. } => j.claim(*owner, *max),
        Op::Renew { fence } => j.renew(fence),
        Op::Complete { fence } | Op::Fail { fence, .. } | Op::ClearStageLink { fence } => j.outcome_write(fence),
        Op::Enqueue { spec, key } => j.enqueue(spec, *key),
        Op::EnqueueStage { stage } => j.enqueue_stage(*stage),
        Op::ReleaseDead { .. }
        | Op::ReclaimExpired { .. }
        | Op::Repair { .. }
        | Op::ReleaseOrphans { .. }
        | Op::ReleaseOwners { .. }
        | Op::ReturnOwn { .. } => j.recovery(),
        Op::CreatePipeline { pipeline, stages } => j.create_pipeline(*pipeline, *stages),
        Op::Maintain { .. } => j.maintain(),
        Op::Heartbeat { .. } | Op::QueryIndex { .. } | Op::Other { .. } | Op::Deregister { .. } => None,
        Op::Rollback { .. } | Op::Commit { .. } => None,
        Op::Exec { .. } => Some("a statement inside a statement".into()),
    }
}

/// One answer being judged: the request, the answer, its commit, the view.
struct Judge<'a> {
    a: &'a Answer<'a>,
    ctx: &'a Ctx<'a>,
    now: u64,
    c: &'a Commit,
    resp: &'a Response,
}

impl Judge<'_> {
    /// The task's row before the request: from its commit, else the view.
    fn row_before(&self, fence: &Fence) -> Option<Row> {
        match self.c.task(fence.task).and_then(|ch| ch.before.clone()) {
            Some(row) => Some(row),
            None => self.ctx.view.task(fence.task).map(|t| t.row.clone()),
        }
    }

    fn changed(&self, fence: &Fence) -> bool {
        self.c.task(fence.task).is_some()
    }

    fn lease_valid(&self, fence: &Fence) -> Option<String> {
        let row = self.row_before(fence)?;
        let valid = held_by(&row, fence) && row.lease_expiry_ms.is_none_or(|e| e > self.now);
        match self.resp {
            _ if !self.c.is_empty() => Some("a lease check changed the store".into()),
            Response::Valid { valid: v } if *v != valid => Some(format!(
                "lease check of {fence} answered valid={v}, but the lease is {}",
                if valid { "valid" } else { "not valid" }
            )),
            _ => None,
        }
    }

    fn snapshot(&self) -> Option<String> {
        match self.resp {
            _ if !self.c.is_empty() => Some("a snapshot changed the store".into()),
            Response::Snapshot { due } if *due != due_stages(self.ctx) => {
                Some(format!("snapshot answered due stages {due:?}; due were {:?}", due_stages(self.ctx)))
            }
            _ => None,
        }
    }

    fn claim(&self, owner: Owner, max: u32) -> Option<String> {
        let (c, resp) = (self.c, self.resp);
        let grants = match resp {
            Response::Claimed { grants } => grants,
            // A store may refuse a claim outright (apalis's fetch script
            // errors for a worker whose registration another worker's
            // recovery removed): nothing granted, nothing may change.
            Response::Rejected { .. } if c.is_empty() => return None,
            Response::Rejected { .. } => return Some(format!("a refused claim by {owner} changed the store")),
            _ => return Some(format!("a claim answered {resp:?}")),
        };
        if grants.len() as u32 > max {
            return Some(format!("a claim for at most {max} answered {} grants", grants.len()));
        }
        if let Some(ch) = c.tasks.iter().find(|ch| !is_grant_to(ch, owner, self.now)) {
            return Some(format!("a claim by {owner} changed t{} without granting it to {owner}", ch.after.id));
        }
        let committed: Vec<Grant> = c
            .tasks
            .iter()
            .map(|ch| Grant {
                fence: Fence { task: ch.after.id, attempt: ch.after.attempt, owner },
                kind: ch.after.spec.kind,
                lease_expiry_ms: ch.after.lease_expiry_ms,
            })
            .collect();
        let mut told = grants.clone();
        told.sort_by_key(|g| g.fence);
        let mut done = committed.clone();
        done.sort_by_key(|g| g.fence);
        if told != done {
            return Some(format!("a claim answered grants {told:?} but committed {done:?}"));
        }
        // An incarnation that deregistered is granted nothing more (a claim
        // it sent before, late on the way or held open).
        if grants.is_empty() && self.ctx.view.owner(owner).is_some_and(|o| o.deregistered_ms.is_some()) {
            return None;
        }
        self.claim_order(max)
    }

    /// A claim takes the due ready tasks in (retry time, id) order, as many
    /// as asked for or as are due: no task is passed over for a later one,
    /// and none is left behind while the claim had room.
    fn claim_order(&self, max: u32) -> Option<String> {
        let view = &self.ctx.view;
        // A task in a named queue another task holds is not claimable now,
        // nor a row an open transaction locked (claims skip locked rows).
        let mut due: Vec<(u64, TaskId)> = view
            .ready
            .iter()
            .filter_map(|&id| view.task(id).map(|t| &t.row))
            .filter(|row| row.state == TaskState::Ready && row.retry_at_ms <= self.now && !view.queue_held(row))
            .filter(|row| !view.locked_at(row.id, self.now))
            .map(|row| (row.retry_at_ms, row.id))
            .collect();
        due.sort_unstable();
        let mut granted: Vec<TaskId> = self.c.tasks.iter().map(|ch| ch.after.id).collect();
        granted.sort_unstable();
        let ok = match self.ctx.promises().claim_order {
            ClaimOrder::DueThenId => {
                let mut expected: Vec<TaskId> = due.iter().take(max as usize).map(|&(_, id)| id).collect();
                expected.sort_unstable();
                granted == expected
            }
            ClaimOrder::Due => self.due_order_kept(&due, &granted, max),
            ClaimOrder::Any => granted.iter().all(|id| due.iter().any(|(_, d)| d == id)),
        };
        (!ok).then(|| {
            let first: Vec<String> = due.iter().take(max as usize + 2).map(|(at, id)| format!("t{id}@{at}")).collect();
            format!(
                "a claim for at most {max} at {} ms granted {granted:?}, but the first due tasks by (retry time, id) were [{}] ({} due)",
                self.now,
                first.join(", "),
                due.len()
            )
        })
    }

    /// Under [`ClaimOrder::Due`]: as many as asked for or as are due, every
    /// granted task due, and none passed over for one due later (ties by
    /// due time in any order).
    fn due_order_kept(&self, due: &[(u64, TaskId)], granted: &[TaskId], max: u32) -> bool {
        let want = due.len().min(max as usize);
        let at = |id: &TaskId| due.iter().find(|(_, d)| d == id).map(|(at, _)| *at);
        let Some(latest) = granted.iter().map(at).collect::<Option<Vec<u64>>>().map(|a| a.into_iter().max()) else {
            return false;
        };
        let passed_over = latest.is_some_and(|l| due.iter().any(|(at, id)| *at < l && !granted.contains(id)));
        granted.len() == want && !passed_over
    }

    fn renew(&self, fence: &Fence) -> Option<String> {
        let held = self.row_before(fence).is_some_and(|r| held_by(&r, fence));
        match self.resp {
            Response::Renewed { lease_expiry_ms } => {
                let after = self.c.task(fence.task).map(|ch| ch.after.lease_expiry_ms);
                let heartbeat_owned = self.row_before(fence).is_some_and(|r| r.lease_expiry_ms.is_none());
                let unchanged = self.row_before(fence).and_then(|r| r.lease_expiry_ms) == Some(*lease_expiry_ms);
                match after {
                    Some(Some(e)) if e == *lease_expiry_ms && held => None,
                    // Renewed twice in one instant: the second changes nothing.
                    None if (heartbeat_owned || unchanged) && held => None,
                    _ => Some(format!("renewal of {fence} answered expiry {lease_expiry_ms} ms; committed {after:?}")),
                }
            }
            Response::Rejected { reason } if held => {
                Some(format!("renewal of {fence} refused ({reason:?}) while it held the task"))
            }
            Response::Rejected { .. } if self.changed(fence) => {
                Some(format!("refused renewal of {fence} changed the task"))
            }
            _ => None,
        }
    }

    /// A complete, a fail or a stage-link clear.
    fn outcome_write(&self, fence: &Fence) -> Option<String> {
        let request = &self.a.request.request;
        let held = self.row_before(fence).is_some_and(|r| held_by(&r, fence));
        let what = request.op_name();
        match self.resp {
            Response::Applied { retries, retry_at_ms } => {
                let stage_write = matches!(request, Op::ClearStageLink { .. });
                // A completion's own retry is answered "applied" again.
                let again = matches!(request, Op::Complete { .. })
                    && self.ctx.view.completed_by.get(&fence.task) == Some(fence);
                let Some(ch) = self.c.task(fence.task) else {
                    return (!stage_write && !again)
                        .then(|| format!("{what} of {fence} answered applied but changed nothing"));
                };
                let committed_at = (ch.after.state == TaskState::Ready).then_some(ch.after.retry_at_ms);
                let fail = matches!(request, Op::Fail { .. });
                if *retries != ch.after.retries || (fail && *retry_at_ms != committed_at) {
                    return Some(format!(
                        "{what} of {fence} answered retries {retries}, retry at {retry_at_ms:?}; committed {}, {committed_at:?}",
                        ch.after.retries
                    ));
                }
                None
            }
            Response::Rejected { reason } if held => {
                Some(format!("{what} of {fence} refused ({reason:?}) while it held the task"))
            }
            Response::Rejected { .. } if !self.c.is_empty() => {
                Some(format!("refused {what} of {fence} changed the store"))
            }
            _ => None,
        }
    }

    fn enqueue(&self, spec: &TaskSpec, key: Option<u64>) -> Option<String> {
        let c = self.c;
        let created: Vec<&TaskChange> = c.tasks.iter().filter(|ch| ch.before.is_none()).collect();
        let known = key.and_then(|k| self.ctx.view.enqueue_keys.get(&k)).copied();
        match self.resp {
            // A key seen before: nothing created, its task answered.
            Response::Enqueued { task } if known.is_some() => (known != Some(*task) || !c.is_empty())
                .then(|| format!("an enqueue with a known key answered t{task}; the key created {known:?}")),
            Response::Enqueued { task } => match created.as_slice() {
                [one] if one.after.id == *task && one.after.spec == *spec && c.tasks.len() == 1 => None,
                _ => Some(format!("enqueue answered t{task}; committed {} rows", c.tasks.len())),
            },
            _ if !c.is_empty() => Some(format!("a refused enqueue changed the store ({:?})", self.resp)),
            _ => None,
        }
    }

    fn enqueue_stage(&self, stage: StageRef) -> Option<String> {
        let c = self.c;
        match self.resp {
            Response::Enqueued { task } => {
                let ok = c.tasks.len() == 1
                    && c.tasks[0].before.is_none()
                    && c.tasks[0].after.id == *task
                    && c.tasks[0].after.spec.kind == TaskKind::Stage
                    && c.tasks[0].after.spec.stage == Some(stage);
                (!ok).then(|| format!("stage enqueue of {stage} answered t{task}; committed {} rows", c.tasks.len()))
            }
            _ if !c.is_empty() => Some(format!("a refused stage enqueue of {stage} changed the store")),
            _ => None,
        }
    }

    /// Release-dead, reclaim-expired, repair and release-orphans.
    fn recovery(&self) -> Option<String> {
        let (c, resp, request) = (self.c, self.resp, &self.a.request.request);
        // A pass inside a transaction that spans round trips: what it
        // released shows at its COMMIT, not in this answer's commit.
        if matches!(self.a.request.txn, Some((_, false))) {
            return None;
        }
        // A release named by its owners may answer without a count (a
        // statement that returns nothing); every other pass counts.
        let named = matches!(request, Op::ReleaseOwners { .. } | Op::ReturnOwn { .. });
        let claimed = match resp {
            Response::Released { tasks } => Some(*tasks),
            Response::Ack | Response::Rows { .. } if named => None,
            _ => return Some(format!("a recovery pass answered {resp:?}")),
        };
        if let Some(ch) = c.tasks.iter().find(|ch| !is_release(ch)) {
            return Some(format!("{} changed t{} without releasing it", request.op_name(), ch.after.id));
        }
        let holder = |ch: &TaskChange| ch.before.as_ref().and_then(|b| b.owner);
        match request {
            Op::ReleaseOrphans { owner, .. } | Op::ReturnOwn { owner, .. } => {
                if let Some(ch) = c.tasks.iter().find(|ch| holder(ch) != Some(*owner)) {
                    return Some(format!("release of {owner}'s own tasks released t{}, not {owner}'s", ch.after.id));
                }
            }
            Op::ReleaseOwners { owners, .. } => {
                let by_process = self.ctx.promises().releases_by_process;
                let named = |h: Owner| owners.iter().any(|o| *o == h || (by_process && o.proc == h.proc));
                if let Some(ch) = c.tasks.iter().find(|ch| holder(ch).is_none_or(|h| !named(h))) {
                    return Some(format!("a release of {owners:?}'s tasks released t{}", ch.after.id));
                }
            }
            _ => {}
        }
        if let Some(tasks) = claimed.filter(|&n| n as usize != c.tasks.len()) {
            return Some(format!("{} answered {tasks} released, committed {}", request.op_name(), c.tasks.len()));
        }
        match request {
            Op::ReclaimExpired { .. } => self.reclaimed_every_expired_lease(false),
            Op::Repair { .. } => self.reclaimed_every_expired_lease(true),
            Op::ReleaseDead { .. } => self.released_every_replaced_owner(),
            _ => None,
        }
    }

    /// Release-dead releases every task owned by heartbeat whose owner's
    /// process the store has seen restarted (a newer incarnation), except
    /// rows an open transaction holds. (Owners silent for `dead_after_ms`
    /// are dead too; their exact moment depends on when the store applied
    /// their last heartbeat, so only replaced owners are judged here.)
    fn released_every_replaced_owner(&self) -> Option<String> {
        let view = &self.ctx.view;
        let left = view.leased.iter().copied().find(|&id| {
            let replaced = view
                .task(id)
                .is_some_and(|t| t.row.lease_expiry_ms.is_none() && t.row.owner.is_some_and(|o| view.superseded(o)));
            replaced && self.c.task(id).is_none() && !view.locked_at(id, self.now)
        })?;
        Some(format!("release-dead left t{left} with its replaced owner ({})", view.task(left)?.holder()))
    }

    /// A reclaim releases every expired lease outside a group, a repair pass
    /// every expired lease inside one (`grouped`), except rows an open
    /// transaction holds (they skip those). Repair backs off per group, but
    /// never past a lease's expiry (a grant into the group looks again at
    /// once): a pass that runs after an expiry reclaims that lease.
    ///
    /// Except a lease whose row a transaction locked since its grant: a
    /// pass that skipped the locked row backed its group off without it,
    /// and the built-in engine does not look again when the lock goes (a
    /// wait of up to the backoff cap, left to expired-lease-recovery's
    /// bound after the heal; see docs/design.md).
    fn reclaimed_every_expired_lease(&self, grouped: bool) -> Option<String> {
        let view = &self.ctx.view;
        let locked_since_grant = |t: &TaskView| {
            let granted_ms = t
                .row
                .owner
                .and_then(|owner| view.grants.get(&Fence { task: t.row.id, attempt: t.row.attempt, owner }).copied());
            grouped && t.locked_ms.is_some_and(|l| granted_ms.is_none_or(|g| l >= g))
        };
        let left = view.leased.iter().copied().find(|&id| {
            let expired = view.task(id).is_some_and(|t| {
                t.row.spec.group.is_some() == grouped
                    && t.row.lease_expiry_ms.is_some_and(|e| e <= self.now)
                    && !locked_since_grant(t)
            });
            expired && self.c.task(id).is_none() && !view.locked_at(id, self.now)
        })?;
        let pass = if grouped { "repair" } else { "reclaim-expired" };
        Some(format!("{pass} left t{left}'s expired lease in place ({})", view.task(left)?.holder()))
    }

    fn create_pipeline(&self, pipeline: u64, stages: u32) -> Option<String> {
        let c = self.c;
        let stray = c.stages.iter().find(|s| s.stage.pipeline != pipeline || s.stage.index >= stages);
        match stray {
            _ if !c.tasks.is_empty() => Some("creating a pipeline changed task rows".into()),
            Some(s) => Some(format!("creating pipeline {pipeline} changed stage {}", s.stage)),
            None => None,
        }
    }

    fn maintain(&self) -> Option<String> {
        let c = self.c;
        (!c.tasks.is_empty() || !c.stages.is_empty()).then(|| {
            format!(
                "a maintenance pass changed rows it does not own (tasks {}, stages {})",
                c.tasks.len(),
                c.stages.len()
            )
        })
    }
}

impl Checker for StoreReply {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "store seam: every answer matches what its transaction committed, a transaction changes only what its request asks for, and a claim takes the due tasks in (retry time, id) order, as many as it has room for; a reclaim or repair pass takes back every expired lease it may see"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        let Some(a) = answer(rec, ctx) else { return };
        self.evaluations += 1;
        if let Some(problem) = judge(&a, ctx, now) {
            let mut v = Violation::new(
                NAME,
                now,
                format!(
                    "request {} ({} from {}) at {now} ms: {problem}",
                    a.req,
                    a.request.request.op_name(),
                    a.request.from
                ),
            );
            let fenced = match &a.request.request {
                Op::Renew { fence }
                | Op::LeaseValid { fence }
                | Op::Complete { fence }
                | Op::Fail { fence, .. }
                | Op::ClearStageLink { fence } => Some(fence.task),
                _ => None,
            };
            if let Some(task) = fenced.or_else(|| a.commit.tasks.first().map(|c| c.after.id)) {
                v = v.task(task);
            }
            out.push(v);
        }
    }

    fn reads(&self) -> Kinds {
        Kinds::ANSWERED
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::testkit::{cases, fence, o, H, PASS};
    use leasesim_vocab::ids::StageRef;
    use leasesim_vocab::op::{Grant, Op, Refusal, Response};
    use leasesim_vocab::task::{Row, TaskKind, TaskState};
    use leasesim_vocab::testimony::{Event, ReleaseCause};
    use leasesim_vocab::truth::Sender;

    /// t1 (a job) is run by p1.1 from 10 ms; its body succeeds at 110 ms.
    /// At 200 ms p2.1's recovery transaction releases p1.1's jobs (p1.1
    /// looks dead to it) and locks t1's row when `recovery` is given: its
    /// COMMIT never comes (lost). At 1_000 ms p1.1's completion, which
    /// waited for that row lock since 300 ms, gives up (55P03), and p1.1
    /// frees the attempt's permit.
    fn completion_behind_a_recovery(recovery: bool) -> H {
        let h = H::new().up(o(1, 1)).up(o(2, 1)).heartbeat(o(1, 1)).heartbeat(o(2, 1)).created(1, TaskKind::Job);
        let h = h.attempt_body(10, 1, 1, o(1, 1), true).at(200);
        let h = if recovery {
            let txn = leasesim_vocab::ids::TxnId { owner: o(2, 1), seq: 1 };
            let stmt = Box::new(Op::ReleaseOwners { by: o(2, 1), owners: vec![o(1, 1)] });
            h.answer(
                Sender::Worker(o(2, 1)),
                Op::Exec { txn, stmt, commit: false },
                Response::Released { tasks: 1 },
                vec![],
                &[],
            )
        } else {
            h
        };
        h.at(1_000)
            .answer(
                Sender::Worker(o(1, 1)),
                Op::Complete { fence: fence(1, 1, o(1, 1)) },
                Response::Rejected { reason: Refusal::LockTimeout },
                vec![],
                &[],
            )
            .unpermit(o(1, 1), 1, 1)
    }

    /// p2.1's release names p1.1; the task it frees is held by p1.2 (killed
    /// at 50 ms, so `lease-revocation` has its reason either way).
    fn release_naming_an_older_incarnation(by_process: bool) -> crate::Report {
        let mut spec = crate::testkit::spec();
        spec.promises.releases_by_process = by_process;
        let history = H::new()
            .up(o(1, 2))
            .up(o(2, 1))
            .heartbeat(o(1, 2))
            .created(1, TaskKind::Job)
            .at(10)
            .grant(1, 1, o(1, 2))
            .at(50)
            .killed(o(1, 2))
            .at(60)
            .released_by(1, o(2, 1), Op::ReleaseOwners { by: o(2, 1), owners: vec![o(1, 1)] }, ReleaseCause::DeadOwner)
            .build();
        let expect: crate::testkit::Expect = if by_process { PASS } else { &[(NAME, Some(1))] };
        crate::testkit::run_case_in(&format!("release by process: {by_process}"), &spec, history, expect)
    }

    #[test]
    fn a_release_by_worker_name_frees_any_run_of_its_process() {
        // apalis-recovery seed 734877815983: a re-enqueue held at the store
        // ran after the name's next run (p2.10) had fetched.
        release_naming_an_older_incarnation(true);
        // An engine whose release names incarnations may not free another's.
        release_naming_an_older_incarnation(false);
    }

    /// An engine that fetches the head of a list (apalis): no order among
    /// due tasks is promised.
    fn any_order() -> crate::Spec {
        let mut s = crate::testkit::spec();
        s.promises.claim_order = leasesim_vocab::promise::ClaimOrder::Any;
        s
    }

    #[test]
    fn under_any_order_a_claim_may_pass_over_an_earlier_due_task() {
        // t1 and t2 both due since 0; the claim for one takes t2.
        let h = H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job).created(2, TaskKind::Job);
        let history = h.at(10).grant(2, 1, o(1, 1)).build();
        crate::testkit::run_case_in("any order, t2 first", &any_order(), history, PASS);
    }

    #[test]
    fn under_any_order_a_claim_may_not_take_a_task_not_yet_due() {
        // t2 is due only at 5 s; the claim at 10 ms takes it.
        let h = H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job);
        let spec = leasesim_vocab::task::TaskSpec {
            kind: TaskKind::Job,
            group: None,
            stage: None,
            index: None,
            not_before_ms: 5_000,
            queue: None,
        };
        let h = h.created_spec(2, spec);
        let history = h.at(10).grant(2, 1, o(1, 1)).build();
        // retry-clock judges the same grant from the row: early.
        let both = &[(NAME, Some(2)), ("retry-clock", Some(2))];
        crate::testkit::run_case_in("any order, t2 early", &any_order(), history, both);
    }

    /// t1's body ends at 110 ms on p1.1; its completion at 120 ms is
    /// refused as not loaded (NOSCRIPT), having changed the row if `applied`.
    fn not_loaded_completion(applied: bool) -> H {
        let done = |t: &mut Row| {
            t.state = TaskState::Done;
            t.owner = None;
        };
        let h = H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job);
        let h = h.attempt_body(10, 1, 1, o(1, 1), true).at(120);
        let (from, complete) = (Sender::Worker(o(1, 1)), Op::Complete { fence: fence(1, 1, o(1, 1)) });
        let refused = Response::Rejected { reason: Refusal::NotLoaded };
        match applied {
            true => h.answer(from, complete, refused, vec![], &[(1, &done)]),
            false => h.answer(from, complete, refused, vec![], &[]),
        }
        .at(121)
    }

    cases! {
        a_lock_wait_given_up_behind_an_open_transaction_passes:
            // graphile-recovery seed 9100000957: p2.4's sweep released
            // p3.3's t19 in a transaction whose COMMIT was lost; p3.3's
            // complete_job, held until the heal, waited lock_timeout for
            // t19's row and was refused 55P03. Judged before as "refused
            // (LockTimeout) while it held the task".
            completion_behind_a_recovery(true).build()
            => PASS;
        a_lock_timeout_on_a_row_nobody_holds:
            completion_behind_a_recovery(false).build()
            => &[(NAME, Some(1))];
        truthful_answers_pass:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job).pipeline(9, 2)
                .attempt_ok(10, 1, 1, o(1, 1))
                .answer(Sender::Worker(o(1, 1)), Op::PipelineSnapshot { by: o(1, 1) },
                    Response::Snapshot { due: vec![StageRef { pipeline: 9, index: 0 }] }, vec![], &[])
                .build()
            => PASS;
        claim_reports_fewer_grants_than_it_made:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job).created(2, TaskKind::Job)
                .at(10).answer(
                    Sender::Worker(o(1, 1)),
                    Op::Claim { owner: o(1, 1), max: 2, wait_ms: 0 },
                    Response::Claimed { grants: vec![Grant { fence: fence(1, 1, o(1, 1)), kind: TaskKind::Job, lease_expiry_ms: None }] },
                    vec![
                        Event::LeaseGranted { fence: fence(1, 1, o(1, 1)), kind: TaskKind::Job, lease_expiry_ms: None, retry_at_ms: 0 },
                        Event::LeaseGranted { fence: fence(2, 1, o(1, 1)), kind: TaskKind::Job, lease_expiry_ms: None, retry_at_ms: 0 },
                    ],
                    &[
                        (1, &|t: &mut Row| { t.state = TaskState::Leased; t.owner = Some(o(1, 1)); t.attempt = 1; }),
                        (2, &|t: &mut Row| { t.state = TaskState::Leased; t.owner = Some(o(1, 1)); t.attempt = 1; }),
                    ],
                )
                .build()
            => &[(NAME, Some(1))];
        // apalis's fetch of a worker whose registration was removed.
        refused_claim_that_changed_nothing_passes:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job)
                .at(10).answer(Sender::Worker(o(1, 1)), Op::Claim { owner: o(1, 1), max: 1, wait_ms: 0 },
                    Response::Rejected { reason: Refusal::Error }, vec![], &[])
                .build()
            => PASS;
        refused_claim_that_granted_a_task:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job)
                .at(10).answer(Sender::Worker(o(1, 1)), Op::Claim { owner: o(1, 1), max: 1, wait_ms: 0 },
                    Response::Rejected { reason: Refusal::Error }, vec![],
                    &[(1, &|t: &mut Row| { t.state = TaskState::Leased; t.owner = Some(o(1, 1)); t.attempt = 1; })])
                .build()
            // testimony sees the same grant nobody was told of.
            => &[(NAME, Some(1)), ("testimony", Some(1))];
        // A script the store had not loaded (NOSCRIPT) ran nothing; the
        // client loads it and sends the completion again.
        outcome_refused_as_not_loaded_passes:
            not_loaded_completion(false).completed(1, 1, o(1, 1)).callback(1, 1, o(1, 1)).unpermit(o(1, 1), 1, 1)
                .build()
            => PASS;
        outcome_refused_as_not_loaded_that_changed_the_store:
            not_loaded_completion(true).callback(1, 1, o(1, 1)).unpermit(o(1, 1), 1, 1).build()
            => &[(NAME, Some(1)), ("testimony", Some(1))];
        claim_passes_over_an_earlier_due_task:
            // t1 and t2 are both due since 0: a claim for one must take t1.
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job).created(2, TaskKind::Job)
                .at(10).grant(2, 1, o(1, 1))
                .build()
            => &[(NAME, Some(2))];
        claim_skips_a_row_a_stale_statement_locked:
            // t1's lease ran out and p2 reclaimed it; p1.1's stale failure,
            // in an open transaction, was answered "applied" (a store that
            // fences wrongly): the store holds t1's row lock, so a claim
            // that passes over t1 for t2 is right to. (b-machines seed 331
            // with unfenced-completion.)
            H::new().up(o(1, 1)).up(o(2, 1)).heartbeat(o(1, 1)).heartbeat(o(2, 1))
                .created(1, TaskKind::WorkflowTask).created(2, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1))
                .at(3_100).released(1, 1, o(2, 1))
                .at(3_200).in_txn(o(1, 1), 1, false).answer(
                    Sender::Worker(o(1, 1)),
                    Op::ClearStageLink { fence: fence(1, 1, o(1, 1)) },
                    Response::Applied { retries: 0, retry_at_ms: None },
                    vec![],
                    &[],
                )
                .at(3_300).grant(2, 1, o(2, 1))
                .build()
            // (A statement for an attempt whose body never ran: outcome-truth's.)
            => &[("outcome-truth", Some(1))];
        claim_passes_over_a_released_row_nobody_locked:
            H::new().up(o(1, 1)).up(o(2, 1)).heartbeat(o(1, 1)).heartbeat(o(2, 1))
                .created(1, TaskKind::WorkflowTask).created(2, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1))
                .at(3_100).released(1, 1, o(2, 1))
                .at(3_300).grant(2, 1, o(2, 1))
                .build()
            => &[(NAME, Some(2))];
        claim_leaves_a_due_task_behind:
            // Asked for two with two due, granted one.
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job).created(2, TaskKind::Job)
                .at(10).answer(Sender::Worker(o(1, 1)), Op::Claim { owner: o(1, 1), max: 2, wait_ms: 0 },
                    Response::Claimed { grants: vec![Grant { fence: fence(1, 1, o(1, 1)), kind: TaskKind::Job, lease_expiry_ms: None }] },
                    vec![Event::LeaseGranted { fence: fence(1, 1, o(1, 1)), kind: TaskKind::Job, lease_expiry_ms: None, retry_at_ms: 0 }],
                    &[(1, &|t: &mut Row| { t.state = TaskState::Leased; t.owner = Some(o(1, 1)); t.attempt = 1; })],
                )
                .build()
            => &[(NAME, Some(1))];
        reclaim_leaves_an_expired_lease:
            // t1's 3 s workflow lease ran out at 3010; the reclaim at 3100
            // (no transaction holds the row) releases nothing.
            H::new().up(o(1, 1)).up(o(2, 1)).heartbeat(o(1, 1)).heartbeat(o(2, 1)).created(1, TaskKind::WorkflowTask)
                .at(10).grant(1, 1, o(1, 1))
                .at(3_100).answer(Sender::Worker(o(2, 1)), Op::ReclaimExpired { by: o(2, 1) },
                    Response::Released { tasks: 0 }, vec![], &[])
                .build()
            => &[(NAME, None)];
        repair_leaves_an_expired_lease_in_its_group:
            // Workflow task t1 of run 7: its 3 s lease ran out at 3010 (p1
            // stopped renewing); the repair pass at 3100 skips the group (a
            // backoff kept from before the grant) and releases nothing.
            H::new().up(o(1, 1)).up(o(2, 1)).heartbeat(o(1, 1)).heartbeat(o(2, 1))
                .created_in(1, TaskKind::WorkflowTask, 7)
                .at(10).grant(1, 1, o(1, 1))
                .at(3_100).answer(Sender::Worker(o(2, 1)), Op::Repair { by: o(2, 1) },
                    Response::Released { tasks: 0 }, vec![], &[])
                .build()
            => &[(NAME, None)];
        repair_may_back_off_past_a_lease_a_transaction_locked:
            // p1's failure transaction locked t1 at 1000 (its lease check);
            // p1 died and its lock went when p1.2 reached the store. A pass
            // meanwhile could not read the row, so its group's backoff did
            // not count t1's expiry (3010): the pass at 3100 may leave it
            // (bounded after the heal by expired-lease-recovery).
            H::new().up(o(1, 1)).up(o(2, 1)).heartbeat(o(1, 1)).heartbeat(o(2, 1))
                .created_in(1, TaskKind::WorkflowTask, 7)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .at(900).finished(1, 1, o(1, 1), false)
                .at(1_000).in_txn(o(1, 1), 1, false).lease_checked(1, 1, o(1, 1), true)
                .at(1_500).killed(o(1, 1))
                .at(2_500).up(o(1, 2)).heartbeat(o(1, 2))
                .at(3_100).answer(Sender::Worker(o(2, 1)), Op::Repair { by: o(2, 1) },
                    Response::Released { tasks: 0 }, vec![], &[])
                .build()
            => PASS;
        repair_reclaims_the_expired_lease_and_leaves_the_healthy_one:
            // Same run: t1's lease ran out, t2's (granted at 2000) runs to
            // 5000. The pass takes t1 back and leaves t2.
            H::new().up(o(1, 1)).up(o(2, 1)).heartbeat(o(1, 1)).heartbeat(o(2, 1))
                .created_in(1, TaskKind::WorkflowTask, 7).created_in(2, TaskKind::WorkflowTask, 7)
                .at(10).grant(1, 1, o(1, 1))
                .at(2_000).grant(2, 1, o(2, 1))
                .at(3_100).released_by(1, o(2, 1), Op::Repair { by: o(2, 1) }, ReleaseCause::Repair)
                .build()
            => PASS;
        release_dead_leaves_a_replaced_owners_task:
            // p1 restarted (p1.2 heartbeats): its heartbeat-owned job t1 must
            // go back with the next release-dead, which releases nothing.
            H::new().up(o(1, 1)).up(o(2, 1)).heartbeat(o(1, 1)).heartbeat(o(2, 1)).created(1, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1))
                .at(100).killed(o(1, 1)).up(o(1, 2)).heartbeat(o(1, 2))
                .at(200).answer(Sender::Worker(o(2, 1)), Op::ReleaseDead { by: o(2, 1) },
                    Response::Released { tasks: 0 }, vec![], &[])
                .build()
            => &[(NAME, None)];
        claim_in_order_passes:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job).created(2, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1))
                .at(20).grant(2, 1, o(1, 1))
                .build()
            => PASS;
        valid_completion_refused:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .at(100).finished(1, 1, o(1, 1), true)
                .answer(Sender::Worker(o(1, 1)), Op::Complete { fence: fence(1, 1, o(1, 1)) },
                    Response::Rejected { reason: Refusal::NotOwner }, vec![], &[])
                .unpermit(o(1, 1), 1, 1)
                .build()
            => &[(NAME, Some(1))];
        lease_check_says_valid_after_expiry:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::WorkflowTask)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .at(2_000).renew(1, 1, o(1, 1))
                .at(4_000).finished(1, 1, o(1, 1), false)
                .at(5_000).answer(Sender::Worker(o(1, 1)), Op::LeaseValid { fence: fence(1, 1, o(1, 1)) },
                    Response::Valid { valid: true }, vec![], &[])
                .unpermit(o(1, 1), 1, 1)
                .build()
            => &[(NAME, Some(1))];
        heartbeat_changes_a_task:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).answer(Sender::Worker(o(1, 1)), Op::Heartbeat { owner: o(1, 1) }, Response::Ack,
                    vec![Event::HeartbeatApplied { owner: o(1, 1) }],
                    &[(1, &|t: &mut Row| t.retry_at_ms = 99)])
                .build()
            => &[(NAME, Some(1))];
    }
}
