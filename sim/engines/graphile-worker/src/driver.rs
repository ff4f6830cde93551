//! graphile_worker's database seam, written here: a `DatabaseDriver` that
//! sends every statement over the harness's store link to the store
//! process, as a connection pool would send it to PostgreSQL.
//!
//! What a connection does that matters to a job queue, modelled:
//! - autocommit statements, each on a connection of its own;
//! - transactions (`begin` ... `commit`), one connection each, begun by
//!   their first statement; a transaction dropped without `commit` sends
//!   ROLLBACK (as tokio-postgres and sqlx do);
//! - a statement whose answer does not come back (a lost request or reply,
//!   a stalled or crashed store, a partition) fails after the connection's
//!   deadline with SQLSTATE 08006, and its effect is unknown to the caller;
//! - no LISTEN/NOTIFY (`listen` answers `None`): workers poll.

use crate::book::Book;
use crate::Graphile;
use graphile_worker_database::{
    BoxFuture, DatabaseDriver, DbError, DbExecutor, DbParams, DbRow, DbTransaction, TransactionDriver,
};
use leasesim_graphile_model::Output;
use leasesim_vocab::ids::{Fence, Owner, TxnId};
use leasesim_vocab::truth::{Fact, TxnSend};
use leasesim_world::history::Recorder;
use leasesim_world::world::deadline::Deadlines;
use leasesim_world::world::link::Link;
use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What a process sends the store.
#[derive(Debug, Clone)]
pub enum Statement {
    /// One statement: autocommit (`txn: None`) or in a transaction.
    Run {
        txn: Option<TxnId>,
        sql: Arc<str>,
        params: DbParams,
        /// The attempt whose body returned on the sending process since its
        /// previous statement ([`Book::returned`]): if this is an outcome,
        /// the attempt it speaks for. The harness's note, read only by the
        /// classifier; PostgreSQL sees no such thing.
        returned: Option<Fence>,
    },
    Commit {
        txn: TxnId,
    },
    Rollback {
        txn: TxnId,
    },
}

/// What the store answers.
pub type Answer = Result<Output, DbError>;

/// SQLSTATE of a connection that broke (the deadline passed).
pub const CONNECTION_FAILURE: &str = "08006";

/// A process's connection pool to the simulated database.
#[derive(Clone)]
pub struct SimDatabase {
    link: Link<Graphile>,
    /// The worker it belongs to (`None`: a client call, which opens no
    /// transaction).
    owner: Option<Owner>,
    next_txn: Arc<AtomicU64>,
    deadline: Duration,
    /// The connection deadlines of this process (of this one client call):
    /// forgotten when a statement is answered, as tokio's are.
    deadlines: Deadlines,
    rec: Recorder,
    book: Book,
}

impl std::fmt::Debug for SimDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimDatabase({:?})", self.link.sender())
    }
}

impl SimDatabase {
    pub fn new(link: Link<Graphile>, owner: Option<Owner>, deadline_ms: u64, rec: Recorder, book: Book) -> Self {
        SimDatabase {
            link,
            owner,
            next_txn: Arc::new(AtomicU64::new(1)),
            deadline: Duration::from_millis(deadline_ms),
            deadlines: Deadlines::new(),
            rec,
            book,
        }
    }

    /// Sends one request and waits for its answer, at most the deadline.
    async fn call(&self, req: Statement) -> Answer {
        if let (Some(from), Some((txn, send))) = (self.owner, txn_send(&req)) {
            self.rec.fact(Fact::TxnSent { from, txn, fence: None, send });
        }
        match self.deadlines.timeout(self.deadline, self.link.call(req)).await {
            Ok(answer) => answer,
            Err(_) => Err(DbError::with_code("connection to the database timed out", CONNECTION_FAILURE)),
        }
    }

    async fn run(&self, txn: Option<TxnId>, sql: &str, params: DbParams) -> Answer {
        // Taken when graphile hands the statement over, before the link's
        // hop: statements may reach the store in another order than sent.
        let returned = self.owner.and_then(|owner| self.book.take_returned(owner));
        self.call(Statement::Run { txn, sql: sql.into(), params, returned }).await
    }
}

