//! `liveness deaths`: the death history, newest first.

use std::time::Duration;

use liveness::{DeathRecord, StoreTime};
use serde::Serialize;

use crate::output::{duration, millis, print_read, table};
use crate::{Ctx, Failure};

/// One death, as `--json` prints it.
#[derive(Debug, Serialize)]
pub(crate) struct DeathRow {
    pub seq: u64,
    pub key: String,
    pub holder: String,
    pub token: u64,
    /// `reaped`, `released` or `superseded`.
    pub cause: &'static str,
    /// How long ago, by the store clock.
    pub ago_ms: u64,
    /// Items its sweep sent back to pending; `null` until the sweep ran.
    pub requeued: Option<u64>,
    /// Items its sweep sent to the dead-letter set; `null` until the sweep ran.
    pub dead_lettered: Option<u64>,
    /// For a session's death, the members that died with it (counted as the
    /// sweep declares them dead); 0 for a lease no member rode; `null` until the
    /// sweep ran.
    pub members: Option<u64>,
}

impl DeathRow {
    fn new(d: &DeathRecord, now: StoreTime) -> Self {
        DeathRow {
            seq: d.seq,
            key: d.key.to_string(),
            holder: d.holder.to_string(),
            token: d.token.0,
            cause: d.cause.as_str(),
            ago_ms: millis(now.saturating_since(d.at)),
            requeued: d.swept.map(|s| s.requeued),
            dead_lettered: d.swept.map(|s| s.dead_lettered),
            members: d.swept.map(|s| s.members),
        }
    }
}

/// Up to `limit` deaths, newest first, none older than `since` by the store clock.
pub(crate) async fn list(
    ctx: &Ctx,
    since: Option<Duration>,
    limit: usize,
) -> Result<Vec<DeathRow>, Failure> {
    let now = ctx.store.store_time().await?;
    let page = ctx.store.capabilities().max_batch.max(1);
    let mut out = Vec::new();
    let mut before = None;
    while out.len() < limit {
        let want = page.min(limit - out.len());
        let got = ctx.store.deaths(before, want).await?;
        let done = got.len() < want;
        before = got.last().map(|d| d.seq);
        for d in &got {
            let row = DeathRow::new(d, now);
            if since.is_some_and(|s| u128::from(row.ago_ms) > s.as_millis()) {
                return Ok(out);
            }
            out.push(row);
        }
        if done || before.is_none() {
            break;
        }
    }
    Ok(out)
}

/// The human table of `rows`. A `members` column (after `cause`) counts the members
/// that died with a session, when some row is a session's death: blank for a lease no
/// member rode.
pub(crate) fn render(rows: &[DeathRow]) -> String {
    let count = |n: Option<u64>| n.map_or_else(|| "-".into(), |n| n.to_string());
    let sessions = rows.iter().any(|r| r.members.is_some_and(|n| n > 0));
    let mut header = vec!["ago", "name", "holder", "token", "cause"];
    if sessions {
        header.push("members");
    }
    header.extend(["requeued", "dead-lettered"]);
    table(
        &header,
        rows.iter().map(|r| {
            let mut cells = vec![
                duration(Duration::from_millis(r.ago_ms)),
                r.key.clone(),
                r.holder.clone(),
                r.token.to_string(),
                r.cause.into(),
            ];
            if sessions {
                cells.push(match r.members {
                    Some(0) => String::new(),
                    n => count(n),
                });
            }
            cells.extend([count(r.requeued), count(r.dead_lettered)]);
            cells
        }),
    )
}

pub(crate) async fn run(ctx: &Ctx, since: Option<Duration>, limit: usize) -> Result<(), Failure> {
    let rows = list(ctx, since, limit).await?;
    print_read(ctx, &rows, || render(&rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(key: &str, members: Option<u64>) -> DeathRow {
        DeathRow {
            seq: 1,
            key: key.into(),
            holder: "h".into(),
            token: 7,
            cause: "reaped",
            ago_ms: 1_000,
            requeued: members.map(|_| 2),
            dead_lettered: members.map(|_| 0),
            members,
        }
    }

    #[test]
    fn a_session_death_shows_its_member_count() {
        let text = render(&[
            row("sessions/p-1", Some(10_000)),
            row("members/solo", Some(0)),
            row("members/fresh", None),
        ]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("CAUSE   MEMBERS  REQUEUED"), "{text}");
        assert!(lines[1].contains("reaped  10000    2"), "{text}");
        // Blank for a lease no member rode, `-` until the sweep ran.
        assert!(lines[2].contains("reaped           2"), "{text}");
        assert!(lines[3].contains("reaped  -        -"), "{text}");
    }

    #[test]
    fn without_a_session_death_there_is_no_members_column() {
        let text = render(&[row("members/solo", Some(0)), row("members/x", None)]);
        assert!(!text.contains("MEMBERS"), "{text}");
        assert!(
            text.lines().next().unwrap().contains("CAUSE   REQUEUED"),
            "{text}"
        );
    }
}
