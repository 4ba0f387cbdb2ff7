//! Server-id and model-name globs: `*` matches any run of characters
//! (including none), `?` exactly one; everything else matches itself.
//!
//! Server ids and server patterns are compared in NFC ([`nfc`]): `café`
//! typed on one keyboard and `cafe\u{301}` from a macOS file name are the
//! same server. The table and the engine normalise both before matching.

use std::borrow::Cow;

use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfc_quick};

/// `text` in Unicode Normalization Form C; borrowed when it already is
/// (always for ASCII, the common case, decided without a table look-up).
pub fn nfc(text: &str) -> Cow<'_, str> {
    if text.is_ascii() || is_nfc_quick(text.chars()) == IsNormalized::Yes {
        Cow::Borrowed(text)
    } else {
        let normalized: String = text.nfc().collect();
        if normalized == text {
            Cow::Borrowed(text)
        } else {
            Cow::Owned(normalized)
        }
    }
}

/// Whether `text` matches `pattern`, compared by Unicode scalar values.
///
/// Iterative with single-star backtracking: linear space, no recursion, so a
/// pattern of many stars cannot overflow the stack. ASCII patterns and ids
/// (the common case, checked on every request) are compared as bytes
/// without allocating.
pub fn matches(pattern: &str, text: &str) -> bool {
    if pattern.is_ascii() && text.is_ascii() {
        return match_units(pattern.as_bytes(), text.as_bytes(), b'*', b'?');
    }
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    match_units(&pattern, &text, '*', '?')
}

fn match_units<T: Copy + PartialEq>(pattern: &[T], text: &[T], any_run: T, any_one: T) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(&c) if c == any_run => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == any_one || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == any_run)
}

/// Whether every string `inner` matches is also matched by `outer`.
///
/// Sound: `true` means inclusion holds. It treats `inner`'s wildcards as
/// symbols that only a `*` of `outer` (or a `?` of `outer`, for a `?`)
/// can absorb, which decides inclusion exactly for the patterns people
/// write (`github-*` ⊆ `*`, `github-enterprise` ⊆ `github-*`).
pub fn covers(outer: &str, inner: &str) -> bool {
    let outer: Vec<char> = outer.chars().collect();
    let inner: Vec<char> = inner.chars().collect();
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < inner.len() {
        let fits = match outer.get(p) {
            Some('*') => {
                star = Some((p, t));
                p += 1;
                continue;
            }
            Some('?') => inner[t] != '*',
            Some(&c) => c == inner[t] && c != '*' && c != '?',
            None => false,
        };
        if fits {
            p += 1;
            t += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    outer[p..].iter().all(|&c| c == '*')
}

/// Whether the pattern has any wildcard.
pub fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?'])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching() {
        assert!(matches("github-*", "github-enterprise"));
        assert!(matches("github-*", "github-"));
        assert!(!matches("github-*", "gitlab"));
        assert!(matches("*", ""));
        assert!(matches("a?c", "abc"));
        assert!(!matches("a?c", "ac"));
        assert!(matches("*-notes", "release-notes"));
        assert!(matches("a*b*c", "aXbYbZc"));
        assert!(!matches("a*b*c", "aXbYbZ"));
        assert!(matches("é*", "étude"));
        assert!(matches(&"*".repeat(10_000), "x"));
        // The byte path and the character path agree.
        assert!(matches("é?", "éa") && !matches("é?", "é"));
        assert!(matches("?-notes", "ü-notes"));
    }

    #[test]
    fn nfc_forms() {
        assert!(matches!(nfc("release-notes"), Cow::Borrowed(_)));
        assert!(matches!(nfc("caf\u{e9}"), Cow::Borrowed(_)));
        assert_eq!(nfc("cafe\u{301}"), "caf\u{e9}");
        assert_eq!(nfc("\u{212b}"), "\u{c5}");
        // `is_nfc_quick` answers `Maybe` for some NFC text: still borrowed.
        assert!(matches!(nfc("\u{1100}"), Cow::Borrowed(_)));
    }

    #[test]
    fn coverage() {
        assert!(covers("*", "github-*"));
        assert!(covers("github-*", "github-enterprise"));
        assert!(covers("github-*", "github-e*"));
        assert!(!covers("github-e*", "github-*"));
        assert!(covers("a?c", "abc"));
        assert!(!covers("abc", "a?c"));
        assert!(covers("?*", "??*"));
        assert!(!covers("release", "release-notes"));
        assert!(covers("*a*", "*a*a*"));
    }
}
