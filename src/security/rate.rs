//! Per-tool rate limits (`[tools.NAME] rate_limit`): the decision whether
//! one more call may run. The counts come from a [`CallCounter`] (the
//! runtime's: this run's calls in memory, every run's in the SQLite
//! database); only admitted calls are recorded, so a refused call never
//! uses up the allowance.

use crate::config::RateLimit;

pub const MINUTE_MS: i64 = 60_000;
pub const HOUR_MS: i64 = 3_600_000;

/// Every tool's limits unless its section sets its own: 10 calls a minute
/// in a run, 200 an hour across runs.
pub const DEFAULT_PER_MINUTE: u32 = 10;
pub const DEFAULT_PER_HOUR: u32 = 200;

/// Calls already made within each window: of one tool, and of every tool
/// (for `[tools] rate_limit`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Counts {
    /// This tool, in this run, within the last 60 s.
    pub minute_in_run: u32,
    /// This tool, in every run, within the last hour.
    pub hour_all_runs: u32,
    /// How long ago (ms) each of this run's calls of the tool was made,
    /// oldest first: what a `burst` allowance is reckoned from.
    pub ages_ms: Vec<u64>,
    /// The same of every tool's calls together.
    pub all_minute_in_run: u32,
    pub all_hour_all_runs: u32,
    pub all_ages_ms: Vec<u64>,
}

/// Where calls are counted. `admit` must be atomic against other processes
/// admitting calls of the same tool: it reads the counts, asks `decide`,
/// and records one call only when `decide` returns `None` and `record` is
/// true (`false` asks without counting: before the operator is asked).
pub trait CallCounter {
    fn admit(
        &self,
        tool: &str,
        hourly: bool,
        record: bool,
        decide: &mut dyn FnMut(&Counts) -> Option<String>,
    ) -> crate::error::Result<Option<String>>;
}

/// A tool's limits as they apply: its own, each unset one the default.
pub fn effective(own: &RateLimit) -> RateLimit {
    RateLimit {
        per_minute: Some(own.per_minute.unwrap_or(DEFAULT_PER_MINUTE)),
        per_hour: Some(own.per_hour.unwrap_or(DEFAULT_PER_HOUR)),
        burst: own.burst,
    }
}

/// With a `burst`, the minute's allowance is a bucket of `burst` calls
/// refilled at `per_minute` a minute: up to `burst` calls at once, then
/// the minute's pace. Whether one more call fits, given the ages of the
/// calls made (oldest first).
pub fn bucket_allows(ages_ms: &[u64], per_minute: u32, burst: u32) -> bool {
    let rate = f64::from(per_minute) / MINUTE_MS as f64; // calls per ms
    let cap = f64::from(burst);
    let mut tokens = cap;
    let mut last: Option<u64> = None;
    for &age in ages_ms {
        if let Some(prev) = last {
            tokens = (tokens + prev.saturating_sub(age) as f64 * rate).min(cap);
        }
        tokens -= 1.0;
        last = Some(age);
    }
    if let Some(prev) = last {
        tokens = (tokens + prev as f64 * rate).min(cap);
    }
    tokens >= 1.0 - 1e-9
}

/// The refusal for a call over `limit` (the tool's, already with its
/// defaults) or over `global` (`[tools] rate_limit`, every tool's calls
/// together), or `None` while it is under both.
pub fn over_limit(tool: &str, limit: &RateLimit, global: &RateLimit, c: &Counts) -> Option<String> {
    let minute = |l: &RateLimit, n: u32, ages: &[u64], what: &str, key: &str| match (
        l.per_minute,
        l.burst,
    ) {
        (Some(pm), Some(b)) if !bucket_allows(ages, pm, b) => Some(format!(
            "rate limit: {what} {pm}/minute after a burst of {b} in this run ({key}.per_minute, {key}.burst)"
        )),
        (Some(pm), None) if n >= pm => Some(format!(
            "rate limit: {what} {pm}/minute in this run ({key}.per_minute)"
        )),
        _ => None,
    };
    let hour = |l: &RateLimit, n: u32, what: &str, key: &str| match l.per_hour {
        Some(ph) if n >= ph => Some(format!(
            "rate limit: {what} {ph}/hour across runs ({key}.per_hour)"
        )),
        _ => None,
    };
    let own = format!("tools.{tool}.rate_limit");
    minute(limit, c.minute_in_run, &c.ages_ms, tool, &own)
        .or_else(|| hour(limit, c.hour_all_runs, tool, &own))
        .or_else(|| {
            minute(
                global,
                c.all_minute_in_run,
                &c.all_ages_ms,
                "all tools",
                "tools.rate_limit",
            )
        })
        .or_else(|| hour(global, c.all_hour_all_runs, "all tools", "tools.rate_limit"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn each_window_refuses_at_its_limit() {
        let l = RateLimit {
            per_minute: Some(2),
            per_hour: Some(5),
            burst: None,
        };
        let at = |m, h| {
            over_limit(
                "shell",
                &l,
                &RateLimit::default(),
                &Counts {
                    minute_in_run: m,
                    hour_all_runs: h,
                    ..Default::default()
                },
            )
        };
        assert_eq!(at(1, 4), None);
        assert_eq!(
            at(2, 0).as_deref(),
            Some("rate limit: shell 2/minute in this run (tools.shell.rate_limit.per_minute)")
        );
        assert_eq!(
            at(0, 5).as_deref(),
            Some("rate limit: shell 5/hour across runs (tools.shell.rate_limit.per_hour)")
        );
        assert_eq!(
            over_limit(
                "shell",
                &RateLimit::default(),
                &RateLimit::default(),
                &Counts {
                    minute_in_run: 99,
                    hour_all_runs: 99,
                    ..Default::default()
                }
            ),
            None
        );
        assert_eq!(
            effective(&RateLimit::default()),
            RateLimit {
                per_minute: Some(10),
                per_hour: Some(200),
                burst: None
            }
        );
    }

    #[test]
    fn a_burst_goes_at_once_then_at_the_minute_pace() {
        // 6 a minute: one every 10 s; a bucket of 3.
        assert!(bucket_allows(&[], 6, 3));
        assert!(bucket_allows(&[5, 4], 6, 3));
        assert!(!bucket_allows(&[5, 4, 3], 6, 3));
        // 10 s after the burst, one more.
        assert!(bucket_allows(&[10_005, 10_004, 10_003], 6, 3));
        assert!(!bucket_allows(&[10_005, 10_004, 10_003, 2], 6, 3));
        let global = RateLimit {
            per_minute: Some(4),
            per_hour: None,
            burst: None,
        };
        let c = Counts {
            all_minute_in_run: 4,
            ..Default::default()
        };
        assert_eq!(
            over_limit("grep", &effective(&RateLimit::default()), &global, &c).as_deref(),
            Some("rate limit: all tools 4/minute in this run (tools.rate_limit.per_minute)")
        );
    }
}
