//! The PostgreSQL side: bound values and rows converted as graphile's
//! tokio-postgres driver converts them, a synchronous `DatabaseDriver` over
//! the `postgres` crate (to run graphile's own migrations without a tokio
//! runtime of ours), and sessions that each own a connection on a thread of
//! their own, so that a statement can wait for a lock while others run.

use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use graphile_worker_database::{
    BoxFuture, DatabaseDriver, DbCell, DbError, DbExecutor, DbParams, DbRow, DbTransaction, DbValue,
    NotificationStream, TransactionDriver,
};
use postgres::types::{ToSql, Type};
use serde_json::Value;

/// A PostgreSQL error or a client-side one (no SQLSTATE).
#[derive(Debug, Clone)]
pub struct PgError {
    pub code: Option<String>,
    pub message: String,
}

impl From<postgres::Error> for PgError {
    fn from(e: postgres::Error) -> PgError {
        let code = e.as_db_error().map(|d| d.code().code().to_string());
        let message = e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_string());
        PgError { code, message }
    }
}

/// One row: columns in order, decoded as graphile_worker_database's
/// tokio-postgres driver decodes them.
pub type Cells = Vec<(String, DbCell)>;

#[derive(Debug, Clone)]
pub enum PgOut {
    Rows(Vec<Cells>),
    Count(u64),
}

fn boxed(value: &DbValue) -> Box<dyn ToSql + Sync + Send> {
    match value.clone() {
        DbValue::Bool(v) => Box::new(v),
        DbValue::BoolOpt(v) => Box::new(v),
        DbValue::I16(v) => Box::new(v),
        DbValue::I16Opt(v) => Box::new(v),
        DbValue::I32(v) => Box::new(v),
        DbValue::I32Opt(v) => Box::new(v),
        DbValue::I64(v) => Box::new(v),
        DbValue::I64Opt(v) => Box::new(v),
        DbValue::Json(v) => Box::new(v),
        DbValue::JsonOpt(v) => Box::new(v),
        DbValue::Text(v) => Box::new(v),
        DbValue::TextOpt(v) => Box::new(v),
        DbValue::TextArray(v) => Box::new(v),
        DbValue::TextArrayOpt(v) => Box::new(v),
        DbValue::I32Array(v) => Box::new(v),
        DbValue::I64Array(v) => Box::new(v),
        DbValue::TimestampTz(v) => Box::new(v),
        DbValue::TimestampTzOpt(v) => Box::new(v),
    }
}

fn cell(row: &postgres::Row, index: usize) -> Result<DbCell, PgError> {
    let ty = row.columns()[index].type_();
    let get_err = |e: postgres::Error| PgError::from(e);
    Ok(match *ty {
        Type::BOOL => row.try_get::<_, Option<bool>>(index).map_err(get_err)?.map_or(DbCell::Null, DbCell::Bool),
        Type::INT2 => row.try_get::<_, Option<i16>>(index).map_err(get_err)?.map_or(DbCell::Null, DbCell::I16),
        Type::INT4 => row.try_get::<_, Option<i32>>(index).map_err(get_err)?.map_or(DbCell::Null, DbCell::I32),
        Type::INT8 => row.try_get::<_, Option<i64>>(index).map_err(get_err)?.map_or(DbCell::Null, DbCell::I64),
        Type::JSON | Type::JSONB => {
            row.try_get::<_, Option<Value>>(index).map_err(get_err)?.map_or(DbCell::Null, DbCell::Json)
        }
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
            row.try_get::<_, Option<String>>(index).map_err(get_err)?.map_or(DbCell::Null, DbCell::Text)
        }
        Type::TIMESTAMPTZ => {
            row.try_get::<_, Option<DateTime<Utc>>>(index).map_err(get_err)?.map_or(DbCell::Null, DbCell::TimestampTz)
        }
        ref other => {
            let name = row.columns()[index].name();
            return Err(PgError {
                code: None,
                message: format!("unsupported result type `{other}` for column `{name}`"),
            });
        }
    })
}

