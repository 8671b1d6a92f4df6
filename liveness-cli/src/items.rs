//! `liveness items`: counts by state, or a page of the items in one state.

use liveness::Page;
use liveness::{ItemCounts, ItemId, ItemRecord, ItemState, ItemStateKind, StoreTime};
use serde::Serialize;

use crate::output::{print_read, table};
use crate::{Ctx, Failure};

/// Item counts, as `--json` prints them.
#[derive(Debug, Serialize)]
pub(crate) struct Counts {
    pub pending: u64,
    pub owned: u64,
    pub dead_lettered: u64,
    /// Milliseconds until the first held-back pending item (a scheduled job, a retry
    /// waiting out its backoff) is due, by the store's clock; absent when none waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_due_ms: Option<u64>,
    /// Seconds, by the store's clock, a dead letter is kept after it was
    /// dead-lettered (`Capabilities::dead_letter_retention`); absent where the store
    /// keeps dead letters until an operator acts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dead_letter_retention_s: Option<u64>,
}

impl Counts {
    /// The counts `c` of a store declaring `caps`.
    pub(crate) fn new(c: ItemCounts, caps: &liveness::store::Capabilities) -> Counts {
        Counts {
            pending: c.pending,
            owned: c.owned,
            dead_lettered: c.dead_lettered,
            next_due_ms: None,
            dead_letter_retention_s: caps.dead_letter_retention.map(|d| d.as_secs()),
        }
    }
}

/// The human table of `counts`, and when the next held-back item is due.
pub(crate) fn render_counts(c: &Counts) -> String {
    let mut out = table(
        &["state", "items"],
        [
            vec!["pending".into(), c.pending.to_string()],
            vec!["owned".into(), c.owned.to_string()],
            vec!["dead-lettered".into(), c.dead_lettered.to_string()],
        ],
    );
    if let Some(ms) = c.next_due_ms {
        let left = humantime::format_duration(std::time::Duration::from_millis(ms));
        out.push_str(&format!(
            "\nsome pending items are held back (scheduled, or waiting out a retry's \
             backoff); the first is due in {left}\n"
        ));
    }
    if c.dead_lettered > 0 {
        let kept = match c.dead_letter_retention_s {
            Some(s) => format!(
                "for {} after they were dead-lettered (by the store's clock), or",
                humantime::format_duration(std::time::Duration::from_secs(s))
            ),
            None => "by this store".to_owned(),
        };
        out.push_str(&format!(
            "\ndead letters are kept {kept} until retried or cancelled \
             (liveness retry, liveness cancel)\n"
        ));
    }
    out
}

/// One item, as `--json` prints it.
#[derive(Debug, Serialize)]
struct ItemRow {
    id: u64,
    state: &'static str,
    /// The owning token, for an owned item.
    owner: Option<u64>,
    /// The queue it waits in.
    queue: String,
    attempts: u32,
    max_attempts: u32,
    payload_bytes: usize,
    /// The payload as text (invalid UTF-8 replaced), cut to 60 characters.
    payload: String,
    /// The error text of its latest failure that gave one, whole; absent when none
    /// (or the store keeps none).
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<String>,
    /// Milliseconds, by the store's clock, from its enqueue to the read; absent where
    /// the store keeps no item times.
    #[serde(skip_serializing_if = "Option::is_none")]
    enqueued_ago_ms: Option<u64>,
    /// Milliseconds from its latest claim to the read; absent before its first claim.
    #[serde(skip_serializing_if = "Option::is_none")]
    attempted_ago_ms: Option<u64>,
    /// Milliseconds from the end of its latest unfinished attempt (a failure, or its
    /// owner's death) to the read; absent before one.
    #[serde(skip_serializing_if = "Option::is_none")]
    finished_ago_ms: Option<u64>,
}

