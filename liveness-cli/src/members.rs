//! `liveness members`: the leases of a space, in name order, with their time left;
//! members riding a session (one per process) grouped under it.

use std::time::Duration;

use liveness::Page;
use liveness::{Key, LeaseInfo, LeaseStatus, Space};
use serde::Serialize;

use crate::output::{duration, millis, print_read, table};
use crate::{Ctx, Failure};

/// One lease, as `--json` prints it.
#[derive(Debug, Serialize)]
pub(crate) struct MemberRow {
    pub key: String,
    pub name: String,
    pub holder: String,
    pub token: u64,
    pub ttl_ms: u64,
    /// `live` or `expired` (not yet reaped); `unknown` for a status newer than this
    /// command.
    pub status: &'static str,
    /// Time left by the store clock; `null` once expired.
    pub remaining_ms: Option<u64>,
    /// The session it rides (`sessions/<process>`); `null` for a lease of its own.
    pub session: Option<String>,
}

impl From<&LeaseInfo> for MemberRow {
    fn from(l: &LeaseInfo) -> Self {
        let (status, remaining) = match l.status {
            LeaseStatus::Live { remaining } => ("live", Some(remaining)),
            LeaseStatus::Expired => ("expired", None),
            // A status added to the library after this command was written.
            _ => ("unknown", None),
        };
        MemberRow {
            key: l.key.to_string(),
            name: l.key.name().to_string(),
            holder: l.holder.to_string(),
            token: l.token.0,
            ttl_ms: millis(l.ttl.duration()),
            status,
            remaining_ms: remaining.map(millis),
            session: l.session.as_ref().map(ToString::to_string),
        }
    }
}

/// Up to `limit` leases of `space`, paging through the store in name order.
pub(crate) async fn list(
    ctx: &Ctx,
    space: &Space,
    limit: usize,
) -> Result<Vec<LeaseInfo>, Failure> {
    let page = ctx.store.capabilities().max_batch.max(1);
    let mut out: Vec<LeaseInfo> = Vec::new();
    let mut after: Option<Key> = None;
    while out.len() < limit {
        let want = page.min(limit - out.len());
        let got = ctx
            .store
            .leases(
                space,
                Page {
                    after: after.as_ref(),
                    limit: want,
                },
            )
            .await?;
        let done = got.len() < want;
        after = got.last().map(|l| l.key.clone());
        out.extend(got);
        if done || after.is_none() {
            break;
        }
    }
    Ok(out)
}