pub fn cells(row: &postgres::Row) -> Result<Cells, PgError> {
    (0..row.len()).map(|i| Ok((row.columns()[i].name().to_string(), cell(row, i)?))).collect()
}

/// Runs one statement: `query` when it answers rows, else `execute`.
pub fn run(client: &mut postgres::Client, sql: &str, params: &[DbValue], rows: bool) -> Result<PgOut, PgError> {
    let boxed: Vec<Box<dyn ToSql + Sync + Send>> = params.iter().map(boxed).collect();
    let refs: Vec<&(dyn ToSql + Sync)> = boxed.iter().map(|b| b.as_ref() as &(dyn ToSql + Sync)).collect();
    if rows {
        let out = client.query(sql, &refs)?;
        Ok(PgOut::Rows(out.iter().map(cells).collect::<Result<_, _>>()?))
    } else {
        Ok(PgOut::Count(client.execute(sql, &refs)?))
    }
}

/// `graphile_worker_database::DatabaseDriver` over one synchronous client,
/// for graphile's own `migrate` driven by `futures::executor::block_on`.
#[derive(Clone)]
pub struct SyncDriver {
    client: Arc<Mutex<postgres::Client>>,
}

impl std::fmt::Debug for SyncDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SyncDriver")
    }
}

impl SyncDriver {
    pub fn new(client: postgres::Client) -> SyncDriver {
        SyncDriver { client: Arc::new(Mutex::new(client)) }
    }

    fn exec(&self, sql: &str, params: DbParams, rows: bool) -> Result<PgOut, DbError> {
        let mut client = self.client.lock().expect("driver client");
        run(&mut client, sql, params.values(), rows).map_err(|e| match e.code {
            Some(code) => DbError::with_code(e.message, code),
            None => DbError::new(e.message),
        })
    }

    fn simple(&self, sql: &str) -> Result<(), DbError> {
        self.client.lock().expect("driver client").batch_execute(sql).map_err(|e| {
            let e = PgError::from(e);
            DbError::with_code(e.message, e.code.unwrap_or_default())
        })
    }
}

impl DbExecutor for SyncDriver {
    fn execute<'a>(&'a self, sql: &'a str, params: DbParams) -> BoxFuture<'a, Result<u64, DbError>> {
        let out = self.exec(sql, params, false).map(|out| match out {
            PgOut::Count(n) => n,
            PgOut::Rows(rows) => rows.len() as u64,
        });
        Box::pin(async move { out })
    }

    fn fetch_all<'a>(&'a self, sql: &'a str, params: DbParams) -> BoxFuture<'a, Result<Vec<DbRow>, DbError>> {
        let out = self.exec(sql, params, true).map(|out| match out {
            PgOut::Rows(rows) => rows.into_iter().map(|r| DbRow::new(r.into_iter().collect())).collect(),
            PgOut::Count(_) => Vec::new(),
        });
        Box::pin(async move { out })
    }
}

impl DatabaseDriver for SyncDriver {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn begin<'a>(&'a self) -> BoxFuture<'a, Result<DbTransaction, DbError>> {
        let out =
            self.simple("BEGIN").map(|()| DbTransaction::new(Box::new(SyncTxn { driver: self.clone(), open: true })));
        Box::pin(async move { out })
    }

    fn listen<'a>(&'a self, _channel: &'a str) -> BoxFuture<'a, Result<Option<NotificationStream>, DbError>> {
        Box::pin(async { Ok(None) })
    }
}

struct SyncTxn {
    driver: SyncDriver,
    open: bool,
}

impl DbExecutor for SyncTxn {
    fn execute<'a>(&'a self, sql: &'a str, params: DbParams) -> BoxFuture<'a, Result<u64, DbError>> {
        self.driver.execute(sql, params)
    }

    fn fetch_all<'a>(&'a self, sql: &'a str, params: DbParams) -> BoxFuture<'a, Result<Vec<DbRow>, DbError>> {
        self.driver.fetch_all(sql, params)
    }
}

