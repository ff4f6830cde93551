//! Committed tables, the write sets of open transactions, and the context a
//! statement runs in: reads see the committed rows overlaid by the session's
//! own transaction and by the statement's own earlier writes (READ COMMITTED:
//! each statement runs against what was committed when it runs), writes and
//! row locks are checked against every other open transaction.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use graphile_worker_database::DbError;

use crate::rows::{JobRow, QueueRow, TaskRow, WorkerRow};
use crate::time::Ts;
use crate::{Fail, SessionId};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Table {
    Jobs,
    Queues,
    Tasks,
    Workers,
    Retirements,
}

/// A row lock: rows a transaction updated, deleted, inserted or selected
/// `FOR UPDATE`. graphile's statements never need the weaker row-lock modes
/// to be told apart (see DESIGN.md), so every row lock conflicts with every other.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum RowKey {
    Job(i64),
    Queue(i32),
    Task(i32),
    Worker(String),
    Retirement(i64),
}

/// Transaction-level advisory locks. `Text` stands for
/// `pg_advisory_xact_lock(hashtext(key))`, keyed by the text itself.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Advisory {
    Pair(i32, i32),
    Text(String),
}

/// Table-level lock modes graphile's statements take that can conflict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TableLock {
    /// Any INSERT, UPDATE or DELETE targeting the table.
    RowExclusive,
    /// `LOCK TABLE .. IN SHARE ROW EXCLUSIVE MODE` (cleanup).
    ShareRowExclusive,
}

impl TableLock {
    fn conflicts(self, other: TableLock) -> bool {
        !(self == TableLock::RowExclusive && other == TableLock::RowExclusive)
    }
}

/// Values a transaction put into (or took out of) a unique index: its
/// uncommitted row versions keep them there until it ends, so an insert of
/// one of them by another transaction waits for it, as PostgreSQL's does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Touched {
    pub job_keys: BTreeSet<String>,
    pub task_identifiers: BTreeSet<String>,
    pub queue_names: BTreeSet<String>,
}

impl Drawn {
    /// These values, then `rest`'s, each sequence in order.
    pub(crate) fn then(mut self, rest: Drawn) -> Drawn {
        absorb(&mut self.job, rest.job);
        absorb(&mut self.queue, rest.queue);
        absorb(&mut self.task, rest.task);
        self
    }
}

impl Touched {
    pub(crate) fn extend(&mut self, other: Touched) {
        absorb(&mut self.job_keys, other.job_keys);
        absorb(&mut self.task_identifiers, other.task_identifiers);
        absorb(&mut self.queue_names, other.queue_names);
    }
}

/// What a collection is that [`absorb`] can take whole.
pub(crate) trait Collection: Extend<Self::Item> + IntoIterator {
    fn is_empty(&self) -> bool;
}

impl<K: Ord, V> Collection for BTreeMap<K, V> {
    fn is_empty(&self) -> bool {
        BTreeMap::is_empty(self)
    }
}

impl<T: Ord> Collection for BTreeSet<T> {
    fn is_empty(&self) -> bool {
        BTreeSet::is_empty(self)
    }
}

impl<T> Collection for VecDeque<T> {
    fn is_empty(&self) -> bool {
        VecDeque::is_empty(self)
    }
}

/// `into.extend(later)`, but an empty `into` takes `later` whole instead of
/// inserting its entries one by one: a statement's effects go into an
/// autocommit statement's fresh transaction (most statements), where every
/// set is empty. The result is the same either way.
pub(crate) fn absorb<C: Collection>(into: &mut C, later: C) {
    if into.is_empty() {
        *into = later;
    } else {
        into.extend(later);
    }
}

/// Identity values a statement drew, in order, per sequence.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Drawn {
    pub job: VecDeque<i64>,
    pub queue: VecDeque<i32>,
    pub task: VecDeque<i32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seqs {
    pub job: i64,
    pub queue: i32,
    pub task: i32,
}

