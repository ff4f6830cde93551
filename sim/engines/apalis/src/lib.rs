//! apalis-redis 1.0.0 under the harness: its adapter.
//!
//! apalis's own worker (`apalis_core::worker::builder::WorkerBuilder` with
//! `apalis_redis::RedisStorage<Args, SimRedis>`) runs unmodified. Only its
//! documented seams are the harness's: its timer crate (`futures-timer`,
//! patched in: `timer/`, on madsim time) and its connection
//! ([`conn::SimRedis`], a `redis::aio::ConnectionLike` that sends every
//! command over a [`conn::Wire`] of the harness's). The store answers with a
//! model of Redis that runs apalis's real Lua scripts (`redis-model/`, crate
//! `leasesim-redis-model`, checked against a real redis-server).

pub mod call;
pub mod conn;
pub mod resp;