impl TransactionDriver for SyncTxn {
    fn commit(mut self: Box<Self>) -> BoxFuture<'static, Result<(), DbError>> {
        self.open = false;
        let out = self.driver.simple("COMMIT");
        Box::pin(async move { out })
    }
}

impl Drop for SyncTxn {
    fn drop(&mut self) {
        if self.open {
            let _ = self.driver.simple("ROLLBACK");
        }
    }
}

/// Work for a session's thread.
enum Work {
    Statement { sql: String, params: Vec<DbValue>, rows: bool },
    Simple(String),
}

type Reply = Result<PgOut, PgError>;

/// One connection, on a thread of its own: a statement sent to it may wait
/// for a lock while the test goes on with other sessions.
pub struct Session {
    work: Sender<Work>,
    replies: Receiver<Reply>,
    pub pid: i32,
    /// Whether a statement was sent whose reply has not been taken.
    pub pending: bool,
}

impl Session {
    pub fn open(mut client: postgres::Client) -> Result<Session, PgError> {
        let pid: i32 = client.query_one("select pg_backend_pid()", &[])?.get(0);
        let (work, inbox) = channel::<Work>();
        let (outbox, replies) = channel::<Reply>();
        std::thread::spawn(move || {
            for job in inbox {
                let reply = match job {
                    Work::Statement { sql, params, rows } => run(&mut client, &sql, &params, rows),
                    Work::Simple(sql) => client.batch_execute(&sql).map(|()| PgOut::Count(0)).map_err(PgError::from),
                };
                if outbox.send(reply).is_err() {
                    return;
                }
            }
        });
        Ok(Session { work, replies, pid, pending: false })
    }

    pub fn send(&mut self, sql: &str, params: &[DbValue], rows: bool) {
        assert!(!self.pending, "session {} is busy", self.pid);
        let work = Work::Statement { sql: sql.to_string(), params: params.to_vec(), rows };
        self.work.send(work).expect("session thread");
        self.pending = true;
    }

    pub fn send_simple(&mut self, sql: &str) {
        assert!(!self.pending, "session {} is busy", self.pid);
        self.work.send(Work::Simple(sql.to_string())).expect("session thread");
        self.pending = true;
    }

    /// The reply, if it comes within `wait`.
    pub fn reply_within(&mut self, wait: Duration) -> Option<Reply> {
        match self.replies.recv_timeout(wait) {
            Ok(reply) => {
                self.pending = false;
                Some(reply)
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => panic!("session thread {} died", self.pid),
        }
    }

    /// A simple statement run to completion (it must not wait for a lock).
    pub fn simple(&mut self, sql: &str) -> Result<(), PgError> {
        self.send_simple(sql);
        match self.reply_within(Duration::from_secs(30)) {
            Some(reply) => reply.map(|_| ()),
            None => panic!("`{sql}` did not finish on session {}", self.pid),
        }
    }
}

/// What happened to a statement sent to a session.
#[derive(Debug)]
pub enum Outcome {
    Replied(Reply),
    /// Waiting for a lock held by these backends (`pg_blocking_pids`).
    Waiting(Vec<i32>),
}

/// Waits until the session's statement replies or waits for a lock, as the
/// monitor connection sees it. A statement that does neither within
/// `timeout` is a failure of the test.
pub fn settle(session: &mut Session, monitor: &mut postgres::Client, timeout: Duration) -> Outcome {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(reply) = session.reply_within(Duration::from_micros(300)) {
            return Outcome::Replied(reply);
        }
        let blockers: Vec<i32> =
            monitor.query_one("select pg_blocking_pids($1)", &[&session.pid]).expect("pg_blocking_pids").get(0);
        if !blockers.is_empty() {
            // The statement may have been granted its lock meanwhile: look once more.
            if let Some(reply) = session.reply_within(Duration::from_micros(200)) {
                return Outcome::Replied(reply);
            }
            return Outcome::Waiting(blockers);
        }
        assert!(Instant::now() < deadline, "session {} neither answered nor waited within {timeout:?}", session.pid);
    }
}
