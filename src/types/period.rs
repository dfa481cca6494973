//! Calendar periods and their keys, for summaries: a day `YYYY-MM-DD`, an
//! ISO 8601 week `YYYY-Www` (weeks start on Monday; week 1 holds the
//! year's first Thursday), a month `YYYY-MM`, a quarter `YYYY-Qn`, a year
//! `YYYY`. Days here are whole days counted from 1970-01-01 in whatever
//! time zone the caller chose; the caller maps them to Unix seconds.

/// One calendar period length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Period {
    Day,
    Week,
    Month,
    Quarter,
    Year,
}

impl Period {
    pub const ALL: [Period; 5] = [
        Period::Day,
        Period::Week,
        Period::Month,
        Period::Quarter,
        Period::Year,
    ];
    pub const ALLOWED: &[&str] = &["day", "week", "month", "quarter", "year"];

    pub const fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
            Period::Quarter => "quarter",
            Period::Year => "year",
        }
    }

    pub fn parse(s: &str) -> Option<Period> {
        Period::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// How a key is written, for errors.
    pub const fn key_form(self) -> &'static str {
        match self {
            Period::Day => "YYYY-MM-DD",
            Period::Week => "YYYY-Www (ISO week, W01 to W52 or W53)",
            Period::Month => "YYYY-MM",
            Period::Quarter => "YYYY-Qn (Q1 to Q4)",
            Period::Year => "YYYY",
        }
    }

    /// The summary written for one such period.
    pub const fn summary(self) -> SummaryType {
        match self {
            Period::Day => SummaryType::Daily,
            Period::Week => SummaryType::Weekly,
            Period::Month => SummaryType::Monthly,
            Period::Quarter => SummaryType::Quarterly,
            Period::Year => SummaryType::Yearly,
        }
    }

    /// The period whose summaries this one is rolled up from (none for a
    /// day: it is made from conversations).
    pub const fn finer(self) -> Option<Period> {
        match self {
            Period::Day => None,
            Period::Week => Some(Period::Day),
            Period::Month => Some(Period::Week),
            Period::Quarter => Some(Period::Month),
            Period::Year => Some(Period::Quarter),
        }
    }
}

/// The summaries' kinds, as the tools and the database name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SummaryType {
    Conversation,
    Daily,
    Weekly,
    Monthly,
    Quarterly,
    Yearly,
}

impl SummaryType {
    pub const ALL: [SummaryType; 6] = [
        SummaryType::Conversation,
        SummaryType::Daily,
        SummaryType::Weekly,
        SummaryType::Monthly,
        SummaryType::Quarterly,
        SummaryType::Yearly,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            SummaryType::Conversation => "conversation-summary",
            SummaryType::Daily => "daily-summary",
            SummaryType::Weekly => "weekly-summary",
            SummaryType::Monthly => "monthly-summary",
            SummaryType::Quarterly => "quarterly-summary",
            SummaryType::Yearly => "yearly-summary",
        }
    }

    pub fn parse(s: &str) -> Option<SummaryType> {
        SummaryType::ALL.into_iter().find(|t| t.as_str() == s)
    }

    pub fn allowed() -> String {
        SummaryType::ALL.map(SummaryType::as_str).join(", ")
    }

    /// The period its key names: a conversation's summary is keyed by the
    /// day it ended.
    pub const fn period(self) -> Period {
        match self {
            SummaryType::Conversation | SummaryType::Daily => Period::Day,
            SummaryType::Weekly => Period::Week,
            SummaryType::Monthly => Period::Month,
            SummaryType::Quarterly => Period::Quarter,
            SummaryType::Yearly => Period::Year,
        }
    }
}

/// A period key read and checked: its days, `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub period: Period,
    pub key: String,
    pub start: i64,
    pub end: i64,
}

