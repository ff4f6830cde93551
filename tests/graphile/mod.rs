//! The machinery of `graphile_conformance`: a throwaway PostgreSQL cluster
//! (the same as `pg_conformance`'s), graphile's migrations run on it through
//! a synchronous driver, sessions on threads of their own, generated
//! sequences of graphile's own statements, and a world that runs the model
//! and PostgreSQL side by side.

#[path = "../pg/cluster.rs"]
pub mod cluster;
pub mod gen;
pub mod pg;
pub mod world;
