//! Timestamps and intervals as PostgreSQL computes them.
//!
//! PostgreSQL keeps `timestamptz` as microseconds since 2000-01-01 and an
//! `interval` with a microsecond time part. Every value that enters the model
//! is brought to that precision the way the real path would: a bound
//! parameter the way tokio-postgres encodes it (truncated toward zero from the
//! 2000 epoch), a timestamp inside JSON text the way PostgreSQL parses it
//! (rounded to the nearest microsecond), an interval product with `rint`.

use chrono::{DateTime, Duration, NaiveDate, Timelike, Utc};

/// A `timestamptz` value, always at microsecond precision.
pub type Ts = DateTime<Utc>;

/// PostgreSQL's epoch for timestamps (2000-01-01 00:00:00 UTC).
fn pg_epoch() -> Ts {
    NaiveDate::from_ymd_opt(2000, 1, 1).and_then(|d| d.and_hms_opt(0, 0, 0)).expect("valid date").and_utc()
}

/// Microseconds since PostgreSQL's epoch, truncated toward zero, as
/// tokio-postgres encodes a `DateTime<Utc>` parameter (and as the model takes
/// the store clock). `None`: out of the range the driver can encode.
pub fn micros_since_pg_epoch(ts: Ts) -> Option<i64> {
    ts.naive_utc().signed_duration_since(pg_epoch().naive_utc()).num_microseconds()
}

/// `ts` as PostgreSQL stores it when it arrives as a bound parameter.
pub fn bound(ts: Ts) -> Ts {
    let micros = micros_since_pg_epoch(ts).expect("timestamp within PostgreSQL's range");
    from_micros(micros)
}

pub fn from_micros(micros: i64) -> Ts {
    pg_epoch() + Duration::microseconds(micros)
}

/// `ts` as PostgreSQL stores it after parsing the text chrono's serde writes
/// for it (`json_populate_recordset` in `add_jobs`): the fraction is parsed
/// as a double and rounded half to even to microseconds.
pub fn parsed_from_json_text(ts: Ts) -> Ts {
    let nanos = ts.nanosecond();
    let whole = ts.with_nanosecond(0).expect("zero nanoseconds is valid");
    if nanos.is_multiple_of(1_000) {
        return bound(ts);
    }
    let fraction: f64 = format!("0.{nanos:09}").parse().expect("a decimal fraction");
    let micros = (fraction * 1_000_000.0).round_ties_even() as i64;
    bound(whole) + Duration::microseconds(micros)
}

/// `exp(least(attempts, 10)) * interval '1 second'` in microseconds:
/// `exp` of a double, times the interval's 1,000,000 µs, rounded by `rint`.
pub fn backoff_micros(attempts: i16) -> i64 {
    let exponent = f64::from(attempts.min(10));
    (exponent.exp() * 1_000_000.0).round_ties_even() as i64
}

/// `$n::bigint * interval '1 millisecond'` in microseconds: the bigint is
/// cast to a double, the product rounded by `rint`.
pub fn interval_from_millis(millis: i64) -> i64 {
    (millis as f64 * 1_000.0).round_ties_even() as i64
}

pub fn plus_micros(ts: Ts, micros: i64) -> Ts {
    ts + Duration::microseconds(micros)
}

/// `interval '4 hours'`, the expiry of a lock in graphile's utility functions.
pub const FOUR_HOURS_MICROS: i64 = 4 * 3_600 * 1_000_000;
