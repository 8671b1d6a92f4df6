//! `liveness queues`: each queue's items by state.

use liveness::QueueCounts;
use serde::Serialize;

use crate::output::{print_read, table};
use crate::{Ctx, Failure};

/// One queue's counts, as `--json` prints them.
#[derive(Debug, Serialize)]
pub(crate) struct QueueRow {
    pub queue: String,
    pub pending: u64,
    pub owned: u64,
    pub dead_lettered: u64,
}

impl From<&QueueCounts> for QueueRow {
    fn from(c: &QueueCounts) -> Self {
        QueueRow {
            queue: c.queue.to_string(),
            pending: c.counts.pending,
            owned: c.counts.owned,
            dead_lettered: c.counts.dead_lettered,
        }
    }
}

/// The human table of `rows`, or a line saying there is no item.
pub(crate) fn render(rows: &[QueueRow]) -> String {
    if rows.is_empty() {
        return "no items in any queue\n".into();
    }
    table(
        &["queue", "pending", "owned", "dead-lettered"],
        rows.iter().map(|r| {
            vec![
                r.queue.clone(),
                r.pending.to_string(),
                r.owned.to_string(),
                r.dead_lettered.to_string(),
            ]
        }),
    )
}

pub(crate) async fn run(ctx: &Ctx) -> Result<(), Failure> {
    let counts = ctx.store.queue_counts().await?;
    let rows: Vec<QueueRow> = counts.iter().map(QueueRow::from).collect();
    print_read(ctx, &rows, || render(&rows))
}