impl Default for Seqs {
    fn default() -> Self {
        Seqs { job: 1, queue: 1, task: 1 }
    }
}

#[derive(Debug, Default, Clone)]
pub(crate) struct Tables {
    pub jobs: BTreeMap<i64, JobRow>,
    pub queues: BTreeMap<i32, QueueRow>,
    pub tasks: BTreeMap<i32, TaskRow>,
    pub workers: BTreeMap<String, WorkerRow>,
    pub retirements: BTreeMap<i64, ()>,
    /// Where each job's, queue's and worker's current version lies in its
    /// heap (a counter of row versions written): a scan without ORDER BY
    /// meets rows in this order.
    pub places: BTreeMap<RowKey, u64>,
}

/// A write set: `None` is a deleted row.
#[derive(Debug, Default, Clone)]
pub(crate) struct Writes {
    pub jobs: BTreeMap<i64, Option<JobRow>>,
    pub queues: BTreeMap<i32, Option<QueueRow>>,
    pub tasks: BTreeMap<i32, Option<TaskRow>>,
    pub workers: BTreeMap<String, Option<WorkerRow>>,
    pub retirements: BTreeMap<i64, Option<()>>,
    pub places: BTreeMap<RowKey, u64>,
}

impl Writes {
    pub(crate) fn merge(&mut self, later: Writes) {
        absorb(&mut self.jobs, later.jobs);
        absorb(&mut self.places, later.places);
        absorb(&mut self.queues, later.queues);
        absorb(&mut self.tasks, later.tasks);
        absorb(&mut self.workers, later.workers);
        absorb(&mut self.retirements, later.retirements);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.jobs.is_empty()
            && self.queues.is_empty()
            && self.tasks.is_empty()
            && self.workers.is_empty()
            && self.retirements.is_empty()
    }
}

fn apply<K: Ord, V>(table: &mut BTreeMap<K, V>, writes: BTreeMap<K, Option<V>>) {
    for (key, row) in writes {
        match row {
            Some(row) => table.insert(key, row),
            None => table.remove(&key),
        };
    }
}

impl Tables {
    pub(crate) fn apply(&mut self, writes: Writes) {
        apply(&mut self.jobs, writes.jobs);
        apply(&mut self.queues, writes.queues);
        apply(&mut self.tasks, writes.tasks);
        apply(&mut self.workers, writes.workers);
        apply(&mut self.retirements, writes.retirements);
        self.places.extend(writes.places);
        let (jobs, queues, workers) = (&self.jobs, &self.queues, &self.workers);
        self.places.retain(|key, _| match key {
            RowKey::Job(id) => jobs.contains_key(id),
            RowKey::Queue(id) => queues.contains_key(id),
            RowKey::Worker(id) => workers.contains_key(id),
            RowKey::Task(_) | RowKey::Retirement(_) => false,
        });
    }
}

/// An open transaction (explicit, or the implicit one of an autocommit statement).
#[derive(Debug, Clone)]
pub(crate) struct Txn {
    /// `now()` for every statement of the transaction.
    pub start: Ts,
    pub writes: Writes,
    pub row_locks: BTreeSet<RowKey>,
    pub advisory: BTreeSet<Advisory>,
    pub table_locks: BTreeSet<(Table, TableLock)>,
    pub touched: Touched,
}

impl Txn {
    pub(crate) fn new(start: Ts) -> Txn {
        Txn {
            start,
            writes: Writes::default(),
            row_locks: BTreeSet::new(),
            advisory: BTreeSet::new(),
            table_locks: BTreeSet::new(),
            touched: Touched::default(),
        }
    }
}

fn layered<'a, K: Ord, V>(
    top: &'a BTreeMap<K, Option<V>>,
    mid: &'a BTreeMap<K, Option<V>>,
    base: &'a BTreeMap<K, V>,
    key: &K,
) -> Option<&'a V> {
    if let Some(row) = top.get(key) {
        return row.as_ref();
    }
    if let Some(row) = mid.get(key) {
        return row.as_ref();
    }
    base.get(key)
}