/// Milliseconds from `at` to `now`, both of the store's clock.
fn ago(now: Option<StoreTime>, at: Option<StoreTime>) -> Option<u64> {
    let d = now?.saturating_since(at?);
    Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl ItemRow {
    /// `r` as a row, its times counted back from `now` (the store's clock at the read).
    fn new(r: &ItemRecord, now: Option<StoreTime>) -> Self {
        let mut row = ItemRow::from(r);
        row.enqueued_ago_ms = ago(now, r.times.enqueued);
        row.attempted_ago_ms = ago(now, r.times.attempted);
        row.finished_ago_ms = ago(now, r.times.finished);
        row
    }
}

impl From<&ItemRecord> for ItemRow {
    fn from(r: &ItemRecord) -> Self {
        let (state, owner) = match r.state {
            ItemState::Pending => ("pending", None),
            ItemState::Owned(t) => ("owned", Some(t.0)),
            ItemState::DeadLettered => ("dead-lettered", None),
        };
        let text = String::from_utf8_lossy(&r.item.payload);
        ItemRow {
            id: r.item.id.0,
            state,
            owner,
            queue: r.item.queue.to_string(),
            attempts: r.item.attempts,
            max_attempts: r.item.max_attempts,
            payload_bytes: r.item.payload.len(),
            payload: text.chars().take(60).collect(),
            last_error: r.last_error.clone(),
            enqueued_ago_ms: None,
            attempted_ago_ms: None,
            finished_ago_ms: None,
        }
    }
}

pub(crate) async fn run(
    ctx: &Ctx,
    state: Option<ItemStateKind>,
    limit: usize,
) -> Result<(), Failure> {
    let Some(state) = state else {
        let caps = ctx.store.capabilities();
        let mut counts = Counts::new(ctx.store.item_counts().await?, &caps);
        counts.next_due_ms = ctx
            .store
            .next_due()
            .await?
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        return print_read(ctx, &counts, || render_counts(&counts));
    };
    let page = ctx.store.capabilities().max_batch.max(1);
    // The store's now, to say how long ago each time was (no local clock is read).
    let now = match ctx.store.capabilities().item_times {
        true => Some(ctx.store.store_time().await?),
        false => None,
    };
    let mut rows: Vec<ItemRow> = Vec::new();
    let mut after: Option<ItemId> = None;
    while rows.len() < limit {
        let want = page.min(limit - rows.len());
        let got = ctx.store.items(state, Page { after, limit: want }).await?;
        let done = got.len() < want;
        after = got.last().map(|r| r.item.id);
        rows.extend(got.iter().map(|r| ItemRow::new(r, now)));
        if done || after.is_none() {
            break;
        }
    }
    print_read(ctx, &rows, || render_items(&rows))
}

/// The human table of `rows`; a column of queues when any row is in another than the
/// default queue, and of last errors (each cut to its first line's first 60
/// characters) when any row has one.
fn render_items(rows: &[ItemRow]) -> String {
    let errors = rows.iter().any(|r| r.last_error.is_some());
    let queues = rows
        .iter()
        .any(|r| r.queue != liveness::QueueName::DEFAULT.as_str());
    let mut header = vec!["id", "state", "owner"];
    if queues {
        header.push("queue");
    }
    header.extend(["attempts", "payload"]);
    let times = rows.iter().any(|r| r.enqueued_ago_ms.is_some());
    if times {
        header.extend(["age", "last try"]);
    }
    if errors {
        header.push("last error");
    }
    table(
        &header,
        rows.iter().map(|r| {
            let mut row = vec![
                r.id.to_string(),
                r.state.into(),
                r.owner.map_or_else(|| "-".into(), |t| t.to_string()),
            ];
            if queues {
                row.push(r.queue.clone());
            }
            row.extend([
                format!("{}/{}", r.attempts, r.max_attempts),
                r.payload.clone(),
            ]);
            if times {
                row.extend([short(r.enqueued_ago_ms), short(r.attempted_ago_ms)]);
            }
            if errors {
                row.push(r.last_error.as_deref().map_or_else(
                    || "-".into(),
                    |e| e.lines().next().unwrap_or("").chars().take(60).collect(),
                ));
            }
            row
        }),
    )
}

/// A time ago in whole seconds (`3m 12s`), or `-`.
fn short(ms: Option<u64>) -> String {
    ms.map_or_else(
        || "-".into(),
        |ms| humantime::format_duration(std::time::Duration::from_secs(ms / 1000)).to_string(),
    )
}
