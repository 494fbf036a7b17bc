//! Human durations and sizes as operators write them in `gateway.toml`: `"500ms"`, `"10s"`,
//! `"5m"`, `"25h"`, `"1d"`; `"1MiB"`, `"512KiB"`, or a plain number of bytes.

use std::time::Duration;

/// Parse `"<number><unit>"` with unit one of `ms`, `s`, `m`, `h`, `d`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{text}` has no unit; write e.g. \"10s\", \"5m\", \"25h\""))?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().map_err(|_| format!("`{text}` does not start with a whole number"))?;
    let millis = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        "d" => n.checked_mul(86_400_000),
        _ => return Err(format!("`{text}` has unknown unit `{unit}` (use ms, s, m, h or d)")),
    };
    millis.map(Duration::from_millis).ok_or_else(|| format!("`{text}` is too large"))
}

/// Parse a byte size: a plain integer, or a number with `B`, `KiB`, `MiB`.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: usize = number.parse().map_err(|_| format!("`{text}` does not start with a whole number"))?;
    let factor = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        _ => return Err(format!("`{text}` has unknown unit (use B, KiB or MiB)")),
    };
    n.checked_mul(factor).ok_or_else(|| format!("`{text}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("25h"), Ok(Duration::from_secs(90_000)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("3 weeks").is_err());
        assert!(parse_duration("99999999999999999999d").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("1GB").is_err());
    }
}