fn layered_keys<K: Ord + Clone, V>(
    top: &BTreeMap<K, Option<V>>,
    mid: &BTreeMap<K, Option<V>>,
    base: &BTreeMap<K, V>,
) -> BTreeSet<K> {
    top.keys().chain(mid.keys()).chain(base.keys()).cloned().collect()
}

/// What one statement runs against and what it has done so far. Nothing in
/// it reaches the database until the statement succeeds.
pub(crate) struct Ctx<'a> {
    pub now: Ts,
    committed: &'a Tables,
    /// Every other open transaction, by session.
    others: Vec<(SessionId, &'a Txn)>,
    own: &'a Txn,
    pub writes: Writes,
    pub locks: BTreeSet<RowKey>,
    pub advisory: BTreeSet<Advisory>,
    pub table_locks: BTreeSet<(Table, TableLock)>,
    pub touched: Touched,
    pub seqs: Seqs,
    /// The next heap place (see [`Tables::places`]).
    pub next_place: u64,
    /// Whether the statement runs in an explicit transaction block.
    pub explicit: bool,
    /// Set by get_job: prefer this job among candidates that tie on the ORDER BY.
    pub claim_preference: Option<i64>,
    /// The committed jobs a single-statement retry's first try saw:
    /// PostgreSQL goes on with that statement's snapshot after a wait, so
    /// jobs committed meanwhile stay invisible to it.
    pub snapshot_jobs: Option<&'a BTreeSet<i64>>,
    /// Identity values an earlier try of this statement drew before it had
    /// to wait: PostgreSQL drew them once, and the statement goes on with them.
    pub reserved: Drawn,
    /// Identity values this try drew.
    pub drawn: Drawn,
    /// The step of a function an earlier try of this statement waited in:
    /// PostgreSQL resumes a waiting function there, not at its first statement.
    pub resume_step: u8,
    /// The step this try has reached (kept if it has to wait).
    pub step: u8,
    /// The row this try must wait for, when it waits for a row.
    pub waits_for_row: Option<RowKey>,
    /// Every transaction a table lock request waits for (the answer names
    /// one): those holding a conflicting lock, and those queued ahead.
    pub blockers: BTreeSet<SessionId>,
    pub queued_ahead: BTreeSet<SessionId>,
    /// Table locks other sessions wait for: PostgreSQL queues a request
    /// behind a waiting one it conflicts with.
    queued_table_locks: Vec<(SessionId, Table, TableLock)>,
    /// The table lock this statement waits for, when it must wait for one,
    /// and whether it asked while being parsed (see [`Ctx::lock_table_at_parse`]).
    pub wants_table_lock: Option<(Table, TableLock, bool)>,
}

macro_rules! reader {
    ($get:ident, $ids:ident, $visible:ident, $all:ident, $field:ident, $key:ty, $row:ty) => {
        pub(crate) fn $get(&self, key: &$key) -> Option<&$row> {
            layered(&self.writes.$field, &self.own.writes.$field, &self.committed.$field, key)
        }

        pub(crate) fn $ids(&self) -> BTreeSet<$key> {
            layered_keys(&self.writes.$field, &self.own.writes.$field, &self.committed.$field)
        }

        /// Every row this statement sees, by key.
        pub(crate) fn $visible(&self) -> Vec<&$row> {
            if self.writes.$field.is_empty() && self.own.writes.$field.is_empty() {
                // Nothing written over the committed rows: no set of keys to build.
                return self.committed.$field.values().collect();
            }
            self.$ids().iter().filter_map(|key| self.$get(key)).collect()
        }

        #[allow(dead_code)]
        pub(crate) fn $all(&self) -> Vec<$row> {
            self.$visible().into_iter().cloned().collect()
        }
    };
}

