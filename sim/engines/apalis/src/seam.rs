//! apalis's store process behind the harness's store seam: the Redis model
//! running apalis's own scripts, each command classified in the harness's
//! words ([`crate::call`] says which script it is), and every task's state
//! read back from the keyspace.
//!
//! Redis runs one command at a time, a script atomically, so a command is
//! served in one step. A task's row is what the keyspace says of it: in
//! the done or dead set, in some worker's in-flight set (leased, to the
//! process of the latest fetch that handed it out), or waiting in the
//! active list or the scheduled set. A crash of the store process keeps
//! what the scenario's persistence keeps (`ApalisConfig::persistence`), and
//! no loaded script.

use crate::book::Book;
use crate::call::{self, Call, Keys};
use crate::config::{ApalisConfig, Persistence};
use crate::Apalis;
use leasesim_redis_model::{Redis, Reply, Value};
use leasesim_vocab::faults::FaultKind;
use leasesim_vocab::ids::{Owner, TaskId};
use leasesim_vocab::op::{Grant, Op, Refusal, Response};
use leasesim_vocab::task::{Row, TaskError, TaskKind, TaskSpec, TaskState};
use leasesim_vocab::truth::{Commit, Sender, TaskChange};
use leasesim_world::engine::{BoxFuture, LastLook, StoreSeam};
use leasesim_world::world::sim_clock::SimTime;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// What a process sends the store: one command's words, and the harness's
/// note of which process sent it (Redis never sees the note).
#[derive(Debug, Clone)]
pub struct Command {
    pub argv: Vec<Vec<u8>>,
    pub owner: Option<Owner>,
}

pub struct ApalisStore {
    redis: Mutex<Redis>,
    keys: Keys,
    book: Book,
    time: SimTime,
    /// The wall clock's ms at the world's start: apalis's scores are wall
    /// seconds, read on the same (simulated) clock.
    epoch_ms: u64,
    /// The answer of the command just served, in the harness's words, for
    /// `normalize` (called right after `serve`, with nothing in between).
    answered: Mutex<Option<Response>>,
    mirror: Mutex<BTreeMap<TaskId, Row>>,
    persistence: Persistence,
    /// Under `everysec`: the keyspace as of the last fsync (the second it
    /// was taken, and the keyspace).
    fsynced: Mutex<(u64, BTreeMap<Vec<u8>, Value>)>,
}

fn wall_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn task_id(word: &str) -> Option<TaskId> {
    word.parse().ok()
}

