//! Transactions that span round trips, on PostgreSQL: one session (its own
//! connection) per open `TxnId`, holding a real open READ COMMITTED
//! transaction between its statements, so its row locks are real and other
//! sessions really wait for them or skip them.
//!
//! Two of the model's rules are in store time, which PostgreSQL cannot know,
//! so they are emulated here before each request, as the store process would
//! enforce them: a transaction open past `txn_timeout_ms` is rolled back
//! (the model aborts it lazily at the next request), and a claim or
//! heartbeat of a newer incarnation of a process rolls back the sessions of
//! its older incarnations (their client is gone, its connections with it).
//! Refusing a statement of a transaction that ended (`TxnClosed`) is the
//! protocol's rule, kept here as the set of ended transactions.

use super::store::{Conn, Error};
use leasesim::config::EngineConfig;
use leasesim::ids::{Owner, ProcId, TxnId};
use leasesim::proto::{Rejection, Request, Response};
use std::collections::{BTreeMap, BTreeSet};

/// What the transactions that span round trips did, over all sequences.
#[derive(Debug, Clone, Copy, Default)]
pub struct TxnCounts {
    /// Transactions begun (a session's `BEGIN`).
    pub txns: u64,
    pub commits: u64,
    /// Statements run in a session.
    pub statements: u64,
    /// Requests (statements or not) that waited for a row lock another
    /// session held, until `lock_timeout` (SQLSTATE 55P03).
    pub lock_waits: u64,
}

/// An open transaction: its session and its deadline in store time.
struct Session {
    conn: Conn,
    deadline_ms: u64,
}

pub struct Sessions {
    conninfo: String,
    /// Connections whose transaction ended, kept for the next one.
    idle: Vec<Conn>,
    open: BTreeMap<TxnId, Session>,
    ended: BTreeSet<TxnId>,
    /// The newest incarnation seen per process (claims and heartbeats).
    newest: BTreeMap<ProcId, u32>,
    pub counts: TxnCounts,
}

impl Sessions {
    pub fn new(conninfo: String) -> Sessions {
        Sessions {
            conninfo,
            idle: Vec::new(),
            open: BTreeMap::new(),
            ended: BTreeSet::new(),
            newest: BTreeMap::new(),
            counts: TxnCounts::default(),
        }
    }

    /// Rolls back every open session and forgets every transaction.
    pub fn reset(&mut self) -> Result<(), Error> {
        let open: Vec<TxnId> = self.open.keys().copied().collect();
        for txn in open {
            self.close(txn, "ROLLBACK")?;
        }
        self.ended.clear();
        self.newest.clear();
        Ok(())
    }

    /// The store-time rules PostgreSQL cannot know (see the module doc),
    /// applied before `req` as the model applies them.
    pub fn follow_store_time(&mut self, now_ms: u64, req: &Request) -> Result<(), Error> {
        let expired: Vec<TxnId> =
            self.open.iter().filter(|(_, s)| s.deadline_ms <= now_ms).map(|(id, _)| *id).collect();
        for txn in expired {
            self.close(txn, "ROLLBACK")?;
        }
        if let Request::Claim { owner, .. } | Request::Heartbeat { owner } = req {
            let newest = self.newest.entry(owner.proc).or_insert(owner.incarnation);
            if owner.incarnation > *newest {
                *newest = owner.incarnation;
                self.end_older_than(*owner)?;
            }
        }
        Ok(())
    }

    /// Rolls back the sessions of incarnations of `owner.proc` older than
    /// `owner`. Their statements are refused as superseded from now on, so
    /// their ended transactions need no record (as in the model).
    fn end_older_than(&mut self, owner: Owner) -> Result<(), Error> {
        let older = |id: &TxnId| id.owner.proc == owner.proc && id.owner.incarnation < owner.incarnation;
        let doomed: Vec<TxnId> = self.open.keys().copied().filter(older).collect();
        for txn in doomed {
            self.close(txn, "ROLLBACK")?;
        }
        self.ended.retain(|id| !older(id));
        Ok(())
    }

    fn superseded(&self, txn: TxnId) -> bool {
        self.newest.get(&txn.owner.proc).is_some_and(|&n| n > txn.owner.incarnation)
    }

    /// One statement of `txn` in its session, opened by its first statement;
    /// `commit` commits after it.
    pub fn exec(
        &mut self,
        cfg: &EngineConfig,
        now_ms: u64,
        txn: TxnId,
        stmt: &Request,
        commit: bool,
    ) -> Result<Response, Error> {
        let closed = self.superseded(txn) || (!self.open.contains_key(&txn) && self.ended.contains(&txn));
        if closed || !stmt.runs_in_txn() {
            // Never run: a statement the protocol does not run in a
            // transaction ends it, as a SQL error would.
            self.rollback(txn)?;
            return Ok(Response::Rejected { reason: Rejection::TxnClosed });
        }
        if !self.open.contains_key(&txn) {
            self.begin(cfg, now_ms, txn)?;
        }
        self.counts.statements += 1;
        let session = self.open.get_mut(&txn).expect("the session was just opened");
        let Some(resp) = session.conn.run(cfg, now_ms, true, stmt)? else {
            // Rolled back already: the session only goes back to the pool.
            self.counts.lock_waits += 1;
            self.close(txn, "")?;
            return Ok(Response::Rejected { reason: Rejection::TimedOut });
        };
        if commit {
            self.counts.commits += 1;
            self.close(txn, "COMMIT")?;
        }
        Ok(resp)
    }

    /// Rolls `txn` back. A transaction not open (never seen, or ended) is
    /// answered `TxnClosed`, and one never seen cannot open afterwards.
    pub fn rollback(&mut self, txn: TxnId) -> Result<Response, Error> {
        let was_open = self.open.contains_key(&txn);
        if was_open {
            self.close(txn, "ROLLBACK")?;
        } else if !self.superseded(txn) {
            self.ended.insert(txn);
        }
        Ok(if was_open { Response::Ack } else { Response::Rejected { reason: Rejection::TxnClosed } })
    }

    fn begin(&mut self, cfg: &EngineConfig, now_ms: u64, txn: TxnId) -> Result<(), Error> {
        let mut conn = match self.idle.pop() {
            Some(conn) => conn,
            None => Conn::new(postgres::Client::connect(&self.conninfo, postgres::NoTls)?)?,
        };
        conn.begin()?;
        self.counts.txns += 1;
        self.open.insert(txn, Session { conn, deadline_ms: now_ms + cfg.txn_timeout_ms });
        Ok(())
    }

    /// Ends `txn`'s session with `how` (`COMMIT`, `ROLLBACK`, or nothing when
    /// it already ended) and keeps its connection for the next transaction.
    fn close(&mut self, txn: TxnId, how: &str) -> Result<(), Error> {
        let mut session = self.open.remove(&txn).expect("closing an open session");
        if !how.is_empty() {
            session.conn.end(how)?;
        }
        self.ended.insert(txn);
        self.idle.push(session.conn);
        Ok(())
    }
}
