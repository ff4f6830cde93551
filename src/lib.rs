//! leasesim's engine: a lease-based background task engine.
//!
//! A [`store`] process holds tasks, attempts, leases, retries, groups and
//! indexes; [`worker`] processes claim tasks under a concurrency semaphore,
//! execute them through an application [`handler::TaskHandler`], heartbeat,
//! renew leases, run maintenance passes and record outcomes; a [`client`]
//! enqueues work and queries indexes.
//!
//! Everything that crosses a process boundary goes through [`proto::Transport`];
//! everything that is observable is emitted through [`event::Observer`]; time
//! is read through [`clock::Clock`]. Those three seams are all that an embedder
//! (a real deployment, or the leasesim harness) has to provide. The engine does
//! not know which one it is running under.

pub mod client;
pub mod clock;
pub mod config;
pub mod defects;
pub mod event;
pub mod handler;
pub mod ids;
pub mod proto;
pub mod store;
pub mod task;
pub mod worker;