/// What a worker sends of a transaction (its statements, COMMIT, ROLLBACK).
fn txn_send(req: &Statement) -> Option<(TxnId, TxnSend)> {
    match req {
        Statement::Run { txn: Some(txn), .. } => Some((*txn, TxnSend::Statement)),
        Statement::Run { txn: None, .. } => None,
        Statement::Commit { txn } => Some((*txn, TxnSend::Commit)),
        Statement::Rollback { txn } => Some((*txn, TxnSend::Rollback)),
    }
}

fn affected(output: Output) -> u64 {
    match output {
        Output::Affected(n) => n,
        Output::Rows(rows) => rows.len() as u64,
    }
}

fn rows(output: Output) -> Vec<DbRow> {
    match output {
        Output::Rows(rows) => rows.iter().map(|r| r.to_db_row()).collect(),
        Output::Affected(_) => Vec::new(),
    }
}

impl DbExecutor for SimDatabase {
    fn execute<'a>(&'a self, sql: &'a str, params: DbParams) -> BoxFuture<'a, Result<u64, DbError>> {
        Box::pin(async move { self.run(None, sql, params).await.map(affected) })
    }

    fn fetch_all<'a>(&'a self, sql: &'a str, params: DbParams) -> BoxFuture<'a, Result<Vec<DbRow>, DbError>> {
        Box::pin(async move { self.run(None, sql, params).await.map(rows) })
    }
}

impl DatabaseDriver for SimDatabase {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn begin<'a>(&'a self) -> BoxFuture<'a, Result<DbTransaction, DbError>> {
        Box::pin(async move {
            let Some(owner) = self.owner else {
                return Err(DbError::new("leasesim's client driver opens no transactions"));
            };
            let txn = TxnId { owner, seq: self.next_txn.fetch_add(1, Ordering::Relaxed) };
            let driver = SimTxn { db: self.clone(), txn, ended: AtomicBool::new(false) };
            Ok(DbTransaction::new(Box::new(driver)))
        })
    }

    fn listen<'a>(
        &'a self,
        _channel: &'a str,
    ) -> BoxFuture<'a, Result<Option<graphile_worker_database::NotificationStream>, DbError>> {
        Box::pin(async { Ok(None) })
    }
}

/// One transaction on a connection of its own.
struct SimTxn {
    db: SimDatabase,
    txn: TxnId,
    /// COMMIT was sent (a dropped transaction sends ROLLBACK otherwise).
    ended: AtomicBool,
}

impl DbExecutor for SimTxn {
    fn execute<'a>(&'a self, sql: &'a str, params: DbParams) -> BoxFuture<'a, Result<u64, DbError>> {
        Box::pin(async move { self.db.run(Some(self.txn), sql, params).await.map(affected) })
    }

    fn fetch_all<'a>(&'a self, sql: &'a str, params: DbParams) -> BoxFuture<'a, Result<Vec<DbRow>, DbError>> {
        Box::pin(async move { self.db.run(Some(self.txn), sql, params).await.map(rows) })
    }
}

impl TransactionDriver for SimTxn {
    fn commit(self: Box<Self>) -> BoxFuture<'static, Result<(), DbError>> {
        self.ended.store(true, Ordering::Relaxed);
        Box::pin(async move { self.db.call(Statement::Commit { txn: self.txn }).await.map(|_| ()) })
    }
}

impl Drop for SimTxn {
    fn drop(&mut self) {
        if self.ended.load(Ordering::Relaxed) {
            return;
        }
        // A transaction dropped without COMMIT: the driver sends ROLLBACK on
        // its connection and nobody waits for the answer. Not when the
        // process itself is going away (its node is killed: the database
        // sees the connection close instead).
        if madsim::runtime::Handle::try_current().is_err() {
            return;
        }
        let (db, txn) = (self.db.clone(), self.txn);
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            tokio::spawn(async move {
                let _ = db.call(Statement::Rollback { txn }).await;
            })
        }));
    }
}
