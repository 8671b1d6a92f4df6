//! `liveness retry`: dead-lettered items back to pending, attempts reset.

use liveness::ItemId;
use serde::Serialize;

use crate::output::print_read;
use crate::{Ctx, Failure};

/// What was retried, as `--json` prints it.
#[derive(Debug, Serialize)]
struct Retried {
    /// The ids moved back to pending, lowest first.
    retried: Vec<u64>,
}

pub(crate) async fn run(ctx: &Ctx, id: Option<u64>, all: bool) -> Result<(), Failure> {
    let mut retried = Vec::new();
    if all {
        let page = ctx.store.capabilities().max_batch.max(1);
        // Until the set is empty, or holds only items this run retried already (a
        // worker failed them again meanwhile): never a loop with the workers.
        let mut seen = std::collections::HashSet::new();
        loop {
            let got = ctx.store.retry_dead_letters(page).await?;
            let fresh: Vec<u64> = got
                .iter()
                .map(|id| id.0)
                .filter(|id| seen.insert(*id))
                .collect();
            if fresh.is_empty() {
                break;
            }
            retried.extend(fresh);
        }
    } else if let Some(id) = id {
        ctx.store.retry_dead_letter(ItemId(id)).await?;
        retried.push(id);
    }
    let out = Retried { retried };
    print_read(ctx, &out, || match out.retried.as_slice() {
        [] => "no dead-lettered item to retry".into(),
        [one] => format!("item {one}: back to pending"),
        many => format!("{} items back to pending", many.len()),
    })
}
