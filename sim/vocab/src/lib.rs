//! leasesim's vocabulary: what happens at the seams of a lease-based task
//! engine, in the harness's own words.
//!
//! Every engine under test is described in these terms by its adapter: its
//! requests are classified as [`op::Op`]s, its answers normalized to
//! [`op::Response`]s, its stored rows to [`task::Row`]s, its own events (if it
//! reports any) to [`testimony::Event`]s, its promises and capabilities
//! declared as [`promise::Promises`] and [`promise::Capabilities`]. The
//! history of a run ([`history::Record`]) is made of nothing else, so the
//! checkers, which see only records, judge every engine alike.

pub mod faults;
pub mod history;
pub mod ids;
pub mod op;
pub mod promise;
pub mod task;
pub mod testimony;
pub mod truth;