/// `n` and `word`, plural unless `n` is 1: `1 member`, `3 members`.
pub(crate) fn count(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// The time left of a group: the least of its rows', `expired` when any is expired.
fn group_left(rows: &[&MemberRow]) -> String {
    match rows.iter().map(|r| r.remaining_ms).min().flatten() {
        Some(ms) => format!("{} left", duration(Duration::from_millis(ms))),
        None => "expired".into(),
    }
}

/// `rows` in groups: each session's members (sessions by key), then the leases of
/// their own. Each group keeps its rows' order.
pub(crate) fn by_session(rows: &[MemberRow]) -> Vec<(Option<&str>, Vec<&MemberRow>)> {
    let mut groups: Vec<(Option<&str>, Vec<&MemberRow>)> = Vec::new();
    for row in rows {
        let session = row.session.as_deref();
        match groups.iter_mut().find(|(s, _)| *s == session) {
            Some((_, members)) => members.push(row),
            None => groups.push((session, vec![row])),
        }
    }
    // `None` sorts first: put the leases of their own last.
    groups.sort_by(|a, b| (a.0.is_none(), a.0).cmp(&(b.0.is_none(), b.0)));
    groups
}

/// The human table of `rows`: in name order when `flat` or when no row rides a
/// session; otherwise grouped, a line per session (its key, its members among
/// `rows`, its time left) above its members, then `own leases` above the rest.
pub(crate) fn render(rows: &[MemberRow], flat: bool) -> String {
    let table = render_table(rows, flat);
    match unreaped_note(rows) {
        Some(note) => format!("{table}\n{note}"),
        None => table,
    }
}

/// The line under the table when some rows are expired and not yet reaped: only a
/// checker declares them dead and requeues their items, and a fleet without one
/// keeps them for ever.
fn unreaped_note(rows: &[MemberRow]) -> Option<String> {
    let expired = rows.iter().filter(|r| r.status == "expired").count();
    (expired > 0).then(|| {
        format!(
            "{} not yet reaped: a checker declares {} dead and requeues the items; \
             if this stays, no checker runs (`liveness check` starts one)",
            count(expired, "expired lease"),
            if expired == 1 { "it" } else { "them" },
        )
    })
}

/// [`render`]'s table alone.
fn render_table(rows: &[MemberRow], flat: bool) -> String {
    let header = ["name", "holder", "token", "time left", "status"];
    let cells = |r: &MemberRow| {
        vec![
            r.name.clone(),
            r.holder.clone(),
            r.token.to_string(),
            r.remaining_ms
                .map(|ms| duration(Duration::from_millis(ms)))
                .unwrap_or_else(|| "-".into()),
            r.status.into(),
        ]
    };
    if flat || rows.iter().all(|r| r.session.is_none()) {
        return table(&header, rows.iter().map(cells));
    }
    let groups = by_session(rows);
    // One table, so that the columns line up across groups; each group's line goes
    // above its first row, the table indented under it.
    let text = table(
        &header,
        groups
            .iter()
            .flat_map(|(_, members)| members.iter().map(|r| cells(r))),
    );
    let mut lines = text.lines();
    let mut out = Vec::new();
    if let Some(head) = lines.next() {
        out.push(format!("  {head}"));
    }
    for (session, members) in &groups {
        out.push(match session {
            Some(key) => format!(
                "{key}: {}, {}",
                count(members.len(), "member"),
                group_left(members)
            ),
            None => format!("own leases: {}", count(members.len(), "member")),
        });
        out.extend(lines.by_ref().take(members.len()).map(|l| format!("  {l}")));
    }
    out.join("\n")
}

pub(crate) async fn run(ctx: &Ctx, space: &str, limit: usize, flat: bool) -> Result<(), Failure> {
    let space = Space::new(space)?;
    let rows: Vec<MemberRow> = list(ctx, &space, limit)
        .await?
        .iter()
        .map(Into::into)
        .collect();
    print_read(ctx, &rows, || render(&rows, flat))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, session: Option<&str>, remaining_ms: Option<u64>) -> MemberRow {
        MemberRow {
            key: format!("members/{name}"),
            name: name.into(),
            holder: "h".into(),
            token: 1,
            ttl_ms: 10_000,
            status: if remaining_ms.is_some() {
                "live"
            } else {
                "expired"
            },
            remaining_ms,
            session: session.map(Into::into),
        }
    }

    #[test]
    fn expired_rows_are_explained_under_the_table() {
        let live = [row("a", None, Some(3_000))];
        assert!(!render(&live, false).contains("reaped"));
        let text = render(&[row("a", None, Some(3_000)), row("b", None, None)], true);
        let last = text.lines().last().unwrap();
        assert!(
            last.starts_with("1 expired lease not yet reaped: a checker declares it dead"),
            "{text}"
        );
        assert!(last.contains("`liveness check`"), "{text}");
    }

    #[test]
    fn members_of_a_session_are_listed_under_it_then_the_own_leases() {
        let rows = [
            row("a", None, Some(3_000)),
            row("b", Some("sessions/p-2"), Some(4_000)),
            row("c", Some("sessions/p-1"), Some(2_000)),
            row("d", Some("sessions/p-2"), Some(4_000)),
            row("e", Some("sessions/p-1"), None),
        ];
        let text = render_table(&rows, false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 9, "{text}");
        assert!(lines[0].trim_start().starts_with("NAME"), "{text}");
        assert_eq!(lines[1], "sessions/p-1: 2 members, expired", "{text}");
        assert!(lines[2].trim_start().starts_with("c "), "{text}");
        assert!(lines[3].trim_start().starts_with("e "), "{text}");
        assert_eq!(lines[4], "sessions/p-2: 2 members, 4.0s left", "{text}");
        assert!(lines[5].trim_start().starts_with("b "), "{text}");
        assert!(lines[6].trim_start().starts_with("d "), "{text}");
        assert_eq!(lines[7], "own leases: 1 member", "{text}");
        assert!(lines[8].trim_start().starts_with("a "), "{text}");
        // The columns line up across groups.
        let at = |l: &str| l.find("TIME LEFT").or_else(|| l.find("4.0s"));
        assert_eq!(at(lines[0]), at(lines[5]), "{text}");
    }

    #[test]
    fn without_sessions_or_with_flat_the_table_is_in_name_order() {
        let plain = [row("a", None, Some(1_000)), row("b", None, Some(1_000))];
        assert_eq!(render_table(&plain, false), render_table(&plain, true));
        assert!(!render(&plain, false).contains("own leases"));
        let riding = [
            row("a", Some("sessions/p"), Some(1_000)),
            row("b", None, None),
        ];
        let flat = render_table(&riding, true);
        assert!(!flat.contains("sessions/p"), "{flat}");
        assert_eq!(flat.lines().count(), 3, "{flat}");
    }
}
