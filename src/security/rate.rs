//! Per-tool rate limits (`[tools.NAME] rate_limit`): the decision whether
//! one more call may run. The counts come from a [`CallCounter`] (the
//! runtime's: this run's calls in memory, every run's in the SQLite
//! database); only admitted calls are recorded, so a refused call never
//! uses up the allowance.

use crate::config::RateLimit;

pub const MINUTE_MS: i64 = 60_000;
pub const HOUR_MS: i64 = 3_600_000;

/// Calls of one tool already made within each window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// In this run, within the last 60 s.
    pub minute_in_run: u32,
    /// In every run, within the last hour.
    pub hour_all_runs: u32,
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
        decide: &mut dyn FnMut(Counts) -> Option<String>,
    ) -> crate::error::Result<Option<String>>;
}

/// The refusal for a call over `limit`, or `None` while it is under.
pub fn over_limit(tool: &str, limit: &RateLimit, c: Counts) -> Option<String> {
    if let Some(n) = limit.per_minute
        && c.minute_in_run >= n
    {
        return Some(format!(
            "rate limit: {tool} {n}/minute in this run (tools.{tool}.rate_limit.per_minute)"
        ));
    }
    if let Some(n) = limit.per_hour
        && c.hour_all_runs >= n
    {
        return Some(format!(
            "rate limit: {tool} {n}/hour across runs (tools.{tool}.rate_limit.per_hour)"
        ));
    }
    None
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
        };
        let at = |m, h| {
            over_limit(
                "shell",
                &l,
                Counts {
                    minute_in_run: m,
                    hour_all_runs: h,
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
                Counts {
                    minute_in_run: 99,
                    hour_all_runs: 99
                }
            ),
            None
        );
    }
}
