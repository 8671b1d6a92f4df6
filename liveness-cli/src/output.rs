//! Tables for people, JSON for scripts, and the few formats both share.

use std::time::Duration;

use comfy_table::{presets, ContentArrangement, Table};
use serde::Serialize;

use crate::{Ctx, Failure};

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

/// `url` with its password (the URL's `user:password@`, and any query parameter whose
/// name contains `password`) replaced by `***`: what may be printed.
pub(crate) fn redact(url: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((head, query)) => (head, Some(query)),
        None => (url, None),
    };
    let mut out = match head.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find(['/', '#']).unwrap_or(rest.len());
            let (authority, path) = rest.split_at(end);
            let authority = match authority.rsplit_once('@') {
                Some((userinfo, host)) => match userinfo.split_once(':') {
                    Some((user, _)) => format!("{user}:***@{host}"),
                    None => authority.to_owned(),
                },
                None => authority.to_owned(),
            };
            format!("{scheme}://{authority}{path}")
        }
        None => head.to_owned(),
    };
    if let Some(query) = query {
        let params: Vec<String> = query
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((name, _)) if name.to_ascii_lowercase().contains("password") => {
                    format!("{name}=***")
                }
                _ => p.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

/// The line above every table: which store and namespace it was read from.
pub(crate) fn header(ctx: &Ctx) -> String {
    format!(
        "store {} ({}), namespace {}",
        redact(&ctx.url),
        ctx.store.backend(),
        ctx.store.issuer().namespace()
    )
}

/// Prints `value` as JSON, or the [`header`] and `human()` when `ctx.json` is false.
pub(crate) fn print_read<T: Serialize>(
    ctx: &Ctx,
    value: &T,
    human: impl FnOnce() -> String,
) -> Result<(), Failure> {
    print(ctx.json, value, || format!("{}\n{}", header(ctx), human()))
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
    fn passwords_are_never_printed() {
        for (url, shown) in [
            ("redis://:s3cret@h:6379?ns=a", "redis://:***@h:6379?ns=a"),
            (
                "postgres://u:s3cret@h1,h2/db?ns=a",
                "postgres://u:***@h1,h2/db?ns=a",
            ),
            (
                "etcd://h:2379?user=u&password=s3cret&ns=a",
                "etcd://h:2379?user=u&password=***&ns=a",
            ),
            ("redis://u@h?ns=a", "redis://u@h?ns=a"),
            ("sqlite:///tmp/x@y.db?ns=a", "sqlite:///tmp/x@y.db?ns=a"),
            ("sqlite:x.db", "sqlite:x.db"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
    }

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
