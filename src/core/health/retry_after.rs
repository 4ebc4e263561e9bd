//! How long a provider asked us to stay away: `Retry-After` (seconds or HTTP date),
//! `retry-after-ms`, and the `x-ratelimit-reset*` family (agentgateway virtual models, "Health vs
//! eviction": the eviction duration comes from a 429's Retry-After when none is configured).
//!
//! `now_ms` is passed in, so an HTTP date is turned into a duration without a clock here.

/// The eviction hint in milliseconds from a response's headers, if any header gives one.
///
/// `header` looks a lower-case header name up. The first usable header wins, in this order:
/// `retry-after-ms`, `retry-after`, then every `x-ratelimit-reset*` header (the longest wait).
pub fn hint_ms<'a>(
    header: impl Fn(&str) -> Option<&'a str>,
    names: &[&'a str],
    now_ms: u64,
) -> Option<u64> {
    if let Some(ms) = header("retry-after-ms").and_then(|v| parse_number(v.trim())) {
        return Some(ms.round() as u64);
    }
    if let Some(v) = header("retry-after") {
        return retry_after(v, now_ms);
    }
    names
        .iter()
        .filter(|n| n.starts_with("x-ratelimit-reset"))
        .filter_map(|n| header(n).and_then(|v| ratelimit_reset(v, now_ms)))
        .max()
}

/// `Retry-After`: delay-seconds or an HTTP date (RFC 9110 §10.2.3).
pub fn retry_after(value: &str, now_ms: u64) -> Option<u64> {
    let v = value.trim();
    if let Some(secs) = parse_number(v) {
        return Some((secs * 1000.0).round() as u64);
    }
    let at_ms = http_date_ms(v)?;
    Some(at_ms.saturating_sub(now_ms))
}

/// `x-ratelimit-reset-*`: a Go-style duration (`1s`, `6m0s`, `250ms`), plain seconds, or a Unix
/// timestamp in seconds (values past the year 2001).
pub fn ratelimit_reset(value: &str, now_ms: u64) -> Option<u64> {
    let v = value.trim();
    if let Some(n) = parse_number(v) {
        if n >= 1.0e9 {
            return Some(((n * 1000.0) as u64).saturating_sub(now_ms));
        }
        return Some((n * 1000.0).round() as u64);
    }
    duration_ms(v)
}

/// A non-negative finite decimal number.
fn parse_number(s: &str) -> Option<f64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    s.parse::<f64>().ok().filter(|n| n.is_finite())
}

/// A Go-style duration such as `1h2m3.5s` or `20ms`, in milliseconds.
pub fn duration_ms(s: &str) -> Option<u64> {
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = 0.0f64;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(digits);
        let n = parse_number(num)?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let scale = match unit {
            "ms" => 1.0,
            "s" => 1000.0,
            "m" => 60_000.0,
            "h" => 3_600_000.0,
            _ => return None,
        };
        total += n * scale;
        rest = next;
    }
    Some(total.round() as u64)
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) as milliseconds since the Unix epoch.
fn http_date_ms(s: &str) -> Option<u64> {
    let (_, rest) = s.split_once(", ")?;
    let mut parts = rest.split(' ');
    let day: u64 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = parts.next()?.parse().ok()?;
    let mut hms = parts.next()?.split(':');
    let h: u64 = hms.next()?.parse().ok()?;
    let m: u64 = hms.next()?.parse().ok()?;
    let sec: u64 = hms.next()?.parse().ok()?;
    if parts.next()? != "GMT" || !(1..=31).contains(&day) || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day as i64);
    let secs = u64::try_from(days).ok()? * 86_400 + h * 3600 + m * 60 + sec;
    Some(secs * 1000)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 784_111_777_000; // Sun, 06 Nov 1994 08:49:37 GMT

    fn hint(headers: &[(&'static str, &'static str)]) -> Option<u64> {
        let names: Vec<&str> = headers.iter().map(|(n, _)| *n).collect();
        hint_ms(
            |n| headers.iter().find(|(k, _)| *k == n).map(|(_, v)| *v),
            &names,
            NOW,
        )
    }

    #[test]
    fn retry_after_seconds() {
        assert_eq!(retry_after("2", NOW), Some(2000));
        assert_eq!(retry_after(" 0 ", NOW), Some(0));
        assert_eq!(retry_after("1.5", NOW), Some(1500));
        assert_eq!(retry_after("-1", NOW), None);
        assert_eq!(retry_after("soon", NOW), None);
    }

    #[test]
    fn retry_after_http_date() {
        assert_eq!(http_date_ms("Sun, 06 Nov 1994 08:49:37 GMT"), Some(NOW));
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:40 GMT", NOW),
            Some(3000)
        );
        // A date in the past means "now".
        assert_eq!(retry_after("Sun, 06 Nov 1994 08:00:00 GMT", NOW), Some(0));
        assert_eq!(retry_after("Sun, 06 Foo 1994 08:49:40 GMT", NOW), None);
        assert_eq!(http_date_ms("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(
            http_date_ms("Tue, 29 Feb 2028 12:00:00 GMT"),
            Some(1_835_438_400_000)
        );
    }

    #[test]
    fn retry_after_ms_and_ratelimit_reset_headers() {
        assert_eq!(hint(&[("retry-after-ms", "250")]), Some(250));
        assert_eq!(
            hint(&[("retry-after-ms", "250"), ("retry-after", "9")]),
            Some(250)
        );
        assert_eq!(
            hint(&[
                ("x-ratelimit-reset-requests", "1s"),
                ("x-ratelimit-reset-tokens", "6m0s")
            ]),
            Some(360_000)
        );
        assert_eq!(hint(&[("x-ratelimit-reset", "20ms")]), Some(20));
        assert_eq!(
            ratelimit_reset("1796000010", 1_796_000_000_000),
            Some(10_000),
            "unix seconds"
        );
        assert_eq!(hint(&[("x-ratelimit-reset", "7")]), Some(7000));
        assert_eq!(hint(&[("content-type", "application/json")]), None);
    }

    #[test]
    fn go_durations() {
        assert_eq!(duration_ms("1h2m3.5s"), Some(3_723_500));
        assert_eq!(duration_ms("250ms"), Some(250));
        assert_eq!(duration_ms("3"), None, "a unit is required");
        assert_eq!(duration_ms("3d"), None);
        assert_eq!(duration_ms(""), None);
    }
}
