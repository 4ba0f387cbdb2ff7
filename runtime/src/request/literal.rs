//! Finding a member's literal text in a request that parsed strictly, for
//! messages that quote a number as written.
//!
//! The input is known to be valid JSON (it parsed), so this only skips:
//! strings by their quotes and escapes, containers by counting brackets
//! outside strings. Every index is checked, so even invalid input yields
//! `None`, never a panic. Linear in the bytes before the member.

/// The byte range of the value at `keys` (object members from the top
/// level down; no keys: the whole document, without surrounding space).
pub(super) fn locate(bytes: &[u8], keys: &[&str]) -> Option<(usize, usize)> {
    let mut start = space(bytes, 0);
    let mut end = value_end(bytes, start)?;
    for key in keys {
        (start, end) = member(bytes, start, key)?;
    }
    Some((start, end))
}

fn space(bytes: &[u8], mut at: usize) -> usize {
    while matches!(bytes.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// The end of the string starting at `at` (its opening quote).
fn string_end(bytes: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    loop {
        match bytes.get(i)? {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
}

/// The end of the value starting at `at`.
fn value_end(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at)? {
        b'"' => string_end(bytes, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            loop {
                match bytes.get(i)? {
                    b'"' => {
                        i = string_end(bytes, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let mut i = at;
            while bytes
                .get(i)
                .is_some_and(|b| !matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
            {
                i += 1;
            }
            Some(i)
        }
    }
}

/// The value of member `key` of the object starting at `at`.
fn member(bytes: &[u8], at: usize, key: &str) -> Option<(usize, usize)> {
    if bytes.get(at)? != &b'{' {
        return None;
    }
    let mut i = space(bytes, at + 1);
    loop {
        if bytes.get(i)? != &b'"' {
            return None;
        }
        let key_end = string_end(bytes, i)?;
        let name = serde_json::from_slice::<String>(bytes.get(i..key_end)?).ok()?;
        i = space(bytes, key_end);
        if bytes.get(i)? != &b':' {
            return None;
        }
        let value = space(bytes, i + 1);
        let value_end = value_end(bytes, value)?;
        if name == key {
            return Some((value, value_end));
        }
        i = space(bytes, value_end);
        if bytes.get(i)? != &b',' {
            return None;
        }
        i = space(bytes, i + 1);
    }
}
