//! UTC civil-date arithmetic and RFC 3339 timestamps, hand-written so the
//! runtime needs no date crate.
//!
//! Days are counted from 1970-01-01 with Howard Hinnant's `days_from_civil`
//! algorithm (proleptic Gregorian calendar, exact for every `i64` day the
//! runtime meets). Budget windows are UTC calendar units: an hour, a day, an
//! ISO week starting Monday 00:00, a month.

use crate::store::Millis;
use crate::table::CalendarUnit;

/// Milliseconds in one second.
pub const MS_PER_SECOND: i64 = 1_000;
/// Milliseconds in one hour.
pub const MS_PER_HOUR: i64 = 3_600_000;
/// Milliseconds in one day.
pub const MS_PER_DAY: i64 = 86_400_000;

/// Days since 1970-01-01 of the civil date `year-month-day` (`month` 1–12,
/// `day` 1–31; out-of-range days roll over as in the algorithm).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The civil date `(year, month, day)` of a day count since 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Epoch milliseconds of a UTC civil date and time of day.
pub fn timestamp(year: i64, month: u32, day: u32, hour: u32, minute: u32, second: u32) -> Millis {
    days_from_civil(year, month, day)
        .saturating_mul(MS_PER_DAY)
        .saturating_add(i64::from(hour) * MS_PER_HOUR)
        .saturating_add(i64::from(minute) * 60_000)
        .saturating_add(i64::from(second) * MS_PER_SECOND)
}

/// The calendar window `[start, end)` of `unit` that contains `now`, in UTC.
/// `end` is the window's reset: the start of the next hour, day, ISO week
/// (Monday 00:00) or month.
pub fn window(unit: CalendarUnit, now: Millis) -> (Millis, Millis) {
    let days = now.div_euclid(MS_PER_DAY);
    match unit {
        // Each end is computed from its own period count, never as the
        // start plus a length: near `Millis::MIN` the start saturates, and
        // the saturated start plus a length would be an end too early.
        CalendarUnit::Hour => {
            let hours = now.div_euclid(MS_PER_HOUR);
            (
                hours.saturating_mul(MS_PER_HOUR),
                (hours + 1).saturating_mul(MS_PER_HOUR),
            )
        }
        CalendarUnit::Day => (
            days.saturating_mul(MS_PER_DAY),
            (days + 1).saturating_mul(MS_PER_DAY),
        ),
        CalendarUnit::Week => {
            // 1970-01-01 was a Thursday: Monday is 3 days after it in this count.
            let monday = days - (days + 3).rem_euclid(7);
            (
                monday.saturating_mul(MS_PER_DAY),
                (monday + 7).saturating_mul(MS_PER_DAY),
            )
        }
        CalendarUnit::Month => {
            let (year, month, _) = civil_from_days(days);
            let start = days_from_civil(year, month, 1).saturating_mul(MS_PER_DAY);
            let (next_year, next_month) = if month == 12 {
                (year + 1, 1)
            } else {
                (year, month + 1)
            };
            (
                start,
                days_from_civil(next_year, next_month, 1).saturating_mul(MS_PER_DAY),
            )
        }
    }
}

/// Rounds `ms` up to a whole second (a reset announced to a server must not
/// come before the moment the request would really fit).
pub fn ceil_to_second(ms: Millis) -> Millis {
    let rem = ms.rem_euclid(MS_PER_SECOND);
    if rem == 0 {
        ms
    } else {
        ms.saturating_add(MS_PER_SECOND - rem)
    }
}