impl<'a> Ctx<'a> {
    pub(crate) fn new(
        committed: &'a Tables,
        others: Vec<(SessionId, &'a Txn)>,
        own: &'a Txn,
        seqs: Seqs,
        explicit: bool,
    ) -> Ctx<'a> {
        Ctx {
            now: own.start,
            committed,
            others,
            own,
            writes: Writes::default(),
            locks: BTreeSet::new(),
            advisory: BTreeSet::new(),
            table_locks: BTreeSet::new(),
            touched: Touched::default(),
            seqs,
            next_place: 0,
            explicit,
            claim_preference: None,
            snapshot_jobs: None,
            queued_table_locks: Vec::new(),
            wants_table_lock: None,
            reserved: Drawn::default(),
            drawn: Drawn::default(),
            resume_step: 0,
            step: 0,
            waits_for_row: None,
            blockers: BTreeSet::new(),
            queued_ahead: BTreeSet::new(),
        }
    }

    /// The next `_private_jobs.id` (`generated always as identity`).
    pub(crate) fn next_job_id(&mut self) -> i64 {
        let id = self.reserved.job.pop_front().unwrap_or_else(|| {
            self.seqs.job += 1;
            self.seqs.job - 1
        });
        self.drawn.job.push_back(id);
        id
    }

    pub(crate) fn next_queue_id(&mut self) -> i32 {
        let id = self.reserved.queue.pop_front().unwrap_or_else(|| {
            self.seqs.queue += 1;
            self.seqs.queue - 1
        });
        self.drawn.queue.push_back(id);
        id
    }

    pub(crate) fn next_task_id(&mut self) -> i32 {
        let id = self.reserved.task.pop_front().unwrap_or_else(|| {
            self.seqs.task += 1;
            self.seqs.task - 1
        });
        self.drawn.task.push_back(id);
        id
    }

    /// Table lock requests of waiting sessions, in the order they came.
    pub(crate) fn queue_table_locks(&mut self, queued: Vec<(SessionId, Table, TableLock)>) {
        self.queued_table_locks = queued;
    }

    /// A job as this statement sees it. A statement that waited and runs
    /// again does not see jobs committed since its first try (its snapshot
    /// is the first try's: see [`Ctx::snapshot_jobs`]).
    pub(crate) fn job(&self, key: &i64) -> Option<&JobRow> {
        let own = self.writes.jobs.get(key).or_else(|| self.own.writes.jobs.get(key));
        if let Some(row) = own {
            return row.as_ref();
        }
        let hidden = self.snapshot_jobs.is_some_and(|seen| !seen.contains(key));
        self.committed.jobs.get(key).filter(|_| !hidden)
    }

    pub(crate) fn job_ids(&self) -> BTreeSet<i64> {
        layered_keys(&self.writes.jobs, &self.own.writes.jobs, &self.committed.jobs)
    }

    pub(crate) fn all_jobs(&self) -> Vec<JobRow> {
        self.visible_jobs().into_iter().cloned().collect()
    }

    /// Every job this statement sees, by id: [`Ctx::job`] of each of
    /// [`Ctx::job_ids`], without building that set when neither the
    /// statement nor its transaction wrote a job (a claim, on every poll).
    pub(crate) fn visible_jobs(&self) -> Vec<&JobRow> {
        if self.writes.jobs.is_empty() && self.own.writes.jobs.is_empty() {
            let seen = |id: &i64| self.snapshot_jobs.is_none_or(|seen| seen.contains(id));
            return self.committed.jobs.iter().filter(|(id, _)| seen(id)).map(|(_, row)| row).collect();
        }
        self.job_ids().iter().filter_map(|key| self.job(key)).collect()
    }

