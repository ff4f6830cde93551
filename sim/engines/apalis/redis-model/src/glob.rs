//! Redis's glob matcher (`stringmatchlen` in util.c), for KEYS.
//!
//! A port of the C, quirks included: the pattern reads as a NUL-terminated
//! C string past its end, and bytes in `[a-z]` ranges compare as C's signed
//! `char`.

/// Whether `string` matches the glob `pattern` (`*`, `?`, `[...]`, `\`).
pub(crate) fn matches(pattern: &[u8], string: &[u8]) -> bool {
    let mut skip_longer = false;
    match_from(pattern, string, &mut skip_longer)
}

/// The byte at `i`, or the C string's terminating NUL beyond the end.
fn at(s: &[u8], i: usize) -> u8 {
    s.get(i).copied().unwrap_or(0)
}

fn match_from(pattern: &[u8], string: &[u8], skip_longer: &mut bool) -> bool {
    let (mut p, mut s) = (0usize, 0usize);
    while p < pattern.len() && s < string.len() {
        match pattern[p] {
            b'*' => {
                while p + 1 < pattern.len() && pattern[p + 1] == b'*' {
                    p += 1;
                }
                if p + 1 == pattern.len() {
                    return true;
                }
                while s < string.len() {
                    if match_from(&pattern[p + 1..], &string[s..], skip_longer) {
                        return true;
                    }
                    if *skip_longer {
                        return false;
                    }
                    s += 1;
                }
                // No match for the rest from anywhere later: an earlier '*'
                // taking more of the string cannot help either.
                *skip_longer = true;
                return false;
            }
            b'?' => s += 1,
            b'[' => match match_class(pattern, p + 1, string[s]) {
                Some(next_p) => {
                    p = next_p;
                    s += 1;
                }
                None => return false,
            },
            b'\\' => {
                if p + 2 <= pattern.len() {
                    p += 1;
                }
                if pattern[p] != string[s] {
                    return false;
                }
                s += 1;
            }
            c => {
                if c != string[s] {
                    return false;
                }
                s += 1;
            }
        }
        p += 1;
        if s == string.len() {
            while at(pattern, p) == b'*' {
                p += 1;
            }
            break;
        }
    }
    p == pattern.len() && s == string.len()
}

/// Matches `c` against the class starting after `[` at `p`; returns the
/// position of its closing `]` (where the caller continues) on a match.
fn match_class(pattern: &[u8], mut p: usize, c: u8) -> Option<usize> {
    let negate = at(pattern, p) == b'^';
    if negate {
        p += 1;
    }
    let mut matched = false;
    loop {
        let left = pattern.len().saturating_sub(p);
        if at(pattern, p) == b'\\' && left >= 2 {
            p += 1;
            matched |= pattern[p] == c;
        } else if at(pattern, p) == b']' {
            break;
        } else if left == 0 {
            // Unterminated class: the C steps back so that the caller's
            // increment lands on the end of the pattern.
            p -= 1;
            break;
        } else if left >= 3 && pattern[p + 1] == b'-' {
            let (mut start, mut end) = (signed(pattern[p]), signed(pattern[p + 2]));
            if start > end {
                std::mem::swap(&mut start, &mut end);
            }
            matched |= (start..=end).contains(&signed(c));
            p += 2;
        } else {
            matched |= pattern[p] == c;
        }
        p += 1;
    }
    if negate {
        matched = !matched;
    }
    matched.then_some(p)
}

fn signed(b: u8) -> i32 {
    i32::from(b as i8)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn glob_cases() {
        let cases: &[(&str, &str, bool)] = &[
            ("*", "anything", true),
            // As in C: the matching loop never runs for an empty string.
            ("*", "", false),
            ("a*", "abc", true),
            ("a*c", "abc", true),
            ("a*d", "abc", false),
            ("?b?", "abc", true),
            ("?", "", false),
            ("[abc]x", "bx", true),
            ("[^abc]x", "bx", false),
            ("[a-c]", "b", true),
            ("[c-a]", "b", true),
            ("[a-c]", "d", false),
            ("\\*", "*", true),
            ("\\*", "a", false),
            ("h[\\]]", "h]", true),
            ("q:*", "q:active", true),
            ("q:*:w1", "q:inflight:w1", true),
            ("ab", "abc", false),
            ("abc", "ab", false),
            ("a**", "a", true),
            ("[ab", "a", true),
        ];
        for (pattern, string, want) in cases {
            assert_eq!(matches(pattern.as_bytes(), string.as_bytes()), *want, "{pattern:?} ~ {string:?}");
        }
    }
}
