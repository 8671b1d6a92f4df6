//! `impl ItemStore for RedisStore`: each method runs its own script (declared next
//! to it), or forwards the sweep of dead tokens to `batch.rs` (the single
//! `sweep` of the core's `Store` facade arrives as a batch of one) and the
//! dead set to `deaths.rs`. The input arrives checked (the core's `CheckInput`).
//!
//! A delay (an enqueue's, a retry's) is sent in microseconds; the script adds it to
//! the server's `TIME` and keeps the item in its queue's held zsets until a claim of
//! that queue finds it due.

use std::time::Duration;

use liveness_core::{
    async_trait, BatchResult, DeadToken, EnqueueOptions, FencingToken, Item, ItemId, ItemRecord,
    ItemState, ItemStore, ItemTimes, Lease, Outcome, QueueName, RequestId, Result, StoreTime,
    Sweep, DEFAULT_DEAD_LETTER_RETENTION, DEFAULT_KEY_RETENTION,
};
use redis::Value;
use tokio::sync::watch;

use crate::core::{
    array, bytes, int, lost, record, scripts, text, u32_, uint, unexpected, us, RedisStore,
};

scripts! {
    ENQUEUE = "enqueue", ENQUEUE_MANY = renewal "enqueue_many", CLAIM = "claim",
    FINISH = dead_letters "finish", ITEM = "item", NEXT_DUE = renewal "next_due",
}

/// A delay as the scripts take it: whole microseconds, rounded up so that an item is
/// never due before the delay has fully passed (`0`: due at once). The core bounds
/// delays by `MAX_DELAY`, far below 2^53 µs.
fn delay_us(delay: Duration) -> u64 {
    u64::try_from(delay.as_nanos().div_ceil(1000)).unwrap_or(u64::MAX)
}