/// Reads a key of `period`; the error names the form allowed.
pub fn parse_key(period: Period, key: &str) -> Result<Span, String> {
    let bad = || {
        format!(
            "period key \"{}\" is not a {}; allowed: {}",
            crate::util::printable(key),
            period.as_str(),
            period.key_form()
        )
    };
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = key.get(r)?;
        (!part.is_empty() && part.bytes().all(|c| c.is_ascii_digit()))
            .then(|| part.parse().ok())
            .flatten()
    };
    let b = key.as_bytes();
    let year = num(0..4).filter(|y| *y >= 1).ok_or_else(bad)?;
    let (start, end) = match period {
        Period::Year if b.len() == 4 => {
            (days_from_civil(year, 1, 1), days_from_civil(year + 1, 1, 1))
        }
        Period::Month if b.len() == 7 && b[4] == b'-' => {
            let m = num(5..7).filter(|m| (1..=12).contains(m)).ok_or_else(bad)?;
            month_span(year, m)
        }
        Period::Quarter if b.len() == 7 && &b[4..6] == b"-Q" => {
            let q = num(6..7).filter(|q| (1..=4).contains(q)).ok_or_else(bad)?;
            let (s, _) = month_span(year, q * 3 - 2);
            let (_, e) = month_span(year, q * 3);
            (s, e)
        }
        Period::Week if b.len() == 8 && &b[4..6] == b"-W" => {
            let w = num(6..8)
                .filter(|w| (1..=iso_weeks(year)).contains(w))
                .ok_or_else(|| {
                    if num(6..8).is_some() {
                        format!(
                            "period key \"{}\": {year} has {} ISO weeks; allowed: {}",
                            crate::util::printable(key),
                            iso_weeks(year),
                            period.key_form()
                        )
                    } else {
                        bad()
                    }
                })?;
            let s = week1_monday(year) + (w - 1) * 7;
            (s, s + 7)
        }
        Period::Day if b.len() == 10 && b[4] == b'-' && b[7] == b'-' => {
            let m = num(5..7).filter(|m| (1..=12).contains(m)).ok_or_else(bad)?;
            let d = num(8..10)
                .filter(|d| (1..=days_in_month(year, m)).contains(d))
                .ok_or_else(bad)?;
            let s = days_from_civil(year, m, d);
            (s, s + 1)
        }
        _ => return Err(bad()),
    };
    Ok(Span {
        period,
        key: key.to_string(),
        start,
        end,
    })
}

/// The period of this length holding `day`.
pub fn span_of(period: Period, day: i64) -> Span {
    let (y, m, d) = crate::util::civil_from_days(day);
    let (y, m) = (y, i64::from(m));
    let key = match period {
        Period::Day => format!("{y:04}-{m:02}-{d:02}"),
        Period::Week => {
            let (wy, w) = iso_week(day);
            format!("{wy:04}-W{w:02}")
        }
        Period::Month => format!("{y:04}-{m:02}"),
        Period::Quarter => format!("{y:04}-Q{}", (m - 1) / 3 + 1),
        Period::Year => format!("{y:04}"),
    };
    // Every key made here is well formed.
    parse_key(period, &key).unwrap_or(Span {
        period,
        key,
        start: day,
        end: day + 1,
    })
}

/// The finer periods a summary of `span` is made from, in order: for a
/// month, the ISO weeks wholly inside it, and the days of the month no such
/// week holds (so every day is counted once); for the rest, the periods of
/// the next size down, which tile it exactly.
pub fn parts(span: &Span) -> Vec<Span> {
    let Some(finer) = span.period.finer() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut day = span.start;
    while day < span.end {
        let s = span_of(finer, day);
        if s.start >= span.start && s.end <= span.end {
            day = s.end;
            out.push(s);
        } else {
            out.push(span_of(Period::Day, day));
            day += 1;
        }
    }
    out
}

/// Monday = 0 … Sunday = 6 (1970-01-01 was a Thursday).
fn weekday(day: i64) -> i64 {
    (day + 3).rem_euclid(7)
}

fn week1_monday(year: i64) -> i64 {
    let jan4 = days_from_civil(year, 1, 4);
    jan4 - weekday(jan4)
}

/// 52 or 53: the ISO week of 28 December.
fn iso_weeks(year: i64) -> i64 {
    iso_week(days_from_civil(year, 12, 28)).1
}

/// The ISO week-numbering year and week of a day.
fn iso_week(day: i64) -> (i64, i64) {
    let thursday = day - weekday(day) + 3;
    let (y, _, _) = crate::util::civil_from_days(thursday);
    (y, (thursday - days_from_civil(y, 1, 1)) / 7 + 1)
}

