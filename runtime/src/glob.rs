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
/// Linear in `text` (times a word per 64 characters of the longest run of
/// `pattern` between two `*`): the runs between stars are found leftmost,
/// one after another, each with a bit-parallel scan, so a server's model
/// hint of many megabytes never costs its length times the pattern's
/// (`docs/spec/evaluation.md`, "Step 6: Trims"). No recursion, no
/// backtracking. ASCII patterns and texts (the common case, checked on
/// every request) are compared as bytes without copying the text.
pub fn matches(pattern: &str, text: &str) -> bool {
    if pattern.is_ascii() && text.is_ascii() {
        return match_units(pattern.as_bytes(), text.as_bytes(), b'*', b'?');
    }
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    match_units(&pattern, &text, '*', '?')
}

fn match_units<T: Copy + Ord>(pattern: &[T], text: &[T], any_run: T, any_one: T) -> bool {
    let fits = |run: &[T], at: &[T]| {
        run.len() == at.len() && run.iter().zip(at).all(|(&p, &t)| p == any_one || p == t)
    };
    let runs: Vec<&[T]> = pattern.split(|&c| c == any_run).collect();
    let [first, middle @ .., last] = runs.as_slice() else {
        // No star: one run, the whole text.
        return fits(pattern, text);
    };
    // The first run is anchored at the start, the last at the end; those
    // between them are taken leftmost, which leaves the most room for the
    // rest.
    let Some(inner) = text.len().checked_sub(first.len() + last.len()) else {
        return false;
    };
    if !fits(first, &text[..first.len()]) || !fits(last, &text[first.len() + inner..]) {
        return false;
    }
    let mut window = &text[first.len()..first.len() + inner];
    for run in middle.iter().filter(|run| !run.is_empty()) {
        match find_run(run, window, any_one) {
            Some(end) => window = &window[end..],
            None => return false,
        }
    }
    true
}

/// Where the leftmost match of `run` (literals and `any_one`) in `text`
/// ends; Shift-And over one bit per position of `run`.
fn find_run<T: Copy + Ord>(run: &[T], text: &[T], any_one: T) -> Option<usize> {
    let words = run.len().div_ceil(64);
    // The positions each character may take: its own and every `any_one`.
    let mut wild = vec![0u64; words];
    let mut literal: Vec<(T, Vec<u64>)> = Vec::new();
    for (i, &c) in run.iter().enumerate() {
        let (word, bit) = (i / 64, 1u64 << (i % 64));
        if c == any_one {
            wild[word] |= bit;
            continue;
        }
        let at = match literal.binary_search_by(|(k, _)| k.cmp(&c)) {
            Ok(at) => at,
            Err(at) => {
                literal.insert(at, (c, vec![0; words]));
                at
            }
        };
        literal[at].1[word] |= bit;
    }
    for (_, mask) in &mut literal {
        for (m, w) in mask.iter_mut().zip(&wild) {
            *m |= w;
        }
    }
    let last = run.len() - 1;
    let (last_word, last_bit) = (last / 64, 1u64 << (last % 64));
    let mut state = vec![0u64; words];
    for (at, c) in text.iter().enumerate() {
        let mask = match literal.binary_search_by(|(k, _)| k.cmp(c)) {
            Ok(i) => &literal[i].1,
            Err(_) => &wild,
        };
        let mut carry = 1u64;
        for (s, m) in state.iter_mut().zip(mask) {
            let next_carry = *s >> 63;
            *s = ((*s << 1) | carry) & m;
            carry = next_carry;
        }
        if state[last_word] & last_bit != 0 {
            return Some(at + 1);
        }
    }
    None
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

    /// The textbook dynamic program over (pattern, text) positions.
    fn reference(pattern: &[char], text: &[char]) -> bool {
        let mut row = vec![false; text.len() + 1];
        row[0] = true;
        for &p in pattern {
            let mut next = vec![false; text.len() + 1];
            for t in 0..=text.len() {
                next[t] = match p {
                    '*' => row[t] || (t > 0 && next[t - 1]),
                    _ => t > 0 && row[t - 1] && (p == '?' || p == text[t - 1]),
                };
            }
            row = next;
        }
        row[text.len()]
    }

    proptest::proptest! {
        /// Leftmost runs agree with the dynamic program, on the byte path
        /// and the character path, runs longer than a word included.
        #[test]
        fn matching_agrees_with_the_reference(
            pattern in "[ab*?é]{0,8}|[ab?]{60,70}\\*[ab?]{0,3}",
            text in "[abé]{0,12}|[ab]{60,140}",
        ) {
            let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
            proptest::prop_assert_eq!(matches(&pattern, &text), reference(&p, &t), "{} / {}", pattern, text);
        }
    }

    /// A hang guard, not a speed target (`runtime/benches/glob.rs` holds the
    /// figures): a 400-character run against a 15 MiB hint cost 9.8 s in
    /// a release build when each star backtracked over the whole text.
    #[test]
    fn a_long_run_against_a_huge_hint_is_linear() {
        let run = "ab".repeat(199) + "c";
        let pattern = format!("*{run}*");
        let text = "ab".repeat(15 << 19);
        let started = std::time::Instant::now();
        assert!(!matches(&pattern, &text));
        assert!(matches(&pattern, &format!("{text}{run}")));
        assert!(started.elapsed() < std::time::Duration::from_secs(120));
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