/// A retention as the scripts take it: whole milliseconds, rounded up so that
/// nothing is forgotten early (the config keeps it in whole ms already; `None`, which
/// this store never reports, is `default`).
fn retention_ms(retention: Option<Duration>, default: Duration) -> u64 {
    let retention = retention.unwrap_or(default);
    u64::try_from(retention.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// The key retention as the enqueue script's `PX` takes it, in ms.
fn key_retention_ms(retention: Option<Duration>) -> u64 {
    retention_ms(retention, DEFAULT_KEY_RETENTION)
}

/// The dead-letter retention as the scripts that dead-letter take it (`finish`,
/// `sweep_many`), in ms: their trim removes the dead letters dead-lettered that long
/// or longer before the server's now.
pub(crate) fn dead_letter_retention_ms(retention: Option<Duration>) -> u64 {
    retention_ms(retention, DEFAULT_DEAD_LETTER_RETENTION)
}

/// An item's stored state: `p` pending, `d` dead-lettered, else its owner's token.
pub(crate) fn item_state(op: &'static str, s: &str) -> Result<ItemState> {
    match s {
        "p" => Ok(ItemState::Pending),
        "d" => Ok(ItemState::DeadLettered),
        t => t
            .parse()
            .map(|t| ItemState::Owned(FencingToken(t)))
            .map_err(|_| unexpected(op, "an invalid item state")),
    }
}

/// An item's stored queue (its `q`): nil is the default queue (an item of the
/// default queue has none, as every item of an earlier version); a name that is not a
/// valid [`QueueName`] is a corrupt record.
pub(crate) fn item_queue(op: &'static str, v: Value) -> Result<QueueName> {
    match v {
        Value::Nil => Ok(QueueName::DEFAULT),
        v => QueueName::new(&text(op, v)?)
            .map_err(|_| unexpected(op, "an invalid stored queue name")),
    }
}

/// An item's stored time (its `te`, `ta` or `tf`): µs of the server clock, the reading
/// `store_time` answers; nil (not yet stamped, or an item an earlier version wrote) is
/// none.
fn item_time(op: &'static str, v: Value) -> Result<Option<StoreTime>> {
    match v {
        Value::Nil => Ok(None),
        v => {
            let at = Duration::from_micros(uint(op, &v)?);
            Ok(Some(StoreTime::from_epoch(at)))
        }
    }
}

/// Reads the stored fields of item `id` that follow in `fields`: `{payload, attempts,
/// max, state, last error, queue, enqueued, attempted, finished}`, as `item.lua`
/// answers them and as each group of `items.lua` has them after its id. Any other
/// missing field reads as nil, which fails as a corrupt record; a nil last error is
/// none (no failure gave a text), a nil queue the default queue, a nil time none.
pub(crate) fn item_record(
    op: &'static str,
    id: ItemId,
    fields: &mut impl Iterator<Item = Value>,
) -> Result<ItemRecord> {
    let mut next = || fields.next().unwrap_or(Value::Nil);
    let payload = bytes(op, next())?;
    let attempts = u32_(op, &next())?;
    let max_attempts = u32_(op, &next())?;
    let state = item_state(op, &text(op, next())?)?;
    let last_error = match next() {
        Value::Nil => None,
        v => Some(text(op, v)?),
    };
    let queue = item_queue(op, next())?;
    let enqueued = item_time(op, next())?;
    let mut times = ItemTimes::default().with(item_time(op, next())?, item_time(op, next())?);
    times.enqueued = enqueued;
    Ok(ItemRecord::new(
        Item::new(id, payload, attempts, max_attempts).with_queue(queue),
        state,
    )
    .with_last_error(last_error)
    .with_times(times))
}

/// Reads `{id, payload, attempts, max, waited, queue}` groups of a flat reply:
/// `waited` in µs of the server clock, nil where the script did not measure it; the
/// queue nil for the default queue.
fn items(op: &'static str, flat: Vec<Value>) -> Result<Vec<Item>> {
    if !flat.len().is_multiple_of(6) {
        return Err(unexpected(op, "a reply of another length"));
    }
    let mut out = Vec::with_capacity(flat.len() / 6);
    let mut it = flat.into_iter();
    while let (Some(id), Some(payload), Some(attempts), Some(max), Some(waited), Some(queue)) = (
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
    ) {
        let waited = match waited {
            Value::Nil => None,
            v => Some(us(int(op, &v)?)),
        };
        out.push(
            Item::new(
                ItemId(uint(op, &id)?),
                bytes(op, payload)?,
                u32_(op, &attempts)?,
                u32_(op, &max)?,
            )
            .with_waited(waited)
            .with_queue(item_queue(op, queue)?),
        );
    }
    Ok(out)
}

#[async_trait]
impl ItemStore for RedisStore {
    /// A keyed enqueue declares its key's own string (`ek:<hex>`, written with `PX`
    /// the key retention) and the hash earlier versions kept keys in (read only).
    /// The item goes into the keys of its queue (`Keys::queue_pending` and the next
    /// two).
    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        let key = options.key.map(RequestId::to_hex).unwrap_or_default();
        let queue = options.queue;
        let mut call = ENQUEUE.prepare_invoke();
        call.key(self.keys.item_ids())
            .key(self.keys.legacy_enqueue_keys())
            .key(self.keys.queue_pending(queue))
            .key(self.keys.queue_held(queue))
            .key(self.keys.queue_held_ids(queue))
            .key(self.keys.queues_held())
            .key(self.keys.queues());
        if !key.is_empty() {
            call.key(self.keys.enqueue_key(&key));
        }
        call.arg(self.keys.item_prefix())
            .arg(payload)
            .arg(options.max_attempts)
            .arg(key)
            .arg(delay_us(options.delay))
            .arg(key_retention_ms(self.info.caps.key_retention))
            .arg(queue.as_str());
        Ok(ItemId(uint("enqueue", &self.run(call).await?)?))
    }

    async fn enqueue_many(
        &self,
        payloads: &[Vec<u8>],
        options: EnqueueOptions,
    ) -> Result<Vec<ItemId>> {
        let queue = options.queue;
        let mut call = ENQUEUE_MANY.prepare_invoke();
        call.key(self.keys.item_ids())
            .key(self.keys.queue_pending(queue))
            .key(self.keys.queue_held(queue))
            .key(self.keys.queue_held_ids(queue))
            .key(self.keys.queues_held())
            .key(self.keys.queues())
            .arg(self.keys.item_prefix())
            .arg(options.max_attempts)
            .arg(delay_us(options.delay))
            .arg(queue.as_str());
        for payload in payloads {
            call.arg(payload.as_slice());
        }
        let first = uint("enqueue_many", &self.run(call).await?)?;
        Ok((first..).take(payloads.len()).map(ItemId).collect())
    }

    async fn claim_request(&self, lease: &Lease, n: usize, req: RequestId) -> Result<Vec<Item>> {
        self.claim_from(lease, &[QueueName::DEFAULT], n, req).await
    }

    /// One script for every list of queues: per queue its three keys (the default
    /// queue's are the keys earlier versions used, so a claim of it costs what a
    /// claim cost before queues).
    async fn claim_from(
        &self,
        lease: &Lease,
        queues: &[QueueName],
        n: usize,
        req: RequestId,
    ) -> Result<Vec<Item>> {
        let mut call = CLAIM.prepare_invoke();
        call.key(self.keys.lease(&lease.key))
            .key(self.keys.owned(lease.token))
            .key(self.keys.owned_count())
            .key(self.keys.queues_owned())
            .key(self.keys.queues_held())
            .arg(lease.token.0)
            .arg(n)
            .arg(self.keys.item_prefix())
            .arg(req.to_hex());
        for queue in queues {
            call.key(self.keys.queue_pending(*queue))
                .key(self.keys.queue_held(*queue))
                .key(self.keys.queue_held_ids(*queue))
                .arg(queue.as_str());
        }
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

    async fn finish(
        &self,
        lease: &Lease,
        id: ItemId,
        outcome: Outcome,
    ) -> Result<Option<ItemState>> {
        self.finish_with_error(lease, id, outcome, "").await
    }

    /// One script for every outcome, with the text or without (`""`: `finish`): a
    /// failure's text goes into the item's hash (`e`) in the step that hands it back,
    /// and a completed item's hash goes with its text. A dead-lettering removes the
    /// expired dead letters in the same script (the dead-letter retention).
    async fn finish_with_error(
        &self,
        lease: &Lease,
        id: ItemId,
        outcome: Outcome,
        error: &str,
    ) -> Result<Option<ItemState>> {
        let mut call = FINISH.prepare_invoke();
        call.key(self.keys.item(id))
            .key(self.keys.owned(lease.token))
            .key(self.keys.owned_count())
            .key(self.keys.dead_letters())
            .key(self.keys.dead_letter_times())
            .arg(id.0)
            .arg(lease.token.0)
            .arg(match outcome {
                Outcome::Completed => "c",
                Outcome::Retry { .. } => "r",
                Outcome::DeadLetter => "d",
            })
            .arg(delay_us(outcome.delay()))
            .arg(error)
            .arg(dead_letter_retention_ms(
                self.info.caps.dead_letter_retention,
            ));
        match (int("finish", &self.run(call).await?)?, outcome) {
            (3, Outcome::Completed) => Ok(None),
            (1, Outcome::Retry { .. }) => Ok(Some(ItemState::Pending)),
            (2, Outcome::Retry { .. } | Outcome::DeadLetter) => Ok(Some(ItemState::DeadLettered)),
            (0, _) => Err(lease.fenced(id)),
            _ => Err(unexpected("finish", "an unknown status")),
        }
    }

    async fn sweep_many(&self, tokens: &[FencingToken]) -> BatchResult<Sweep> {
        self.sweep_batch(tokens).await
    }

    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        self.dead_set(limit).await
    }

    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>> {
        let mut call = ITEM.prepare_invoke();
        call.key(self.keys.item(id));
        let Some(mut rec) = record("item", self.run(call).await?)? else {
            return Ok(None);
        };
        item_record("item", id, &mut rec).map(Some)
    }

    /// Ticks when any handle on the same server and namespace, in any process, made
    /// items pending: see [`RedisStore`]'s pub/sub subscription. `None` outside a
    /// Tokio runtime.
    fn pending(&self) -> Option<watch::Receiver<u64>> {
        self.signal.receiver()
    }

    async fn next_due(&self) -> Result<Option<Duration>> {
        let mut call = NEXT_DUE.prepare_invoke();
        call.key(self.keys.held()).key(self.keys.queues_held());
        match self.run(call).await? {
            Value::Nil => Ok(None),
            left => Ok(Some(us(int("next_due", &left)?))),
        }
    }
}
