//! Tables for people, JSON for scripts, and the few formats both share.

use std::time::Duration;

use comfy_table::{presets, ContentArrangement, Table};
use serde::Serialize;

use crate::Failure;

/// A table with `header` and `rows`, columns separated by spaces (as `kubectl get`).
pub(crate) fn table(header: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let mut t = Table::new();
    t.load_style(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.iter().map(|h| h.to_uppercase()));
    for row in rows {
        t.add_row(row);
    }
    // The preset pads every cell with a space on each side: drop the outer ones.
    let text = t.to_string();
    let lines: Vec<&str> = text
        .lines()
        .map(|l| l.strip_prefix(' ').unwrap_or(l).trim_end())
        .collect();
    lines.join("\n")
}

/// `value` as pretty JSON.
pub(crate) fn json<T: Serialize>(value: &T) -> Result<String, Failure> {
    serde_json::to_string_pretty(value).map_err(|e| Failure::Other(format!("JSON: {e}")))
}

/// `value` as JSON on one line.
pub(crate) fn json_line<T: Serialize>(value: &T) -> Result<String, Failure> {
    serde_json::to_string(value).map_err(|e| Failure::Other(format!("JSON: {e}")))
}

/// Prints `value` as JSON, or `human()` when `as_json` is false.
pub(crate) fn print<T: Serialize>(
    as_json: bool,
    value: &T,
    human: impl FnOnce() -> String,
) -> Result<(), Failure> {
    let text = if as_json { json(value)? } else { human() };
    println!("{text}");
    Ok(())
}

/// A duration for people, to a tenth of a second: `4.2s`, `3m 5.0s`, `2h 0m`.
pub(crate) fn duration(d: Duration) -> String {
    let tenths = d.as_millis() / 100;
    let secs = tenths / 10;
    match secs {
        s if s < 60 => format!("{}.{}s", s, tenths % 10),
        s if s < 3600 => format!("{}m {}.{}s", s / 60, s % 60, tenths % 10),
        s => format!("{}h {}m", s / 3600, (s % 3600) / 60),
    }
}

/// Whole milliseconds, for JSON.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(Duration::from_millis(4_260)), "4.2s");
        assert_eq!(duration(Duration::from_millis(185_000)), "3m 5.0s");
        assert_eq!(duration(Duration::from_secs(7_260)), "2h 1m");
        assert_eq!(duration(Duration::ZERO), "0.0s");
    }

    #[test]
    fn tables_have_an_upper_case_header_and_one_line_per_row() {
        let t = table(&["name", "token"], [vec!["w1".into(), "7".into()]]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 2, "{t}");
        assert!(
            lines[0].contains("NAME") && lines[0].contains("TOKEN"),
            "{t}"
        );
        assert!(lines[1].contains("w1") && lines[1].contains('7'), "{t}");
    }
}
