//! Support for tests/redis_conformance.rs: a RESP2 client, the throwaway
//! server, a seeded generator, and the three command generators.

pub mod apalis;
pub mod plain;
pub mod resp;
pub mod rng;
pub mod scripts;
pub mod server;
