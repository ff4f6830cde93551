//! Numbers as Redis reads and writes them: its strict integer parser
//! (`string2ll`), C's `strtod` (which Redis and lua-cjson both call for
//! doubles), and C's `%.<P>g` (Redis prints doubles with `%.17g`, lua-cjson
//! with `%.14g`). Each is a port of the C behaviour, not a Rust idiom, because
//! the replies must be byte-for-byte those of the real server.

/// Redis's `string2ll`: an optional `-`, then no leading zeros, no `+`, no
/// spaces, nothing after the digits, and the result must fit an i64.
pub(crate) fn parse_i64(s: &[u8]) -> Option<i64> {
    // LONG_STR_SIZE is 21: longer strings are rejected before parsing.
    if s.is_empty() || s.len() >= 21 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (negative, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut magnitude: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        magnitude = magnitude.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    if negative {
        if magnitude > i64::MAX as u64 + 1 {
            return None;
        }
        Some((magnitude as i64).wrapping_neg())
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// What C's `strtod` makes of the longest prefix of `s` it accepts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Strtod {
    pub value: f64,
    /// Bytes consumed; 0 means no conversion (and `value` is 0).
    pub len: usize,
    /// `errno == ERANGE` with a result of ±HUGE_VAL or zero: the text was a
    /// finite number too large, or a non-zero number too small, for a double.
    pub out_of_range: bool,
}

/// glibc `strtod`: leading white space, a sign, then `inf`/`infinity`,
/// `nan`/`nan(...)`, a hexadecimal float (`0x1.8p3`) or a decimal one.
/// The input ends at the first NUL, as for a C string.
pub(crate) fn strtod(s: &[u8]) -> Strtod {
    let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
    let s = &s[..end];
    let none = Strtod { value: 0.0, len: 0, out_of_range: false };
    let mut i = s.iter().take_while(|&&b| is_c_space(b)).count();
    let negative = match s.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let rest = &s[i..];
    let parsed = parse_special(rest).or_else(|| parse_hex(rest)).or_else(|| parse_decimal(rest));
    match parsed {
        None => none,
        Some((value, len, out_of_range)) => {
            let value = if negative { -value } else { value };
            Strtod { value, len: i + len, out_of_range }
        }
    }
}

/// C's `isspace` in the "C" locale.
pub(crate) fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn starts_with_ignore_case(s: &[u8], prefix: &[u8]) -> bool {
    s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix)
}

/// `inf`, `infinity`, `nan` and `nan(chars)`, any case.
fn parse_special(s: &[u8]) -> Option<(f64, usize, bool)> {
    if starts_with_ignore_case(s, b"infinity") {
        return Some((f64::INFINITY, 8, false));
    }
    if starts_with_ignore_case(s, b"inf") {
        return Some((f64::INFINITY, 3, false));
    }
    if starts_with_ignore_case(s, b"nan") {
        let mut len = 3;
        if s.get(3) == Some(&b'(') {
            let inner = s[4..].iter().take_while(|b| b.is_ascii_alphanumeric() || **b == b'_').count();
            if s.get(4 + inner) == Some(&b')') {
                len = 5 + inner;
            }
        }
        return Some((f64::NAN, len, false));
    }
    None
}

/// A hexadecimal float: `0x` then hex digits with an optional point, then an
/// optional binary exponent `p[+-]digits`. Up to 16 significant hex digits
/// are kept (later ones only set a sticky bit), which is exact for every
/// double.
fn parse_hex(s: &[u8]) -> Option<(f64, usize, bool)> {
    if s.len() < 2 || s[0] != b'0' || (s[1] | 0x20) != b'x' {
        return None;
    }
    let mut i = 2;
    let mut mantissa: u64 = 0;
    let mut kept = 0;
    let mut exp2: i64 = 0;
    let mut any_digit = false;
    let mut sticky = false;
    let mut seen_point = false;
    while i < s.len() {
        let b = s[i];
        if b == b'.' && !seen_point {
            seen_point = true;
        } else if let Some(d) = (b as char).to_digit(16) {
            any_digit = true;
            if mantissa == 0 && d == 0 {
                // Leading zeros carry no precision.
                if seen_point {
                    exp2 -= 4;
                }
            } else if kept < 16 {
                mantissa = mantissa << 4 | u64::from(d);
                kept += 1;
                if seen_point {
                    exp2 -= 4;
                }
            } else {
                sticky |= d != 0;
                if !seen_point {
                    exp2 += 4;
                }
            }
        } else {
            break;
        }
        i += 1;
    }
    if !any_digit {
        // "0x" without digits: strtod reads just the "0".
        return Some((0.0, 1, false));
    }
    if let Some((e, len)) = parse_exponent(&s[i..], b'p') {
        exp2 = exp2.saturating_add(e);
        i += len;
    }
    if sticky {
        mantissa |= 1;
    }
    let value = scale_by_power_of_two(mantissa as f64, exp2);
    let out_of_range = value.is_infinite() || (value == 0.0 && mantissa != 0);
    Some((value, i, out_of_range))
}

/// `e[+-]digits` (or `p...` for hex floats); only consumed when digits follow.
fn parse_exponent(s: &[u8], marker: u8) -> Option<(i64, usize)> {
    if s.first().map(|b| b | 0x20) != Some(marker) {
        return None;
    }
    let mut i = 1;
    let negative = match s.get(1) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let digits = s[i..].iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let mut e: i64 = 0;
    for &d in &s[i..i + digits] {
        e = e.saturating_mul(10).saturating_add(i64::from(d - b'0'));
    }
    Some((if negative { -e } else { e }, i + digits))
}

fn scale_by_power_of_two(mut value: f64, mut exp2: i64) -> f64 {
    // Multiply in steps that stay exact until the final rounding step.
    while exp2 > 0 && value.is_finite() && value != 0.0 {
        let step = exp2.min(1000);
        value *= 2f64.powi(step as i32);
        exp2 -= step;
    }
    while exp2 < 0 && value != 0.0 {
        let step = (-exp2).min(1000);
        value /= 2f64.powi(step as i32);
        exp2 += step;
    }
    value
}

/// Digits with an optional point and exponent; Rust's parser rounds
/// correctly, as glibc does.
fn parse_decimal(s: &[u8]) -> Option<(f64, usize, bool)> {
    let int_digits = s.iter().take_while(|b| b.is_ascii_digit()).count();
    let mut i = int_digits;
    let mut frac_digits = 0;
    if s.get(i) == Some(&b'.') {
        frac_digits = s[i + 1..].iter().take_while(|b| b.is_ascii_digit()).count();
        if int_digits + frac_digits > 0 {
            i += 1 + frac_digits;
        }
    }
    if int_digits + frac_digits == 0 {
        return None;
    }
    let nonzero_digit = s[..i].iter().any(|b| (b'1'..=b'9').contains(b));
    if let Some((_, len)) = parse_exponent(&s[i..], b'e') {
        i += len;
    }
    let text = std::str::from_utf8(&s[..i]).ok()?;
    let value: f64 = text.parse().ok()?;
    let out_of_range = value.is_infinite() || (value == 0.0 && nonzero_digit);
    Some((value, i, out_of_range))
}

/// Redis's `getDoubleFromObject`: the whole string must be a number strtod
/// accepts, not starting with white space, not NaN, and within range.
pub(crate) fn parse_f64_strict(s: &[u8]) -> Option<f64> {
    if s.is_empty() || is_c_space(s[0]) {
        return None;
    }
    let r = strtod(s);
    if r.len != s.len() || r.out_of_range || r.value.is_nan() {
        return None;
    }
    Some(r.value)
}

/// C's `printf("%.<precision>g", x)` as glibc prints it.
/// 10^n: the integers below `INTEGER_DIGITS[n]` have at most n digits.
const INTEGER_DIGITS: [f64; 16] =
    [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15];

pub(crate) fn format_g(x: f64, precision: usize) -> String {
    assert!(precision >= 1, "%g with precision 0 is %g with precision 1; not used here");
    if x.is_nan() {
        return if x.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // An integer of at most `precision` digits, exact in a double, is
    // printed as its digits (the fixed style, nothing after the point): a
    // script's numeric arguments (timestamps, counts) are mostly these.
    if x.fract() == 0.0 && x.abs() < INTEGER_DIGITS[precision.min(15)] {
        return (x as i64).to_string();
    }
    format_g_by_exponent(x, precision)
}

/// `format_g` of a finite non-zero `x`, by the style its exponent chooses.
fn format_g_by_exponent(x: f64, precision: usize) -> String {
    // Rust's `{:e}` rounds correctly to the requested digits, as glibc does;
    // its exponent is the one %g chooses its style by.
    let sci = format!("{:.*e}", precision - 1, x);
    let (mantissa, exp) = sci.split_once('e').expect("{:e} always has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
    if exp < -4 || exp >= precision as i32 {
        let mantissa = trim_fraction_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        let decimals = (precision as i32 - 1 - exp) as usize;
        trim_fraction_zeros(&format!("{x:.decimals$}")).to_string()
    }
}

/// %g drops trailing zeros of the fraction, and the point if nothing is left.
fn trim_fraction_zeros(s: &str) -> &str {
    if !s.contains('.') {
        return s;
    }
    s.trim_end_matches('0').trim_end_matches('.')
}

/// A double as Redis 7.0 replies with it over RESP2 (`addReplyDouble`).
pub(crate) fn format_double_reply(x: f64) -> Vec<u8> {
    format_g(x, 17).into_bytes()
}

/// C's `(long long)x` on x86-64: truncation toward zero, and the "integer
/// indefinite" value i64::MIN for NaN and out-of-range values. Redis converts
/// Lua numbers to integer replies this way.
pub(crate) fn c_double_to_i64(x: f64) -> i64 {
    // 2^63 is the first double that does not fit.
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if !(-TWO_63..TWO_63).contains(&x) {
        i64::MIN
    } else {
        x as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string2ll_cases() {
        let cases: &[(&str, Option<i64>)] = &[
            ("0", Some(0)),
            ("-0", None),
            ("12", Some(12)),
            ("-12", Some(-12)),
            ("012", None),
            ("+1", None),
            (" 1", None),
            ("1 ", None),
            ("", None),
            ("-", None),
            ("9223372036854775807", Some(i64::MAX)),
            ("9223372036854775808", None),
            ("-9223372036854775808", Some(i64::MIN)),
            ("-9223372036854775809", None),
            ("1.0", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_i64(text.as_bytes()), *want, "string2ll({text:?})");
        }
    }

    #[test]
    fn strtod_cases() {
        let cases: &[(&str, f64, usize)] = &[
            ("1.5", 1.5, 3),
            ("  -2e3x", -2000.0, 6),
            ("inf", f64::INFINITY, 3),
            ("-Infinity", f64::NEG_INFINITY, 9),
            ("0x10", 16.0, 4),
            ("0x1.8p1", 3.0, 7),
            ("0x", 0.0, 1),
            ("1e", 1.0, 1),
            ("1.", 1.0, 2),
            (".5", 0.5, 2),
            (".", 0.0, 0),
            ("", 0.0, 0),
            ("(1", 0.0, 0),
            ("1\0 2", 1.0, 1),
        ];
        for (text, value, len) in cases {
            let r = strtod(text.as_bytes());
            assert_eq!((r.value, r.len), (*value, *len), "strtod({text:?})");
        }
        assert!(strtod(b"nan").value.is_nan());
        assert!(strtod(b"1e400").out_of_range);
        assert!(strtod(b"1e-400").out_of_range);
        assert!(!strtod(b"0e-400").out_of_range);
    }

    #[test]
    fn format_g_cases() {
        let cases: &[(f64, usize, &str)] = &[
            (0.1, 17, "0.10000000000000001"),
            (1.5, 17, "1.5"),
            (1e20, 17, "1e+20"),
            (123456789.0, 17, "123456789"),
            (-0.0, 17, "-0"),
            (1e15, 14, "1e+15"),
            (123456789012.0, 14, "123456789012"),
            (0.0001, 14, "0.0001"),
            (0.00001, 14, "1e-05"),
            (1.1, 17, "1.1000000000000001"),
            (f64::INFINITY, 17, "inf"),
            (1e100, 17, "1e+100"),
            (3.0, 14, "3"),
            (-2.5e-7, 14, "-2.5e-07"),
            (99999999999999.0, 14, "99999999999999"),
            (1e14, 14, "1e+14"),
            (-1733366400.0, 17, "-1733366400"),
            (999999999999999.0, 17, "999999999999999"),
            (1e15, 17, "1000000000000000"),
            (4503599627370497.0, 17, "4503599627370497"),
        ];
        for (x, precision, want) in cases {
            assert_eq!(format_g(*x, *precision), *want, "%.{precision}g of {x}");
        }
    }

    /// The shortcut for integers prints what the exponent's style prints.
    #[test]
    fn integers_print_as_by_their_exponent() {
        for precision in [1, 2, 6, 14, 15, 16, 17] {
            for digits in 0..17 {
                let p = 10f64.powi(digits);
                for x in [p, p - 1.0, p + 1.0, 7.0 * p, 123456789.0 * p] {
                    for x in [x, -x] {
                        if x != 0.0 {
                            assert_eq!(
                                format_g(x, precision),
                                format_g_by_exponent(x, precision),
                                "%.{precision}g of {x}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn double_to_integer_reply() {
        let cases: &[(f64, i64)] =
            &[(3.99, 3), (-3.99, -3), (1e30, i64::MIN), (-1e30, i64::MIN), (f64::NAN, i64::MIN), (0.5, 0)];
        for (x, want) in cases {
            assert_eq!(c_double_to_i64(*x), *want, "(long long){x}");
        }
    }
}
