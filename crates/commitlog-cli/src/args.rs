//! Value parsers for numeric arguments: a bad value is a usage error (exit 2)
//! naming the argument, never a panic or a run with a nonsense value.

use std::time::Duration;

/// Largest run the benchmark accepts, in seconds (a day).
const MAX_DURATION_SECS: f64 = 86_400.0;

/// A duration in seconds: finite, positive, at most a day.
pub fn duration_secs(s: &str) -> Result<Duration, String> {
    let secs: f64 = s.parse().map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !secs.is_finite() || secs <= 0.0 || secs > MAX_DURATION_SECS {
        return Err(format!("must be a positive number of seconds, at most {MAX_DURATION_SECS}"));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| e.to_string())
}

/// A segment size in bytes: a positive multiple of 4096 below 4 GiB (record
/// sizes are 32-bit).
pub fn segment_size(s: &str) -> Result<usize, String> {
    let bytes: u64 = s.parse().map_err(|_| format!("`{s}` is not a number of bytes"))?;
    if bytes == 0 || !bytes.is_multiple_of(4096) || bytes >= 1 << 32 {
        return Err("must be a positive multiple of 4096 below 4 GiB".into());
    }
    usize::try_from(bytes).map_err(|_| "too large for this machine".into())
}

/// A count of at least one, at most `max`.
pub fn count_in<T>(max: u64) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: TryFrom<u64>,
{
    move |s| {
        let n: u64 = s.parse().map_err(|_| format!("`{s}` is not a whole number"))?;
        if n == 0 || n > max {
            return Err(format!("must be between 1 and {max}"));
        }
        T::try_from(n).map_err(|_| "too large for this machine".to_string())
    }
}

/// A while ago: `90s`, `15m`, `2h`, `7d`, `500ms`, or several (`1h30m`).
pub fn ago(s: &str) -> Result<Duration, String> {
    let bad = || format!("{s:?} is not a duration such as 90s, 15m, 2h, 7d or 1h30m");
    let mut total = Duration::ZERO;
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let number: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let ms = match &rest[..unit] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        let part = Duration::from_millis(number.checked_mul(ms).ok_or_else(bad)?);
        total = total.checked_add(part).ok_or_else(bad)?;
        rest = &rest[unit..];
    }
    Ok(total)
}

/// A point in time as ms since the Unix epoch: a whole number of ms, or an
/// RFC 3339 time (`2026-12-06T12:00:00Z`, `2026-12-06T13:00:00+01:00`).
pub fn time_ms(s: &str) -> Result<u64, String> {
    if let Ok(ms) = s.parse::<u64>() {
        return Ok(ms);
    }
    let time = chrono::DateTime::parse_from_rfc3339(s)
        .map_err(|_| format!("`{s}` is neither ms since the Unix epoch nor an RFC 3339 time (2026-12-06T12:00:00Z)"))?;
    u64::try_from(time.timestamp_millis()).map_err(|_| format!("`{s}` is before 1970"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_numbers_are_refused_with_a_reason() {
        for bad in ["NaN", "-1", "0", "inf", "1e300", "x", ""] {
            assert!(duration_secs(bad).is_err(), "{bad}");
        }
        assert_eq!(duration_secs("0.5").unwrap(), Duration::from_millis(500));
        for bad in ["0", "4095", "4097", "4294967296", "-4096", "99999999999999999999999"] {
            assert!(segment_size(bad).is_err(), "{bad}");
        }
        assert_eq!(segment_size("65536").unwrap(), 65536);
        let producers = count_in::<usize>(1024);
        assert!(producers("0").is_err() && producers("1025").is_err() && producers("-3").is_err());
        assert_eq!(producers("16").unwrap(), 16);
        assert_eq!(ago("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(ago("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(ago("7d").unwrap(), Duration::from_secs(7 * 86_400));
        assert_eq!(ago("250ms").unwrap(), Duration::from_millis(250));
        for bad in ["", "h", "5", "5y", "1h30", "-5m", "99999999999999999999d"] {
            assert!(ago(bad).is_err(), "{bad}");
        }
        assert_eq!(time_ms("1700000000000").unwrap(), 1_700_000_000_000);
        assert_eq!(time_ms("2023-11-14T22:13:20Z").unwrap(), 1_700_000_000_000);
        assert_eq!(time_ms("2023-11-14T23:13:20+01:00").unwrap(), 1_700_000_000_000);
        for bad in ["yesterday", "-5", "1969-12-31T23:59:59Z", "2023-11-14"] {
            assert!(time_ms(bad).is_err(), "{bad}");
        }
    }
}