/// The members of a key's value, borrowed from the keyspace: a list's
/// items, a set's or sorted set's members, a hash's fields (nothing for a
/// string or a missing key). The tap reads every row through these after
/// each command that changed a key holding rows: borrowed, not copied.
enum Members<'a> {
    Set(&'a BTreeSet<Vec<u8>>),
    Hash(&'a BTreeMap<Vec<u8>, Vec<u8>>),
    ZSet(&'a leasesim_redis_model::ZSet),
    /// A list, indexed once.
    Items(BTreeSet<&'a [u8]>),
}

impl<'a> Members<'a> {
    fn of(v: Option<&'a Value>) -> Members<'a> {
        match v {
            Some(Value::Set(s)) => Members::Set(s),
            Some(Value::Hash(h)) => Members::Hash(h),
            Some(Value::ZSet(z)) => Members::ZSet(z),
            Some(Value::List(l)) => Members::Items(l.iter().map(Vec::as_slice).collect()),
            _ => Members::Items(BTreeSet::new()),
        }
    }

    fn contains(&self, member: &[u8]) -> bool {
        match self {
            Members::Set(s) => s.contains(member),
            Members::Hash(h) => h.contains_key(member),
            Members::ZSet(z) => z.score(member).is_some(),
            Members::Items(items) => items.contains(member),
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = &'a [u8]> + '_> {
        match self {
            Members::Set(s) => Box::new(s.iter().map(Vec::as_slice)),
            Members::Hash(h) => Box::new(h.keys().map(Vec::as_slice)),
            Members::ZSet(z) => Box::new(z.iter().map(|(m, _)| m)),
            Members::Items(items) => Box::new(items.iter().copied()),
        }
    }
}

impl ApalisStore {
    pub fn new(cfg: &ApalisConfig, time: SimTime, book: Book) -> ApalisStore {
        ApalisStore {
            redis: Mutex::new(Redis::new()),
            keys: Keys::of(&cfg.apalis()),
            book,
            time,
            epoch_ms: wall_ms().saturating_sub(0),
            answered: Mutex::new(None),
            mirror: Mutex::new(BTreeMap::new()),
            persistence: cfg.persistence,
            fsynced: Mutex::new((0, BTreeMap::new())),
        }
    }

    /// Under `everysec`, the keyspace is written out at the first command
    /// of each second: what a crash keeps.
    fn fsync(&self, now_ms: u64) {
        if self.persistence != Persistence::Everysec {
            return;
        }
        let mut fsynced = self.fsynced.lock().expect("fsynced");
        if fsynced.0 < now_ms / 1_000 {
            *fsynced = (now_ms / 1_000, self.redis().dump(now_ms));
        }
    }

    fn redis(&self) -> std::sync::MutexGuard<'_, Redis> {
        self.redis.lock().expect("redis model")
    }

    /// A wall-clock score in seconds, as the world's ms.
    fn score_ms(&self, score_s: f64) -> u64 {
        ((score_s.max(0.0) * 1_000.0) as u64).saturating_sub(self.epoch_ms)
    }

    /// The owners whose tasks `reenqueue_orphaned` may hand back: every
    /// incarnation of every worker name it may take as dead (only `only`,
    /// if given), the sender's own included: the script takes every name
    /// whose score is stale, and a worker back from a long pause sends the
    /// rest of its heartbeat round before its next keep-alive, so its own
    /// name may be stale too (apalis-pods seed 547213237897: p3.9, paused
    /// 30 s, re-enqueued its own running task). Which names are silent is
    /// decided when the script runs, by scores the harness cannot foresee at
    /// the call's arrival (a keep-alive held up on the way writes the older
    /// time its sender read), so every name counts; whether each release had
    /// a reason is `lease-revocation`'s to judge, from the holder's life.
    fn expired(&self, only: Option<&str>) -> Vec<Owner> {
        // A name per process stands for all its runs; a name per run, for one.
        let per_process = self.book.names_per_process();
        self.book
            .names()
            .iter()
            .filter(|name| only.is_none_or(|o| o == name.as_str()))
            .filter_map(|name| self.book.owner_named(name))
            .flat_map(|newest| {
                let first = if per_process { 1 } else { newest.incarnation };
                (first..=newest.incarnation).map(move |incarnation| Owner { proc: newest.proc, incarnation })
            })
            .collect()
    }

    /// Every task's row as the keyspace says it now.
    fn rows(&self, previous: &BTreeMap<TaskId, Row>) -> BTreeMap<TaskId, Row> {
        let now = self.time.now_ms();
        let redis = self.redis();
        let get = |key: &str| redis.get(now, key.as_bytes());
        let done = Members::of(get(&self.keys.done));
        let dead = Members::of(get(&self.keys.dead));
        let waiting = Members::of(get(&self.keys.active));
        let scheduled = match get(&self.keys.scheduled) {
            Some(Value::ZSet(z)) => Some(z),
            _ => None,
        };
        let mut key = self.keys.inflight.clone();
        key.push(':');
        let prefix = key.len();
        let inflight: Vec<Members> = self
            .book
            .names()
            .iter()
            .map(|name| {
                key.truncate(prefix);
                key.push_str(name);
                Members::of(get(&key))
            })
            .collect();
        let mut rows = BTreeMap::new();
        for word in Members::of(get(&self.keys.data)).iter() {
            let Some(id) = task_id(&String::from_utf8_lossy(word)) else { continue };
            let grant = self.book.current(id);
            let (state, owner) = if done.contains(word) {
                (TaskState::Done, None)
            } else if dead.contains(word) {
                (TaskState::Dead, None)
            } else if inflight.iter().any(|set| set.contains(word)) && !waiting.contains(word) {
                (TaskState::Leased, grant.map(|f| f.owner))
            } else {
                (TaskState::Ready, None)
            };
            // A due task leaves the scheduled set for the active list (a
            // fetch promotes it): its retry time stays what it was.
            let retry_at_ms = match scheduled.and_then(|z| z.score(word)) {
                Some(s) => self.score_ms(s),
                None => previous.get(&id).map_or(0, |r| r.retry_at_ms),
            };
            rows.insert(
                id,
                Row {
                    state,
                    owner,
                    attempt: grant.map_or(0, |f| f.attempt),
                    retries: self.book.failures(id),
                    retry_at_ms,
                    ..Row::ready(id, TaskSpec::job(0))
                },
            );
        }
        rows
    }

    /// A command's op, from its call (`owner`: the worker that sent it).
    fn op_of(&self, owner: Option<Owner>, call: Call) -> Op {
        let other = |what: String| Op::Other { what, by: owner };
        let Some(owner) = owner else {
            return match call {
                Call::Push { tasks } if tasks.len() == 1 => Op::Enqueue { spec: TaskSpec::job(0), key: None },
                call => other(format!("{call:?}")),
            };
        };
        match call {
            Call::Register { .. } | Call::KeepAlive { .. } => Op::Heartbeat { owner },
            Call::Fetch { max, .. } => Op::Claim { owner, max, wait_ms: 0 },
            Call::Reenqueue { only, .. } => Op::ReleaseOwners { by: owner, owners: self.expired(only.as_deref()) },
            Call::Results { outcomes, .. } if outcomes.len() == 1 => match task_id(&outcomes[0].task) {
                Some(task) => outcome(self.book.held_by(task, owner), &outcomes[0].status),
                None => other("handle-results of a task id not the application's".into()),
            },
            Call::Release { tasks, .. } => {
                Op::ReturnOwn { owner, tasks: tasks.iter().filter_map(|t| task_id(t)).collect(), interrupted: false }
            }
            Call::Deregister { .. } => Op::Deregister { owner },
            Call::Lock { .. } => other("acquire-leases".into()),
            Call::Renew { .. } => other("renew-leases".into()),
            call => other(format!("{call:?}")),
        }
    }

    /// What the command just applied means in the harness's words, with
    /// the book kept: a fetch numbers its grants, a failure counts.
    fn answer(&self, cmd: &Command, reply: &Reply) -> Option<Response> {
        if let Reply::Error(e) = reply {
            return Some(Response::Rejected { reason: refusal(e) });
        }
        let owner = cmd.owner;
        let count = match reply {
            Reply::Int(n) => (*n).max(0) as u64,
            _ => 0,
        };
        Some(match call::classify(&self.keys, &cmd.argv) {
            Call::Fetch { .. } => {
                let owner = owner?;
                let grants = fetched(reply)
                    .into_iter()
                    .map(|task| Grant {
                        fence: self.book.grant(task, owner),
                        kind: TaskKind::Job,
                        lease_expiry_ms: None,
                    })
                    .collect();
                Response::Claimed { grants }
            }
            Call::Push { tasks } if tasks.len() == 1 => {
                Response::Enqueued { task: task_id(&tasks[0].task).unwrap_or_default() }
            }
            Call::Results { outcomes, .. } => {
                // Each part's answer is read from its row (`normalize`).
                for o in outcomes.iter().filter(|o| o.status != "Done") {
                    self.book.failed(task_id(&o.task).unwrap_or_default());
                }
                return None;
            }
            Call::KeepAlive { .. } | Call::Register { .. } => Response::Ack,
            Call::Reenqueue { .. } | Call::Release { .. } => Response::Released { tasks: count as u32 },
            _ => Response::Rows { count },
        })
    }
}

/// An error reply in the harness's words: NOSCRIPT ran nothing (the script
/// is not loaded); anything else is an error the script raised.
fn refusal(error: &str) -> Refusal {
    match error.starts_with("NOSCRIPT") {
        true => Refusal::NotLoaded,
        false => Refusal::Error,
    }
}

/// The keyspace back to `kept` (keys' expiries are not kept: apalis sets
/// one only on idempotency keys, which the workload does not use).
fn restore(redis: &mut Redis, now_ms: u64, kept: &BTreeMap<Vec<u8>, Value>) {
    redis.apply(now_ms, &[b"FLUSHALL".to_vec()]);
    for (key, value) in kept {
        let mut argv = vec![Vec::new(), key.clone()];
        match value {
            Value::String(v) => {
                argv[0] = b"SET".to_vec();
                argv.push(v.clone());
            }
            Value::List(items) => {
                argv[0] = b"RPUSH".to_vec();
                argv.extend(items.iter().cloned());
            }
            Value::Set(members) => {
                argv[0] = b"SADD".to_vec();
                argv.extend(members.iter().cloned());
            }
            Value::ZSet(z) => {
                argv[0] = b"ZADD".to_vec();
                for (member, score) in z.iter() {
                    argv.push(format!("{score}").into_bytes());
                    argv.push(member.to_vec());
                }
            }
            Value::Hash(h) => {
                argv[0] = b"HSET".to_vec();
                for (field, v) in h {
                    argv.push(field.clone());
                    argv.push(v.clone());
                }
            }
        }
        let reply = redis.apply(now_ms, &argv);
        assert!(!matches!(reply, Reply::Error(_)), "restoring {}: {reply:?}", String::from_utf8_lossy(key));
    }
}

/// One task's outcome as `handle_results` records it: `Done`, or a
/// failure (retried, or dead at its last attempt).
fn outcome(fence: leasesim_vocab::ids::Fence, status: &str) -> Op {
    match status {
        "Done" => Op::Complete { fence },
        _ => Op::Fail { fence, error: TaskError::Conflict },
    }
}

/// The task ids `fetch_next` answered: `{results, meta}`, each meta entry
/// led by its task's id.
fn fetched(reply: &Reply) -> Vec<TaskId> {
    let Reply::Array(Some(parts)) = reply else { return Vec::new() };
    let Some(Reply::Array(Some(meta))) = parts.get(1) else { return Vec::new() };
    meta.iter()
        .filter_map(|m| match m {
            Reply::Array(Some(fields)) => match fields.first() {
                Some(Reply::Bulk(Some(id))) => task_id(&String::from_utf8_lossy(id)),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

impl StoreSeam<Apalis> for ApalisStore {
    fn classify(&self, from: Sender, cmd: &Command) -> Op {
        let owner = match from {
            Sender::Worker(o) => Some(o),
            _ => None,
        };
        self.op_of(owner, call::classify(&self.keys, &cmd.argv))
    }

    fn arrived(&self, from: Sender) {
        if let Sender::Worker(owner) = from {
            self.book.heard(owner);
        }
    }

    fn normalize(&self, op: &Op, reply: &Reply) -> Response {
        let answered = self.answered.lock().expect("answered").take();
        if let Reply::Error(e) = reply {
            return Response::Rejected { reason: refusal(e) };
        }
        match op {
            // One outcome of a `handle_results` (perhaps one of several):
            // its row, as the tap just read it, says what it did.
            Op::Complete { fence } | Op::Fail { fence, .. } => {
                let mirror = self.mirror.lock().expect("mirror");
                let row = mirror.get(&fence.task);
                let retry_at_ms = row.filter(|r| r.state == TaskState::Ready).map(|r| r.retry_at_ms);
                let retry_at_ms = retry_at_ms.filter(|_| matches!(op, Op::Fail { .. }));
                Response::Applied { retries: self.book.failures(fence.task), retry_at_ms }
            }
            _ => answered.unwrap_or(Response::Ack),
        }
    }

    fn classify_parts(&self, from: Sender, cmd: &Command) -> Vec<Op> {
        let Sender::Worker(owner) = from else {
            return vec![self.classify(from, cmd)];
        };
        match call::classify(&self.keys, &cmd.argv) {
            // `handle_results` records several tasks' outcomes at once:
            // one part per task, each speaking for the attempt this
            // process holds of it.
            Call::Results { outcomes, .. } if outcomes.len() > 1 => outcomes
                .iter()
                .map(|o| match task_id(&o.task) {
                    Some(task) => outcome(self.book.held_by(task, owner), &o.status),
                    None => {
                        Op::Other { what: "handle-results of a task id not the application's".into(), by: Some(owner) }
                    }
                })
                .collect(),
            // Classified once: the call is the command's one part.
            call => vec![self.op_of(Some(owner), call)],
        }
    }

    fn refuse(&self, _op: &Op, why: Refusal, fault: Option<FaultKind>) -> Reply {
        // Redis has no transactions to abort: what the harness refused on
        // its behalf reaches the client as an error reply.
        Reply::Error(format!("ERR leasesim refused the command ({why:?}, {fault:?})"))
    }

    fn serve(&self, cmd: Command) -> BoxFuture<'_, Reply> {
        Box::pin(async move {
            let now = self.time.now_ms();
            self.fsync(now);
            let reply = self.redis().apply(now, &cmd.argv);
            let answer = self.answer(&cmd, &reply);
            *self.answered.lock().expect("answered") = answer;
            reply
        })
    }

    fn crash(&self) {
        // A restarted server has no scripts loaded: apalis's next call of
        // each is answered NOSCRIPT, and apalis loads it again.
        let now = self.time.now_ms();
        let mut redis = self.redis();
        redis.apply(now, &[b"SCRIPT".to_vec(), b"FLUSH".to_vec()]);
        match self.persistence {
            Persistence::Always => {}
            Persistence::None => drop(redis.apply(now, &[b"FLUSHALL".to_vec()])),
            Persistence::Everysec => restore(&mut redis, now, &self.fsynced.lock().expect("fsynced").1),
        }
    }

    fn may_duplicate(&self, _op: &Op) -> bool {
        // A command travels on a connection (TCP): never delivered twice.
        false
    }

    fn tap(&self, _op: Option<&Op>) -> Commit {
        // Only keys a row is read from can change a row: a heartbeat, a
        // worker's registration or a signal changes none, and reading every
        // row back after each of those was a tenth of an apalis world's cost.
        let dirty = self.redis().take_dirty();
        if !dirty.iter().any(|key| self.keys.holds_rows(key)) {
            return Commit::default();
        }
        let now = self.time.now_ms();
        let mut mirror = self.mirror.lock().expect("mirror");
        let mut commit = Commit::default();
        let rows = self.rows(&mirror);
        for (id, mut after) in rows {
            let before = mirror.get(&id).cloned();
            after.updated_ms = before.as_ref().map_or(now, |b| b.updated_ms);
            if before.as_ref() != Some(&after) {
                after.updated_ms = now;
                mirror.insert(id, after.clone());
                commit.tasks.push(TaskChange { before, after });
            }
        }
        commit
    }

    fn last_look(&self) -> LastLook {
        let mirror = self.mirror.lock().expect("mirror");
        let tasks = self
            .rows(&mirror)
            .into_iter()
            .map(|(id, mut row)| {
                row.updated_ms = mirror.get(&id).map_or(0, |m| m.updated_ms);
                row
            })
            .collect();
        LastLook { tasks, ..LastLook::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::restore;
    use leasesim_redis_model::Redis;

    fn run(redis: &mut Redis, words: &[&str]) {
        let argv: Vec<Vec<u8>> = words.iter().map(|w| w.as_bytes().to_vec()).collect();
        redis.apply(0, &argv);
    }

    /// What `everysec` keeps comes back whole: every kind of value apalis
    /// uses, scores exact, list order kept; what came after is gone.
    #[test]
    fn a_restart_restores_the_fsynced_keyspace() {
        let mut redis = Redis::new();
        run(&mut redis, &["SET", "s", "v"]);
        run(&mut redis, &["RPUSH", "q:active", "3", "1", "2"]);
        run(&mut redis, &["SADD", "q:done", "7", "8"]);
        run(&mut redis, &["ZADD", "q:scheduled", "1733366400.25", "4", "-0.5", "5"]);
        run(&mut redis, &["HSET", "q:meta:4", "attempts", "2", "status", "Failed"]);
        let kept = redis.dump(0);
        run(&mut redis, &["SADD", "q:done", "9"]);
        run(&mut redis, &["DEL", "q:active"]);
        run(&mut redis, &["SET", "later", "x"]);
        restore(&mut redis, 0, &kept);
        assert_eq!(redis.dump(0), kept);
    }
}