fn month_span(y: i64, m: i64) -> (i64, i64) {
    let s = days_from_civil(y, m, 1);
    (s, s + days_in_month(y, m))
}

pub(crate) fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 (Howard Hinnant's algorithm).
pub(crate) fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn day(s: &str) -> i64 {
        parse_key(Period::Day, s).unwrap().start
    }

    #[test]
    fn iso_weeks_follow_the_first_thursday() {
        // 2026-01-01 is a Thursday: week 1 starts on Monday 2025-12-29.
        let w = parse_key(Period::Week, "2026-W01").unwrap();
        assert_eq!((w.start, w.end), (day("2025-12-29"), day("2026-01-05")));
        assert_eq!(span_of(Period::Week, day("2025-12-29")).key, "2026-W01");
        assert_eq!(span_of(Period::Week, day("2026-01-04")).key, "2026-W01");
        // 2027-01-01 is a Friday: it belongs to 2026's last week, W53.
        assert_eq!(span_of(Period::Week, day("2027-01-03")).key, "2026-W53");
        assert_eq!(span_of(Period::Week, day("2027-01-04")).key, "2027-W01");
        assert!(parse_key(Period::Week, "2026-W53").is_ok());
        let e = parse_key(Period::Week, "2025-W53").unwrap_err();
        assert!(e.contains("2025 has 52 ISO weeks"), "{e}");
        for bad in ["2026-W00", "2026-W1", "2026W01", "2026-w01", "2026-W54"] {
            assert!(parse_key(Period::Week, bad).is_err(), "{bad}");
        }
        // 2020: 53 weeks (a leap year starting on Wednesday).
        assert!(parse_key(Period::Week, "2020-W53").is_ok());
    }

    #[test]
    fn quarters_months_days_and_years() {
        let q = parse_key(Period::Quarter, "2026-Q4").unwrap();
        assert_eq!((q.start, q.end), (day("2026-10-01"), day("2027-01-01")));
        assert_eq!(span_of(Period::Quarter, day("2026-03-31")).key, "2026-Q1");
        assert_eq!(span_of(Period::Quarter, day("2026-04-01")).key, "2026-Q2");
        for bad in ["2026-Q0", "2026-Q5", "2026-q1", "2026Q1"] {
            let e = parse_key(Period::Quarter, bad).unwrap_err();
            assert!(e.contains("allowed: YYYY-Qn (Q1 to Q4)"), "{e}");
        }
        let m = parse_key(Period::Month, "2024-02").unwrap();
        assert_eq!(m.end - m.start, 29);
        assert!(parse_key(Period::Month, "2026-13").is_err());
        assert!(parse_key(Period::Day, "2026-02-29").is_err());
        assert!(parse_key(Period::Day, "2024-02-29").is_ok());
        assert!(parse_key(Period::Day, "2026-11").is_err());
        let y = parse_key(Period::Year, "2026").unwrap();
        assert_eq!(y.end - y.start, 365);
        assert!(parse_key(Period::Year, "26").is_err());
        assert!(parse_key(Period::Year, "0000").is_err());
    }

    #[test]
    fn parts_tile_their_period_once() {
        // November 2026: W45 to W48 lie inside it (Nov 2 to Nov 29); the
        // 1st and the 30th are taken as days.
        let m = parse_key(Period::Month, "2026-11").unwrap();
        let keys: Vec<String> = parts(&m).into_iter().map(|s| s.key).collect();
        assert_eq!(
            keys,
            [
                "2026-11-01",
                "2026-W45",
                "2026-W46",
                "2026-W47",
                "2026-W48",
                "2026-11-30"
            ]
        );
        let q = parse_key(Period::Quarter, "2026-Q2").unwrap();
        let keys: Vec<String> = parts(&q).into_iter().map(|s| s.key).collect();
        assert_eq!(keys, ["2026-04", "2026-05", "2026-06"]);
        let w = parse_key(Period::Week, "2026-W45").unwrap();
        assert_eq!(parts(&w).len(), 7);
        for p in Period::ALL {
            let s = span_of(p, day("2026-11-26"));
            let covered: i64 = parts(&s).iter().map(|c| c.end - c.start).sum();
            if p != Period::Day {
                assert_eq!(covered, s.end - s.start, "{p:?}");
            }
        }
    }
}
