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

/// The human table of `rows`.
pub(crate) fn render(rows: &[DeathRow]) -> String {
    let count = |n: Option<u64>| n.map_or_else(|| "-".into(), |n| n.to_string());
    table(
        &[
            "ago",
            "name",
            "holder",
            "token",
            "cause",
            "requeued",
            "dead-lettered",
        ],
        rows.iter().map(|r| {
            vec![
                duration(Duration::from_millis(r.ago_ms)),
                r.key.clone(),
                r.holder.clone(),
                r.token.to_string(),
                r.cause.into(),
                count(r.requeued),
                count(r.dead_lettered),
            ]
        }),
    )
}

pub(crate) async fn run(ctx: &Ctx, since: Option<Duration>, limit: usize) -> Result<(), Failure> {
    let rows = list(ctx, since, limit).await?;
    print_read(ctx, &rows, || render(&rows))
}