    /// The committed jobs this statement sees now (kept as its snapshot if it waits).
    pub(crate) fn visible_committed_jobs(&self) -> BTreeSet<i64> {
        self.committed
            .jobs
            .keys()
            .filter(|id| self.snapshot_jobs.is_none_or(|seen| seen.contains(id)))
            .copied()
            .collect()
    }
    reader!(queue, queue_ids, visible_queues, all_queues, queues, i32, QueueRow);
    reader!(task, task_ids, visible_tasks, all_tasks, tasks, i32, TaskRow);
    reader!(worker, worker_ids, visible_workers, all_workers, workers, String, WorkerRow);

    /// The jobs in heap order: the order a scan without ORDER BY meets them
    /// (and so locks them, or waits for one).
    pub(crate) fn jobs_in_heap_order(&self) -> Vec<&JobRow> {
        let mut jobs = self.visible_jobs();
        jobs.sort_by_cached_key(|j| self.place(&RowKey::Job(j.id)));
        jobs
    }

    pub(crate) fn queues_in_heap_order(&self) -> Vec<&QueueRow> {
        let mut queues = self.visible_queues();
        queues.sort_by_cached_key(|q| self.place(&RowKey::Queue(q.id)));
        queues
    }

    pub(crate) fn workers_in_heap_order(&self) -> Vec<&WorkerRow> {
        let mut workers = self.visible_workers();
        workers.sort_by_cached_key(|w| self.place(&RowKey::Worker(w.id.clone())));
        workers
    }

    /// A row's heap place (see [`Tables::places`]).
    pub(crate) fn place(&self, key: &RowKey) -> u64 {
        let own = self.writes.places.get(key).or_else(|| self.own.writes.places.get(key));
        own.or_else(|| self.committed.places.get(key)).copied().unwrap_or(0)
    }

    /// Every version written is a new tuple after the ones before it (also a
    /// HOT update's: a scan meets it at its new line pointer).
    fn new_place(&mut self, key: RowKey) {
        self.writes.places.insert(key, self.next_place);
        self.next_place += 1;
    }

    pub(crate) fn retired(&self, job_id: i64) -> bool {
        layered(&self.writes.retirements, &self.own.writes.retirements, &self.committed.retirements, &job_id).is_some()
    }

    /// The other transaction holding a row lock on `key`, if any.
    pub(crate) fn holder(&self, key: &RowKey) -> Option<SessionId> {
        self.others.iter().find(|(_, txn)| txn.row_locks.contains(key)).map(|(id, _)| *id)
    }

    fn holds(&self, key: &RowKey) -> bool {
        self.locks.contains(key) || self.own.row_locks.contains(key)
    }

    /// Takes a row lock, or reports the transaction to wait for.
    pub(crate) fn lock(&mut self, key: RowKey) -> Result<(), Fail> {
        if self.holds(&key) {
            return Ok(());
        }
        if let Some(holder) = self.holder(&key) {
            self.waits_for_row = Some(key);
            return Err(Fail::Blocked(holder));
        }
        self.locks.insert(key);
        Ok(())
    }

    /// Whether the row a lock names exists (for this statement).
    pub(crate) fn row_exists(&self, key: &RowKey) -> bool {
        match key {
            RowKey::Job(id) => self.job(id).is_some(),
            RowKey::Queue(id) => self.queue(id).is_some(),
            RowKey::Task(id) => self.task(id).is_some(),
            RowKey::Worker(id) => self.worker(id).is_some(),
            RowKey::Retirement(id) => self.retired(*id),
        }
    }

    /// A table lock of a top-level statement: PostgreSQL takes it while
    /// parsing, which the drivers do in a round trip of its own.
    pub(crate) fn lock_table_at_parse(&mut self, table: Table, mode: TableLock) -> Result<(), Fail> {
        self.take_table_lock(table, mode, true)
    }

    /// A table lock taken while the statement runs (inside a function, or LOCK TABLE).
    pub(crate) fn lock_table(&mut self, table: Table, mode: TableLock) -> Result<(), Fail> {
        self.take_table_lock(table, mode, false)
    }

