//! `liveness cancel`: removes a pending (or scheduled) job or a dead-lettered one;
//! a job a worker owns is left to it.

use liveness::{ItemId, ItemState};
use serde::Serialize;

use crate::output::print_read;
use crate::{Ctx, Failure};

/// What became of the item, as `--json` prints it.
#[derive(Debug, Serialize)]
struct Cancelled {
    /// The item's id.
    id: u64,
    /// `cancelled` (it was pending), `discarded` (it was dead-lettered), `owned` (left
    /// to the worker that owns it) or `none` (no such item).
    outcome: &'static str,
    /// The token that owns it, when `owned`.
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<u64>,
}

pub(crate) async fn run(ctx: &Ctx, id: u64) -> Result<(), Failure> {
    let state = ctx.store.cancel(ItemId(id)).await?;
    let (outcome, owner) = match state {
        Some(ItemState::Pending) => ("cancelled", None),
        Some(ItemState::DeadLettered) => ("discarded", None),
        Some(ItemState::Owned(token)) => ("owned", Some(token.0)),
        None => ("none", None),
    };
    let out = Cancelled { id, outcome, owner };
    print_read(ctx, &out, || match (out.outcome, out.owner) {
        ("cancelled", _) => format!("item {id}: cancelled (it was pending)"),
        ("discarded", _) => format!("item {id}: discarded (it was dead-lettered)"),
        (_, Some(token)) => format!(
            "item {id}: left alone, a worker owns it (token {token}); it completes or fails it, \
             or its death hands it back"
        ),
        _ => format!("item {id}: no such item (never enqueued, completed or removed)"),
    })
}
