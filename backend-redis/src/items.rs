//! `impl ItemStore for RedisStore`: each method runs its own script (declared next
//! to it), or forwards the sweep of a dead token to `deaths.rs` and its batch to
//! `batch.rs`. The input arrives checked (the core's `CheckInput`); the store still
//! refuses what only it can judge (an item id that names no dead-lettered item).

use liveness_core::{
    async_trait, BatchResult, EnqueueOptions, Error, FencingToken, InputProblem, Item, ItemCounts,
    ItemId, ItemRecord, ItemState, ItemStateKind, ItemStore, Lease, Page, RequestId, Requeued,
    Result,
};
use redis::Value;

use crate::core::{
    array, bytes, ids, int, lost, record, scripts, text, u32_, uint, unexpected, RedisStore,
};

scripts! {
    ENQUEUE = "enqueue", CLAIM = "claim", COMPLETE = "complete", FAIL = "fail",
    ITEM = "item", ITEM_COUNTS = "item_counts", DEAD_LETTERS = "dead_letters",
    ITEMS = "items", RETRY_DEAD_LETTER = "retry_dead_letter",
    RETRY_DEAD_LETTERS = "retry_dead_letters",
}

/// An item's stored state: `p` pending, `d` dead-lettered, else its owner's token.
fn item_state(op: &'static str, s: &str) -> Result<ItemState> {
    match s {
        "p" => Ok(ItemState::Pending),
        "d" => Ok(ItemState::DeadLettered),
        t => t
            .parse()
            .map(|t| ItemState::Owned(FencingToken(t)))
            .map_err(|_| unexpected(op, "an invalid item state")),
    }
}

/// Reads the stored fields of item `id` that follow in `fields`: `{payload, attempts,
/// max, state}`, as `item.lua` answers them and as each group of `items.lua` has them
/// after its id. A missing field reads as nil, which fails as a corrupt record.
fn item_record(
    op: &'static str,
    id: ItemId,
    fields: &mut impl Iterator<Item = Value>,
) -> Result<ItemRecord> {
    let mut next = || fields.next().unwrap_or(Value::Nil);
    let payload = bytes(op, next())?;
    let attempts = u32_(op, &next())?;
    let max_attempts = u32_(op, &next())?;
    let state = item_state(op, &text(op, next())?)?;
    Ok(ItemRecord {
        item: Item {
            id,
            payload,
            attempts,
            max_attempts,
        },
        state,
    })
}

/// Reads `{id, payload, attempts, max}` groups of a flat reply.
fn items(op: &'static str, flat: Vec<Value>) -> Result<Vec<Item>> {
    let mut out = Vec::with_capacity(flat.len() / 4);
    let mut it = flat.into_iter();
    while let (Some(id), Some(payload), Some(attempts), Some(max)) =
        (it.next(), it.next(), it.next(), it.next())
    {
        out.push(Item {
            id: ItemId(uint(op, &id)?),
            payload: bytes(op, payload)?,
            attempts: u32_(op, &attempts)?,
            max_attempts: u32_(op, &max)?,
        });
    }
    Ok(out)
}