    /// Takes a table lock for the statement's transaction, or reports the
    /// transaction to wait for: one holding a conflicting lock, or one
    /// waiting earlier for a conflicting lock (PostgreSQL queues requests).
    fn take_table_lock(&mut self, table: Table, mode: TableLock, at_parse: bool) -> Result<(), Fail> {
        let held = |txn: &Txn| txn.table_locks.contains(&(table, mode));
        if self.table_locks.contains(&(table, mode)) || held(self.own) {
            return Ok(());
        }
        let granted: Vec<SessionId> = self
            .others
            .iter()
            .filter(|(_, txn)| txn.table_locks.iter().any(|(t, held)| *t == table && held.conflicts(mode)))
            .map(|(session, _)| *session)
            .collect();
        // A transaction that already holds a lock on the table that conflicts
        // with a waiter's request goes ahead of that waiter (PostgreSQL's
        // ProcSleep), rather than deadlock behind it.
        let mine: Vec<TableLock> = self
            .own
            .table_locks
            .iter()
            .chain(&self.table_locks)
            .filter(|(t, _)| *t == table)
            .map(|(_, m)| *m)
            .collect();
        // Waiters in queue order, up to the first one this transaction goes
        // ahead of (and so ahead of every one after it).
        let queued: Vec<SessionId> = self
            .queued_table_locks
            .iter()
            .filter(|(_, t, _)| *t == table)
            .take_while(|(_, _, wanted)| !mine.iter().any(|held| held.conflicts(*wanted)))
            .filter(|(_, _, wanted)| wanted.conflicts(mode))
            .map(|(session, _, _)| *session)
            .collect();
        if let Some(&holder) = granted.first().or(queued.first()) {
            self.wants_table_lock = Some((table, mode, at_parse));
            // Every one of them is a wait edge, for deadlock detection.
            self.blockers = granted.into_iter().collect();
            self.queued_ahead = queued.into_iter().collect();
            return Err(Fail::Blocked(holder));
        }
        self.table_locks.insert((table, mode));
        Ok(())
    }

    /// `pg_try_advisory_xact_lock` (`wait` false) or `pg_advisory_xact_lock` (`wait` true).
    pub(crate) fn advisory_lock(&mut self, key: Advisory, wait: bool) -> Result<bool, Fail> {
        if self.advisory.contains(&key) || self.own.advisory.contains(&key) {
            return Ok(true);
        }
        let holder = self.others.iter().find(|(_, txn)| txn.advisory.contains(&key)).map(|(id, _)| *id);
        match holder {
            Some(holder) if wait => Err(Fail::Blocked(holder)),
            Some(_) => Ok(false),
            None => {
                self.advisory.insert(key);
                Ok(true)
            }
        }
    }

    /// The other transaction whose uncommitted row versions (inserted,
    /// updated or deleted) carry `key` in the unique index on
    /// `_private_jobs.key`: an insert of `key` waits for it, as PostgreSQL's
    /// speculative insertion does.
    pub(crate) fn job_key_holder(&self, key: &str) -> Option<SessionId> {
        self.others.iter().find(|(_, txn)| txn.touched.job_keys.contains(key)).map(|(s, _)| *s)
    }

    /// As [`Ctx::job_key_holder`], for the unique `_private_tasks.identifier`.
    pub(crate) fn task_identifier_holder(&self, identifier: &str) -> Option<SessionId> {
        self.others.iter().find(|(_, txn)| txn.touched.task_identifiers.contains(identifier)).map(|(s, _)| *s)
    }

    /// As [`Ctx::job_key_holder`], for the unique `_private_job_queues.queue_name`.
    pub(crate) fn queue_name_holder(&self, name: &str) -> Option<SessionId> {
        self.others.iter().find(|(_, txn)| txn.touched.queue_names.contains(name)).map(|(s, _)| *s)
    }

