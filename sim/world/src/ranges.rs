//! Ranges of numeric fields, for the errors that refuse a value: one line
//! naming the field, the allowed range and the value. Every scenario field
//! and every adapter's configuration is checked against one of these.

/// One day, in ms.
pub const DAY_MS: u64 = 24 * 60 * 60 * 1_000;

/// No duration that describes a deployment (or a simulated run of one) is
/// longer than this.
pub const MAX_DURATION_MS: u64 = 30 * DAY_MS;

/// The values a numeric field may take, inclusive, and their unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub min: u64,
    pub max: u64,
    pub unit: Unit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Ms,
    Count,
}

impl Range {
    /// A duration in milliseconds.
    pub const fn ms(min: u64, max: u64) -> Range {
        Range { min, max, unit: Unit::Ms }
    }

    /// A count (permits, tasks, a divisor...).
    pub const fn count(min: u64, max: u64) -> Range {
        Range { min, max, unit: Unit::Count }
    }

    pub fn contains(self, value: u64) -> bool {
        (self.min..=self.max).contains(&value)
    }

    /// `Ok` if `value` is in range; otherwise one line naming `path`, the
    /// allowed range and the value.
    pub fn check(self, path: &str, value: u64) -> Result<(), String> {
        if self.contains(value) {
            return Ok(());
        }
        Err(format!(
            "{path}: must be from {} to {}, got {}",
            self.show(self.min),
            self.show(self.max),
            self.show(value)
        ))
    }

    /// A value in this range's unit; long durations also in days or hours.
    fn show(self, value: u64) -> String {
        const HOUR_MS: u64 = 60 * 60 * 1_000;
        if self.unit == Unit::Count {
            return value.to_string();
        }
        let plural = |n: u64, unit: &str| if n == 1 { format!("1 {unit}") } else { format!("{n} {unit}s") };
        if value >= DAY_MS && value.is_multiple_of(DAY_MS) {
            format!("{value} ms ({})", plural(value / DAY_MS, "day"))
        } else if value >= HOUR_MS && value.is_multiple_of(HOUR_MS) {
            format!("{value} ms ({})", plural(value / HOUR_MS, "hour"))
        } else {
            format!("{value} ms")
        }
    }
}
