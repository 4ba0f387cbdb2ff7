//! Aligned columns in text output, with no width taken from the input
//! unbounded: `format!`'s width argument panics above 65,535 ("Formatting
//! argument out of range"), and a column as wide as its widest cell would
//! pad every row to a 73,400-character server id. A column is at most
//! [`MAX_COLUMN`] wide; a longer cell overflows it.

/// The widest a column is padded to, in characters.
pub const MAX_COLUMN: usize = 48;

/// The width of a column whose cells are `widths` characters wide: the
/// widest, at most [`MAX_COLUMN`], at least `min`.
pub fn width(widths: impl IntoIterator<Item = usize>, min: usize) -> usize {
    widths
        .into_iter()
        .map(|w| w.min(MAX_COLUMN))
        .max()
        .unwrap_or(0)
        .max(min)
}

/// `text` followed by spaces up to `width` characters; as it is when it is
/// already that wide or wider.
pub fn pad(text: &str, width: usize) -> String {
    let have = text.chars().count();
    let mut out = String::with_capacity(text.len() + width.saturating_sub(have));
    out.push_str(text);
    out.extend(std::iter::repeat_n(' ', width.saturating_sub(have)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_bounded_and_never_panic() {
        let long = "x".repeat(73_400);
        let w = width([3, long.chars().count()], 6);
        assert_eq!(w, MAX_COLUMN);
        assert_eq!(pad(&long, w), long);
        assert_eq!(pad("ab", 4), "ab  ");
        assert_eq!(pad("é", 2), "é ");
        assert_eq!(width([], 6), 6);
    }
}