    fn touch_job_keys(&mut self, id: i64, new: Option<&JobRow>) {
        let old = self.job(&id).and_then(|j| j.key.clone());
        self.touched.job_keys.extend(old.into_iter().chain(new.and_then(|j| j.key.clone())));
    }

    pub(crate) fn put_job(&mut self, row: JobRow) {
        assert!(self.holds(&RowKey::Job(row.id)), "job {} written without its row lock", row.id);
        self.touch_job_keys(row.id, Some(&row));
        self.new_place(RowKey::Job(row.id));
        self.writes.jobs.insert(row.id, Some(row));
    }

    /// Deletes a job and, by the foreign key's ON DELETE CASCADE, its retirement marker.
    pub(crate) fn delete_job(&mut self, id: i64) -> Result<(), Fail> {
        assert!(self.holds(&RowKey::Job(id)), "job {id} deleted without its row lock");
        self.touch_job_keys(id, None);
        self.writes.jobs.insert(id, None);
        if self.retired(id) {
            self.lock(RowKey::Retirement(id))?;
            self.writes.retirements.insert(id, None);
        }
        Ok(())
    }

    pub(crate) fn put_queue(&mut self, row: QueueRow) {
        assert!(self.holds(&RowKey::Queue(row.id)), "queue {} written without its row lock", row.id);
        self.touched.queue_names.insert(row.queue_name.clone());
        self.new_place(RowKey::Queue(row.id));
        self.writes.queues.insert(row.id, Some(row));
    }

    pub(crate) fn put_task(&mut self, row: TaskRow) {
        assert!(self.holds(&RowKey::Task(row.id)), "task {} written without its row lock", row.id);
        self.touched.task_identifiers.insert(row.identifier.clone());
        self.writes.tasks.insert(row.id, Some(row));
    }

    pub(crate) fn delete_task(&mut self, id: i32) {
        assert!(self.holds(&RowKey::Task(id)), "task {id} deleted without its row lock");
        let identifier = self.task(&id).map(|t| t.identifier.clone());
        self.touched.task_identifiers.extend(identifier);
        self.writes.tasks.insert(id, None);
    }

    pub(crate) fn delete_queue(&mut self, id: i32) {
        assert!(self.holds(&RowKey::Queue(id)), "queue {id} deleted without its row lock");
        let name = self.queue(&id).map(|q| q.queue_name.clone());
        self.touched.queue_names.extend(name);
        self.writes.queues.insert(id, None);
    }

    pub(crate) fn put_worker(&mut self, row: WorkerRow) {
        assert!(self.holds(&RowKey::Worker(row.id.clone())), "worker {} written without its row lock", row.id);
        self.new_place(RowKey::Worker(row.id.clone()));
        self.writes.workers.insert(row.id.clone(), Some(row));
    }

    pub(crate) fn delete_worker(&mut self, id: &str) {
        assert!(self.holds(&RowKey::Worker(id.to_string())), "worker {id} deleted without its row lock");
        self.writes.workers.insert(id.to_string(), None);
    }

    /// Inserts a retirement marker `ON CONFLICT DO NOTHING`; the foreign key
    /// requires the job (it is always the statement's own locked row here).
    pub(crate) fn retire(&mut self, job_id: i64) -> Result<(), Fail> {
        if self.job(&job_id).is_none() {
            let msg = format!("insert on _private_job_retirements violates foreign key: job {job_id} is not present");
            return Err(Fail::Error(DbError::with_code(msg, "23503")));
        }
        self.lock(RowKey::Retirement(job_id))?;
        if !self.retired(job_id) {
            self.writes.retirements.insert(job_id, Some(()));
        }
        Ok(())
    }

    pub(crate) fn unretire(&mut self, job_id: i64) -> Result<(), Fail> {
        if self.retired(job_id) {
            self.lock(RowKey::Retirement(job_id))?;
            self.writes.retirements.insert(job_id, None);
        }
        Ok(())
    }
}
