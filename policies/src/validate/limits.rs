//! `[limits]`: cgroup limits with sizes written the way people write them.
//!
//! `memory_max.value` is bytes as an integer or a string with a binary suffix (`"512M"`, `"4G"`);
//! `pids_max.value` is an integer. Invariants after this step: memory is at least
//! [`MIN_MEMORY`] (a bash cannot start in less) and fits `u64`; pids is 1..=`u32::MAX`; each limit
//! has a reason.
//!
//! ```text
//! [limits.memory_max]
//! value = "4G"          -> Limits { memory_max: Some(Limit { value: 4 << 30, .. }), .. }
//! reason = "..."
//! ```

use toml::Spanned;

use super::Src;
use crate::error::{PolicyError, Problem};
use crate::policy::{Limit, Limits};
use crate::raw::{RawLimit, RawLimits};

/// The smallest `memory_max` accepted: below it no shell starts, so such a limit is impossible.
pub const MIN_MEMORY: u64 = 16 << 20;

/// Validate the `[limits]` table.
pub(super) fn limits(src: &Src<'_>, raw: &RawLimits) -> Result<Limits, PolicyError> {
    let memory_max = match &raw.memory_max {
        None => None,
        Some(limit) => Some(memory(src, limit)?),
    };
    let pids_max = match &raw.pids_max {
        None => None,
        Some(limit) => Some(pids(src, limit)?),
    };
    Ok(Limits { memory_max, pids_max })
}

fn memory(src: &Src<'_>, raw: &Spanned<RawLimit>) -> Result<Limit<u64>, PolicyError> {
    let value = &raw.get_ref().value;
    let invalid = |problem| src.invalid(value.span(), "limits.memory_max.value", problem);
    let bytes = match value.get_ref() {
        toml::Value::Integer(n) => u64::try_from(*n).ok(),
        toml::Value::String(s) => parse_size(s),
        other => return Err(invalid(Problem::BadSize(other.to_string()))),
    };
    let Some(bytes) = bytes else {
        return Err(invalid(Problem::BadSize(value.get_ref().to_string())));
    };
    if bytes < MIN_MEMORY {
        return Err(invalid(Problem::OutOfRange {
            value: value.get_ref().to_string(),
            min: MIN_MEMORY,
            max: u64::MAX,
        }));
    }
    let reason = src.reason(raw.span(), "limits.memory_max", &raw.get_ref().reason)?;
    Ok(Limit { value: bytes, reason })
}

fn pids(src: &Src<'_>, raw: &Spanned<RawLimit>) -> Result<Limit<u32>, PolicyError> {
    let value = &raw.get_ref().value;
    let invalid = |problem| src.invalid(value.span(), "limits.pids_max.value", problem);
    let toml::Value::Integer(n) = value.get_ref() else {
        return Err(invalid(Problem::NotAnInteger(value.get_ref().to_string())));
    };
    let count = u32::try_from(*n)
        .ok()
        .filter(|&c| c >= 1)
        .ok_or_else(|| invalid(Problem::OutOfRange { value: n.to_string(), min: 1, max: u64::from(u32::MAX) }))?;
    let reason = src.reason(raw.span(), "limits.pids_max", &raw.get_ref().reason)?;
    Ok(Limit { value: count, reason })
}

/// `"4G"` → 4·2³⁰. Digits, then an optional `K`, `M`, `G` or `T` (either case). `None` when
/// malformed or when it overflows `u64`.
pub(crate) fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits_end = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, suffix) = text.split_at(digits_end);
    if digits.is_empty() {
        return None;
    }
    let shift = match suffix {
        "" => 0,
        "K" | "k" => 10,
        "M" | "m" => 20,
        "G" | "g" => 30,
        "T" | "t" => 40,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(1u64 << shift)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    fn limit(which: &str, value: &str) -> String {
        format!("\n[limits.{which}]\nvalue = {value}\nreason = \"r\"\n")
    }

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("4G"), Some(4 << 30));
        assert_eq!(parse_size("512m"), Some(512 << 20));
        assert_eq!(parse_size("1024"), Some(1024));
        assert_eq!(parse_size(" 2T "), Some(2 << 40));
        for bad in ["", "G", "4GB", "-1", "1.5G", "4 G", "99999999999999999999", "16777216T"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }

    #[test]
    fn limits_validate() {
        let p = with(&(limit("memory_max", "\"4G\"") + &limit("pids_max", "4096"))).unwrap();
        assert_eq!(p.limits.memory_max.unwrap().value, 4 << 30);
        assert_eq!(p.limits.pids_max.unwrap().value, 4096);
        let p = with(&limit("memory_max", "1073741824")).unwrap();
        assert_eq!(p.limits.memory_max.unwrap().value, 1 << 30);
    }

    #[test]
    fn bad_limits_name_the_value() {
        let (problem, at, key) = fails(&limit("memory_max", "\"4 gigs\""));
        assert_eq!(problem, Problem::BadSize("\"4 gigs\"".into()));
        assert_eq!((at, key.as_str()), (first_extra_line() + 2, "limits.memory_max.value"));
        assert!(matches!(fails(&limit("memory_max", "\"1K\"")).0, Problem::OutOfRange { .. }));
        assert!(matches!(fails(&limit("memory_max", "-5")).0, Problem::BadSize(_)));
        assert!(matches!(fails(&limit("memory_max", "true")).0, Problem::BadSize(_)));
        assert!(matches!(fails(&limit("pids_max", "0")).0, Problem::OutOfRange { .. }));
        assert!(matches!(fails(&limit("pids_max", "4294967296")).0, Problem::OutOfRange { .. }));
        assert!(matches!(fails(&limit("pids_max", "\"4096\"")).0, Problem::NotAnInteger(_)));
        let (problem, _, key) = fails("\n[limits.pids_max]\nvalue = 10\n");
        assert_eq!((problem, key.as_str()), (Problem::MissingReason, "limits.pids_max"));
    }
}