/// The RFC 3339 UTC form of `ms`: `2026-03-11T00:00:00Z`, with `.sss` only
/// when the instant is not a whole second.
///
/// Every [`Millis`] is written exactly, never clamped: an instant outside
/// the years 0000–9999, which RFC 3339 cannot write, takes ISO 8601's
/// expanded year, a sign and at least six digits (`+010000-01-01T00:00:00Z`,
/// the form ECMAScript's `Date` also reads). A `resetsAt` must never name an
/// instant earlier than the real reset, and the month after
/// `9999-12-31T23:59:59.999Z` starts in the year 10000.
pub fn format_rfc3339(ms: Millis) -> String {
    let days = ms.div_euclid(MS_PER_DAY);
    let in_day = ms.rem_euclid(MS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    let hour = in_day / MS_PER_HOUR;
    let minute = in_day % MS_PER_HOUR / 60_000;
    let second = in_day % 60_000 / MS_PER_SECOND;
    let milli = in_day % MS_PER_SECOND;
    let year = if (0..=9999).contains(&year) {
        format!("{year:04}")
    } else if year < 0 {
        format!("-{:06}", year.unsigned_abs())
    } else {
        format!("+{year:06}")
    };
    if milli == 0 {
        format!("{year}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z")
    } else {
        format!("{year}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{milli:03}Z")
    }
}

/// Parses an RFC 3339 timestamp (`YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`,
/// `t`/`z`/space accepted as RFC 3339 allows) to epoch milliseconds, and the
/// expanded years [`format_rfc3339`] writes outside 0000–9999 (`±YYYYYY…`,
/// six to twelve digits). Fractions beyond milliseconds are truncated; leap
/// second 60 is refused, and so is an instant beyond [`Millis`]' range.
pub fn parse_rfc3339(text: &str) -> Option<Millis> {
    let full = text.as_bytes();
    // The year: four digits, or a sign and six to twelve (ISO 8601
    // expanded); the rest then reads as if the year had four digits.
    let (expanded, b): (Option<i64>, &[u8]) = match full.first()? {
        sign @ (b'+' | b'-') => {
            let digits = full[1..].iter().take_while(|d| d.is_ascii_digit()).count();
            if !(6..=12).contains(&digits) {
                return None;
            }
            let magnitude = full[1..=digits]
                .iter()
                .fold(0i64, |acc, &d| acc * 10 + i64::from(d - b'0'));
            let year = if *sign == b'-' { -magnitude } else { magnitude };
            (Some(year), &full[digits - 3..])
        }
        _ => (None, full),
    };
    let num = |range: std::ops::Range<usize>| -> Option<u32> {
        let digits = b.get(range)?;
        digits.iter().try_fold(0u32, |acc, &d| {
            d.is_ascii_digit().then(|| acc * 10 + u32::from(d - b'0'))
        })
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    if !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let year = match expanded {
        Some(year) => year,
        None => i64::from(num(0..4)?),
    };
    let (month, day) = (num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let month_days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if year.rem_euclid(4) == 0
            && (year.rem_euclid(100) != 0 || year.rem_euclid(400) == 0) =>
        {
            29
        }
        2 => 28,
        _ => return None,
    };
    if day == 0 || day > month_days || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut i = 19;
    let mut millis = 0i64;
    if b[i] == b'.' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            if i - start < 3 {
                millis = millis * 10 + i64::from(b[i] - b'0');
            }
            i += 1;
        }
        let digits = i - start;
        if digits == 0 {
            return None;
        }
        for _ in digits..3 {
            millis *= 10;
        }
    }
    let offset_ms = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let offset = i64::from(oh) * MS_PER_HOUR + i64::from(om) * 60_000;
            if *sign == b'+' { offset } else { -offset }
        }
        _ => return None,
    };
    // In i128: a twelve-digit year lies far beyond `Millis`' range.
    let at = i128::from(days_from_civil(year, month, day)) * i128::from(MS_PER_DAY)
        + i128::from(hour) * i128::from(MS_PER_HOUR)
        + i128::from(minute) * 60_000
        + i128::from(second) * i128::from(MS_PER_SECOND)
        + i128::from(millis)
        - i128::from(offset_ms);
    Millis::try_from(at).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_round_trip() {
        for days in -800_000..800_000 {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    }

    #[test]
    fn windows() {
        // Wednesday 2026-03-11 15:42:07.123Z.
        let now = timestamp(2026, 3, 11, 15, 42, 7) + 123;
        let f = |unit| {
            let (s, e) = window(unit, now);
            (format_rfc3339(s), format_rfc3339(e))
        };
        assert_eq!(
            f(CalendarUnit::Hour),
            ("2026-03-11T15:00:00Z".into(), "2026-03-11T16:00:00Z".into())
        );
        assert_eq!(
            f(CalendarUnit::Day),
            ("2026-03-11T00:00:00Z".into(), "2026-03-12T00:00:00Z".into())
        );
        assert_eq!(
            f(CalendarUnit::Week),
            ("2026-03-09T00:00:00Z".into(), "2026-03-16T00:00:00Z".into())
        );
        assert_eq!(
            f(CalendarUnit::Month),
            ("2026-03-01T00:00:00Z".into(), "2026-04-01T00:00:00Z".into())
        );
        let dec = timestamp(2026, 12, 31, 23, 59, 59);
        assert_eq!(
            format_rfc3339(window(CalendarUnit::Month, dec).1),
            "2027-01-01T00:00:00Z"
        );
        // A Monday at midnight starts its own week.
        let monday = timestamp(2026, 3, 9, 0, 0, 0);
        assert_eq!(window(CalendarUnit::Week, monday).0, monday);
        // Before the epoch.
        let old = timestamp(1969, 12, 31, 23, 30, 0);
        assert_eq!(
            format_rfc3339(window(CalendarUnit::Day, old).1),
            "1970-01-01T00:00:00Z"
        );
        assert_eq!(
            format_rfc3339(window(CalendarUnit::Week, old).0),
            "1969-12-29T00:00:00Z"
        );
        // Absurd clocks do not panic.
        for unit in [
            CalendarUnit::Hour,
            CalendarUnit::Day,
            CalendarUnit::Week,
            CalendarUnit::Month,
        ] {
            for now in [
                Millis::MIN,
                Millis::MIN + 1,
                -1,
                0,
                Millis::MAX - 1,
                Millis::MAX,
            ] {
                let (start, end) = window(unit, now);
                assert!(start <= end);
                let _ = format_rfc3339(end);
            }
        }
    }

    #[test]
    fn rfc3339() {
        let t = timestamp(2024, 2, 29, 8, 5, 9);
        assert_eq!(format_rfc3339(t), "2024-02-29T08:05:09Z");
        assert_eq!(format_rfc3339(t + 7), "2024-02-29T08:05:09.007Z");
        assert_eq!(parse_rfc3339("2024-02-29T08:05:09Z"), Some(t));
        assert_eq!(parse_rfc3339("2024-02-29T08:05:09.007Z"), Some(t + 7));
        assert_eq!(parse_rfc3339("2024-02-29T08:05:09.0071234z"), Some(t + 7));
        assert_eq!(parse_rfc3339("2024-02-29T10:05:09+02:00"), Some(t));
        assert_eq!(parse_rfc3339("2024-02-29T07:35:09-00:30"), Some(t));
        assert_eq!(parse_rfc3339("2023-02-29T08:05:09Z"), None);
        assert_eq!(parse_rfc3339("2024-02-29T24:00:00Z"), None);
        assert_eq!(parse_rfc3339("2024-02-29T08:05:09"), None);
        assert_eq!(parse_rfc3339("2024-02-29T08:05:09.Z"), None);
        assert_eq!(parse_rfc3339("2024-02-29T08:05:09Zjunk"), None);
        assert_eq!(parse_rfc3339("２024-02-29T08:05:09Z"), None);
        assert_eq!(
            format_rfc3339(Millis::MAX),
            "+292278994-08-17T07:12:55.807Z"
        );
        assert_eq!(
            format_rfc3339(Millis::MIN),
            "-292275055-05-16T16:47:04.192Z"
        );
        assert_eq!(
            parse_rfc3339("+292278994-08-17T07:12:55.807Z"),
            Some(Millis::MAX)
        );
        assert_eq!(parse_rfc3339("+292278994-08-17T07:12:55.808Z"), None);
        assert_eq!(parse_rfc3339("+10000-01-01T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("+002024-02-29T08:05:09Z"), Some(t));
        assert_eq!(ceil_to_second(1_001), 2_000);
        assert_eq!(ceil_to_second(-1), 0);
        assert_eq!(ceil_to_second(3_000), 3_000);
    }

    /// A month budget asked at the last representable RFC 3339 instant
    /// resets at the start of the year 10000, which used to be written
    /// clamped to `now` itself (`docs/threat-model.md`, "The clock").
    #[test]
    fn a_reset_near_the_first_instant_is_not_early() {
        // Found by `resets_are_the_next_period_start`: the day's start
        // saturates at `Millis::MIN`, and start + 1 day came 60,424,192 ms too early.
        let now: Millis = -9_223_372_036_828_800_001;
        assert_eq!(window(CalendarUnit::Day, now).1, -9_223_372_036_828_800_000);
        for unit in UNITS {
            assert!(window(unit, now).1 > now, "{unit:?}");
        }
    }

    #[test]
    fn a_reset_after_the_year_9999_is_not_clamped_to_now() {
        let now = parse_rfc3339("9999-12-31T23:59:59.999Z").expect("parses");
        let (_, end) = window(CalendarUnit::Month, now);
        let text = format_rfc3339(ceil_to_second(end));
        assert_eq!(text, "+010000-01-01T00:00:00Z");
        for unit in UNITS {
            let (_, end) = window(unit, now);
            let text = format_rfc3339(ceil_to_second(end));
            assert_eq!(parse_rfc3339(&text), Some(end), "{unit:?}: {text}");
            assert!(end > now, "{unit:?}: {text}");
        }
    }

    const UNITS: [CalendarUnit; 4] = [
        CalendarUnit::Hour,
        CalendarUnit::Day,
        CalendarUnit::Week,
        CalendarUnit::Month,
    ];

    /// The reset of `unit`'s window around `now`, computed another way: the
    /// first instant after `now` that starts a period, found from the civil
    /// date (in `i128`, so a reset beyond `Millis::MAX` is seen as such).
    fn true_reset(unit: CalendarUnit, now: Millis) -> i128 {
        let now = i128::from(now);
        let day = i128::from(MS_PER_DAY);
        let days = now.div_euclid(day);
        match unit {
            CalendarUnit::Hour => {
                let hour = i128::from(MS_PER_HOUR);
                (now.div_euclid(hour) + 1) * hour
            }
            CalendarUnit::Day => (days + 1) * day,
            CalendarUnit::Week => {
                // Days until the next Monday (1970-01-01 was a Thursday): 1 to 7.
                let weekday = (days + 3).rem_euclid(7);
                (days + 7 - weekday) * day
            }
            CalendarUnit::Month => {
                // Walk day by day to the next 1st: at most 31 steps.
                let mut next = days + 1;
                loop {
                    let (_, _, d) = civil_from_days(i64::try_from(next).expect("days fit"));
                    if d == 1 {
                        return next * day;
                    }
                    next += 1;
                }
            }
        }
    }

    fn instant() -> impl proptest::strategy::Strategy<Value = Millis> {
        use proptest::prelude::*;
        const LAST_RFC3339: Millis = 253_402_300_799_999; // 9999-12-31T23:59:59.999Z
        const FIRST_RFC3339: Millis = -62_167_219_200_000; // 0000-01-01T00:00:00Z
        let year = 366 * MS_PER_DAY;
        prop_oneof![
            any::<Millis>(),
            FIRST_RFC3339..=LAST_RFC3339,
            (LAST_RFC3339 - year)..=(LAST_RFC3339 + year),
            (FIRST_RFC3339 - year)..=(FIRST_RFC3339 + year),
            (Millis::MAX - 40 * MS_PER_DAY)..=Millis::MAX,
            Millis::MIN..=(Millis::MIN + 40 * MS_PER_DAY),
            Just(LAST_RFC3339),
            Just(Millis::MAX),
        ]
    }

    proptest::proptest! {
        /// Every instant and every calendar unit: the window's end is the
        /// true next period start, strictly after `now`, or, when that lies
        /// beyond `Millis::MAX`, the documented saturation `Millis::MAX`
        /// ("never"), which no representable reset comes after. The start
        /// is at or before `now`. The text written for the reset (rounded
        /// up to a second, as `resetsAt` is) parses back to the same instant,
        /// never an earlier one. `PROPTEST_CASES` sets the number of cases.
        #[test]
        fn resets_are_the_next_period_start(now in instant()) {
            for unit in UNITS {
                let (start, end) = window(unit, now);
                let truth = true_reset(unit, now);
                match Millis::try_from(truth) {
                    Ok(truth) => {
                        proptest::prop_assert_eq!(end, truth, "{:?} at {}", unit, now);
                        proptest::prop_assert!(end > now);
                    }
                    Err(_) => proptest::prop_assert_eq!(end, Millis::MAX),
                }
                proptest::prop_assert!(start <= now, "{:?} at {}: start {}", unit, now, start);
                let resets_at = ceil_to_second(end);
                proptest::prop_assert!(resets_at >= end);
                let text = format_rfc3339(resets_at);
                proptest::prop_assert_eq!(parse_rfc3339(&text), Some(resets_at), "{}", text);
            }
            proptest::prop_assert_eq!(parse_rfc3339(&format_rfc3339(now)), Some(now));
        }
    }
}