#[async_trait]
impl ItemStore for RedisStore {
    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        let mut call = ENQUEUE.prepare_invoke();
        call.key(self.keys.item_ids())
            .key(self.keys.pending())
            .key(self.keys.enqueue_keys())
            .arg(self.keys.item_prefix())
            .arg(payload)
            .arg(options.max_attempts)
            .arg(options.key.map(RequestId::to_hex).unwrap_or_default());
        Ok(ItemId(uint("enqueue", &self.run(call).await?)?))
    }

    async fn claim_request(&self, lease: &Lease, n: usize, req: RequestId) -> Result<Vec<Item>> {
        let mut call = CLAIM.prepare_invoke();
        call.key(self.keys.lease(&lease.key))
            .key(self.keys.pending())
            .key(self.keys.owned(lease.token))
            .key(self.keys.owned_count())
            .arg(lease.token.0)
            .arg(n)
            .arg(self.keys.item_prefix())
            .arg(req.to_hex());
        let mut flat = array("claim", self.run(call).await?)?;
        if flat.is_empty() {
            return Err(unexpected("claim", "an empty reply"));
        }
        let rest = flat.split_off(1);
        match int("claim", &flat[0])? {
            1 => items("claim", rest),
            code @ -3..=-1 => Err(lost(lease, code)),
            _ => Err(unexpected("claim", "an unknown status")),
        }
    }

    async fn complete(&self, lease: &Lease, id: ItemId) -> Result<()> {
        let mut call = COMPLETE.prepare_invoke();
        call.key(self.keys.item(id))
            .key(self.keys.owned(lease.token))
            .key(self.keys.owned_count())
            .arg(id.0)
            .arg(lease.token.0);
        match int("complete", &self.run(call).await?)? {
            1 => Ok(()),
            _ => Err(lease.fenced(id)),
        }
    }

    async fn fail(&self, lease: &Lease, id: ItemId, retry: bool) -> Result<ItemState> {
        let mut call = FAIL.prepare_invoke();
        call.key(self.keys.item(id))
            .key(self.keys.owned(lease.token))
            .key(self.keys.owned_count())
            .key(self.keys.pending())
            .key(self.keys.dead_letters())
            .arg(id.0)
            .arg(lease.token.0)
            .arg(if retry { "1" } else { "0" });
        match int("fail", &self.run(call).await?)? {
            1 => Ok(ItemState::Pending),
            2 => Ok(ItemState::DeadLettered),
            _ => Err(lease.fenced(id)),
        }
    }

    async fn requeue_orphans(&self, token: FencingToken) -> Result<Requeued> {
        self.sweep(token).await
    }

    async fn requeue_orphans_many(&self, tokens: &[FencingToken]) -> BatchResult<Requeued> {
        self.sweep_batch(tokens).await
    }

    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>> {
        let mut call = ITEM.prepare_invoke();
        call.key(self.keys.item(id));
        let Some(mut rec) = record("item", self.run(call).await?)? else {
            return Ok(None);
        };
        item_record("item", id, &mut rec).map(Some)
    }

    async fn item_counts(&self) -> Result<ItemCounts> {
        let mut call = ITEM_COUNTS.prepare_invoke();
        call.key(self.keys.pending())
            .key(self.keys.owned_count())
            .key(self.keys.dead_letters());
        let mut it = array("item_counts", self.run(call).await?)?.into_iter();
        let mut next = || -> Result<u64> { uint("item_counts", &it.next().unwrap_or(Value::Nil)) };
        Ok(ItemCounts {
            pending: next()?,
            owned: next()?,
            dead_lettered: next()?,
        })
    }

    async fn dead_letters(&self, limit: usize) -> Result<Vec<ItemRecord>> {
        let mut call = DEAD_LETTERS.prepare_invoke();
        call.key(self.keys.dead_letters())
            .arg(limit)
            .arg(self.keys.item_prefix());
        Ok(items(
            "dead_letters",
            array("dead_letters", self.run(call).await?)?,
        )?
        .into_iter()
        .map(|item| ItemRecord {
            item,
            state: ItemState::DeadLettered,
        })
        .collect())
    }

    async fn items(&self, state: ItemStateKind, page: Page<ItemId>) -> Result<Vec<ItemRecord>> {
        let Page { after, limit } = page;
        let mut call = ITEMS.prepare_invoke();
        let code = match state {
            ItemStateKind::Pending => {
                call.key(self.keys.pending());
                "p"
            }
            ItemStateKind::Owned => {
                call.key(self.keys.item_ids());
                "o"
            }
            ItemStateKind::DeadLettered => {
                call.key(self.keys.dead_letters());
                "d"
            }
        };
        call.arg(code)
            .arg(after.map_or(0, |id| id.0))
            .arg(limit)
            .arg(self.keys.item_prefix());
        let flat = array("items", self.run(call).await?)?;
        let mut out = Vec::with_capacity(flat.len() / 5);
        let mut it = flat.into_iter();
        while let Some(id) = it.next() {
            let id = ItemId(uint("items", &id)?);
            out.push(item_record("items", id, &mut it)?);
        }
        Ok(out)
    }

    async fn retry_dead_letter(&self, id: ItemId) -> Result<()> {
        let mut call = RETRY_DEAD_LETTER.prepare_invoke();
        call.key(self.keys.item(id))
            .key(self.keys.dead_letters())
            .key(self.keys.pending())
            .arg(id.0);
        match int("retry_dead_letter", &self.run(call).await?)? {
            2 => Ok(()),
            1 => Err(Error::invalid("item", InputProblem::NotDeadLettered)),
            _ => Err(Error::invalid("item", InputProblem::NoSuchItem)),
        }
    }

    async fn retry_dead_letters(&self, limit: usize) -> Result<Vec<ItemId>> {
        let mut call = RETRY_DEAD_LETTERS.prepare_invoke();
        call.key(self.keys.dead_letters())
            .key(self.keys.pending())
            .arg(limit)
            .arg(self.keys.item_prefix());
        ids("retry_dead_letters", self.run(call).await?)
    }
}
