//! `liveness members`: the leases of a space, in name order, with their time left.

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
    /// `live` or `expired` (not yet reaped).
    pub status: &'static str,
    /// Time left by the store clock; `null` once expired.
    pub remaining_ms: Option<u64>,
}

impl From<&LeaseInfo> for MemberRow {
    fn from(l: &LeaseInfo) -> Self {
        let remaining = match l.status {
            LeaseStatus::Live { remaining } => Some(remaining),
            LeaseStatus::Expired => None,
        };
        MemberRow {
            key: l.key.to_string(),
            name: l.key.name().to_string(),
            holder: l.holder.to_string(),
            token: l.token.0,
            ttl_ms: millis(l.ttl.duration()),
            status: if remaining.is_some() {
                "live"
            } else {
                "expired"
            },
            remaining_ms: remaining.map(millis),
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
            .members(
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

/// The human table of `rows`.
pub(crate) fn render(rows: &[MemberRow]) -> String {
    table(
        &["name", "holder", "token", "time left", "status"],
        rows.iter().map(|r| {
            vec![
                r.name.clone(),
                r.holder.clone(),
                r.token.to_string(),
                r.remaining_ms
                    .map(|ms| duration(std::time::Duration::from_millis(ms)))
                    .unwrap_or_else(|| "-".into()),
                r.status.into(),
            ]
        }),
    )
}

pub(crate) async fn run(ctx: &Ctx, space: &str, limit: usize) -> Result<(), Failure> {
    let space = Space::new(space)?;
    let rows: Vec<MemberRow> = list(ctx, &space, limit)
        .await?
        .iter()
        .map(Into::into)
        .collect();
    print_read(ctx, &rows, || render(&rows))
}
