//! `impl ItemStore for FdbStore`: each method runs its transaction body in
//! FoundationDB's retry loop (`transact!`), on input that
//! `liveness_core::CheckInput` already checked. The bodies are here, except the dead
//! set (`dead_once`) and the sweep of a dead token's items (`sweep_once`), in
//! `deaths.rs`, and the batch of many tokens (`batch.rs`).

use liveness_core::{
    async_trait, BatchResult, DeadToken, EnqueueOptions, FencingToken, Item, ItemId, ItemRecord,
    ItemState, ItemStore, Lease, Outcome, RequestId, Sweep,
};

use crate::core::transact;
use crate::core::FdbStore;
use crate::error::corrupt;
use crate::keys::{decode_u64, Count, ItemMeta};
use crate::kv::{Attempt, Fail, RangeRead, Transaction};

#[async_trait]
impl ItemStore for FdbStore {
    async fn enqueue(
        &self,
        payload: &[u8],
        options: EnqueueOptions,
    ) -> liveness_core::Result<ItemId> {
        let (max, key) = (options.max_attempts, options.key);
        Ok(ItemId(
            transact!(self.db, |tx, _at| self.enqueue_once(tx, payload, max, key))?.0,
        ))
    }

    async fn claim_request(
        &self,
        lease: &Lease,
        n: usize,
        req: RequestId,
    ) -> liveness_core::Result<Vec<Item>> {
        Ok(transact!(self.db, |tx, _at| self.claim_once(tx, lease, n, req))?.0)
    }

    async fn finish(
        &self,
        lease: &Lease,
        id: ItemId,
        outcome: Outcome,
    ) -> liveness_core::Result<Option<ItemState>> {
        Ok(transact!(self.db, |tx, at| self
            .finish_once(tx, at, lease, id, outcome))?
        .0)
    }

    async fn sweep_many(&self, tokens: &[FencingToken]) -> BatchResult<Sweep> {
        self.sweep_batch(tokens).await
    }

    async fn dead_tokens(&self, limit: usize) -> liveness_core::Result<Vec<DeadToken>> {
        Ok(transact!(self.db, |tx, _at| self.dead_once(tx, limit))?.0)
    }

    async fn item(&self, id: ItemId) -> liveness_core::Result<Option<ItemRecord>> {
        Ok(transact!(self.db, |tx, _at| self.read_record(tx, id.0))?.0)
    }
}

// The transaction bodies of the item operations: one attempt each.
impl FdbStore {
    pub(crate) async fn enqueue_once(
        &self,
        tx: &mut dyn Transaction,
        payload: &[u8],
        max_attempts: u32,
        key: Option<RequestId>,
    ) -> Result<u64, Fail> {
        let key = key.map(|k| self.layout.enqueue_key(k.to_bytes()));
        if let Some(key) = &key {
            // Also how a retry after an unknown commit result finds its own enqueue.
            if let Some(raw) = tx.get(key, false).await? {
                return Ok(decode_u64(&raw)?);
            }
        }
        let id = self.next_counter(tx, "item").await?;
        if let Some(key) = &key {
            tx.set(key, &id.to_be_bytes());
        }
        let meta = ItemMeta {
            attempts: 0,
            max_attempts,
            state: ItemState::Pending,
        };
        tx.set(&self.layout.item(id), &meta.encode());
        tx.set(&self.layout.payload(id), payload);
        tx.set(&self.layout.pending(id), b"");
        tx.add(&self.layout.count(Count::Pending), 1);
        Ok(id)
    }

    pub(crate) async fn claim_once(
        &self,
        tx: &mut dyn Transaction,
        lease: &Lease,
        n: usize,
        request: RequestId,
    ) -> Result<Vec<Item>, Fail> {
        self.check_current(tx, lease).await?;
        // A repeat of this request (by the caller, or by the retry loop after an
        // unknown commit result): hand back exactly what it took, take nothing new.
        let request_id = request;
        let request = request.to_bytes();
        let (b, e) = self.layout.owned_by(lease.token);
        let mut ours = Vec::new();
        for (k, v) in tx.range(RangeRead::new(&b, &e, usize::MAX)).await? {
            if v.as_slice() == request {
                ours.push(self.layout.parse_id(&k)?);
            }
        }
        if !ours.is_empty() {
            let mut items = Vec::with_capacity(ours.len());
            for id in ours {
                if let Some(rec) = self.read_record(tx, id).await? {
                    items.push(rec.item);
                }
            }
            return Ok(items);
        }
        // Else admitted only above the token's high-water mark, which it raises (also
        // when nothing is pending): a late or repeated copy, or an older id after a
        // newer one, takes nothing. Read for conflicts: concurrent claims of one
        // token serialize on it.
        let mark = self.layout.claim_mark(lease.token);
        if let Some(raw) = tx.get(&mark, false).await? {
            let last = <[u8; 16]>::try_from(raw.as_slice())
                .map_err(|_| Fail::Stop(corrupt("a claim high-water mark")))?;
            if request_id <= RequestId(u128::from_be_bytes(last)) {
                return Ok(Vec::new());
            }
        }
        tx.set(&mark, &request);
        let (b, e) = self.layout.pending_all();
        let rows = tx.range(RangeRead::new(&b, &e, n)).await?;
        let mut items = Vec::with_capacity(rows.len());
        for (k, _) in rows {
            let id = self.layout.parse_id(&k)?;
            let Some(mut meta) = self.read_meta(tx, id, false).await? else {
                return Err(Fail::Stop(corrupt(
                    "a pending index entry without its item",
                )));
            };
            meta.attempts += 1;
            self.move_item(tx, id, &mut meta, ItemState::Owned(lease.token), &request);
            let payload = tx
                .get(&self.layout.payload(id), true)
                .await?
                .unwrap_or_default();
            items.push(Item::new(
                ItemId(id),
                payload,
                meta.attempts,
                meta.max_attempts,
            ));
        }
        Ok(items)
    }

    /// After an unknown commit result: true when the lease is still current, so that an
    /// item it no longer owns was moved by an earlier attempt of this very call (a
    /// live token's items move only through its own `finish`).
    async fn ours_before(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        lease: &Lease,
    ) -> Result<bool, Fail> {
        if !at.maybe_committed {
            return Ok(false);
        }
        match self.check_current(tx, lease).await {
            Ok(_) => Ok(true),
            Err(Fail::Stop(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// One attempt of `finish`: the item handed back as `outcome` says while the
    /// lease's token owns it, else `Fenced`. After an unknown commit result, an item
    /// the token no longer owns while its lease is still current was finished by an
    /// earlier attempt of this very call (completed: gone; handed back: somebody may
    /// have taken it since), which answers as it did.
    pub(crate) async fn finish_once(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        lease: &Lease,
        id: ItemId,
        outcome: Outcome,
    ) -> Result<Option<ItemState>, Fail> {
        let found = self.read_meta(tx, id.0, false).await?;
        let mut meta = match found {
            Some(meta) if meta.state == ItemState::Owned(lease.token) => meta,
            // No longer ours while our lease is current: an earlier attempt of this call
            // finished it (completing removes it, so an item still there was not).
            other
                if (outcome != Outcome::Completed || other.is_none())
                    && self.ours_before(tx, at, lease).await? =>
            {
                return Ok(match (outcome, other) {
                    (Outcome::Completed, _) => None,
                    (_, Some(meta)) if meta.state == ItemState::DeadLettered => {
                        Some(ItemState::DeadLettered)
                    }
                    (Outcome::Retry { .. }, _) => Some(ItemState::Pending),
                    (Outcome::DeadLetter, _) => Some(ItemState::DeadLettered),
                });
            }
            _ => return Err(Fail::Stop(lease.fenced(id))),
        };
        let Some(retry) = outcome.retry() else {
            tx.clear(&self.layout.item(id.0));
            tx.clear(&self.layout.payload(id.0));
            tx.clear(&self.layout.owned(lease.token, id.0));
            tx.add(&self.layout.count(Count::Owned), -1);
            return Ok(None);
        };
        Ok(Some(self.hand_back(tx, id.0, &mut meta, retry)))
    }
}
