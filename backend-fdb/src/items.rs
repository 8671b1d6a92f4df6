//! `impl ItemStore for FdbStore`: each method runs its transaction body in
//! FoundationDB's retry loop (`transact!`), on input that
//! `liveness_core::CheckInput` already checked (an item id that names no item is
//! refused here). The bodies are here, except the sweep of a dead token's items
//! (`requeue_once`, in `deaths.rs`) and the batch of many tokens (`batch.rs`).

use liveness_core::{
    async_trait, EnqueueOptions, Error, FencingToken, InputProblem, Item, ItemCounts, ItemId,
    ItemRecord, ItemState, ItemStateKind, ItemStore, Lease, Page, RequestId, Requeued,
};

use crate::core::transact;
use crate::core::FdbStore;
use crate::error::corrupt;
use crate::keys::{decode_count, decode_u64, Count, ItemMeta};
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

    async fn complete(&self, lease: &Lease, id: ItemId) -> liveness_core::Result<()> {
        transact!(self.db, |tx, at| self.complete_once(tx, at, lease, id))?;
        Ok(())
    }

    async fn fail(
        &self,
        lease: &Lease,
        id: ItemId,
        retry: bool,
    ) -> liveness_core::Result<ItemState> {
        Ok(transact!(self.db, |tx, at| self.fail_once(tx, at, lease, id, retry))?.0)
    }

    async fn requeue_orphans(&self, token: FencingToken) -> liveness_core::Result<Requeued> {
        let mut total = Requeued::default();
        loop {
            let (batch, _) = transact!(self.db, |tx, _at| self.requeue_once(tx, token))?;
            let Some((moved, done)) = batch else {
                break;
            };
            total.requeued.extend(moved.requeued);
            total.dead_lettered.extend(moved.dead_lettered);
            // A batch of a dead session's members ends the call (at most `MAX_BATCH`
            // members per call): the next call goes on.
            let members = !moved.retired.is_empty();
            total.retired.extend(moved.retired);
            if done || members {
                break;
            }
        }
        Ok(total)
    }

    async fn requeue_orphans_many(
        &self,
        tokens: &[FencingToken],
    ) -> liveness_core::Result<Vec<liveness_core::Result<Requeued>>> {
        self.requeue_batch(tokens).await
    }

    async fn item(&self, id: ItemId) -> liveness_core::Result<Option<ItemRecord>> {
        Ok(transact!(self.db, |tx, _at| self.read_record(tx, id.0))?.0)
    }

    async fn item_counts(&self) -> liveness_core::Result<ItemCounts> {
        Ok(transact!(self.db, |tx, _at| self.counts_once(tx))?.0)
    }

    async fn dead_letters(&self, limit: usize) -> liveness_core::Result<Vec<ItemRecord>> {
        Ok(transact!(self.db, |tx, _at| self.dead_letters_once(tx, limit))?.0)
    }

    async fn items(
        &self,
        state: ItemStateKind,
        page: Page<ItemId>,
    ) -> liveness_core::Result<Vec<ItemRecord>> {
        let Page { after, limit } = page;
        Ok(transact!(self.db, |tx, _at| self.items_once(tx, state, after, limit))?.0)
    }

    async fn retry_dead_letter(&self, id: ItemId) -> liveness_core::Result<()> {
        transact!(self.db, |tx, at| self.revive_once(tx, at, id))?;
        Ok(())
    }

    async fn retry_dead_letters(&self, limit: usize) -> liveness_core::Result<Vec<ItemId>> {
        Ok(transact!(self.db, |tx, _at| self.revive_many_once(tx, limit))?.0)
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
            items.push(Item {
                id: ItemId(id),
                payload,
                attempts: meta.attempts,
                max_attempts: meta.max_attempts,
            });
        }
        Ok(items)
    }

    /// After an unknown commit result: true when the lease is still current, so that an
    /// item it no longer owns was moved by an earlier attempt of this very call (a
    /// live token's items move only through its own `complete` and `fail`).
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

    pub(crate) async fn complete_once(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        lease: &Lease,
        id: ItemId,
    ) -> Result<(), Fail> {
        match self.read_meta(tx, id.0, false).await? {
            Some(meta) if meta.state == ItemState::Owned(lease.token) => {}
            // Gone while our lease is current: our earlier attempt completed it.
            None if self.ours_before(tx, at, lease).await? => return Ok(()),
            _ => return Err(Fail::Stop(lease.fenced(id))),
        }
        tx.clear(&self.layout.item(id.0));
        tx.clear(&self.layout.payload(id.0));
        tx.clear(&self.layout.owned(lease.token, id.0));
        tx.add(&self.layout.count(Count::Owned), -1);
        Ok(())
    }

    pub(crate) async fn fail_once(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        lease: &Lease,
        id: ItemId,
        retry: bool,
    ) -> Result<ItemState, Fail> {
        match self.read_meta(tx, id.0, false).await? {
            Some(mut meta) if meta.state == ItemState::Owned(lease.token) => {
                Ok(self.hand_back(tx, id.0, &mut meta, retry))
            }
            // No longer ours while our lease is current: our earlier attempt handed it
            // back (and somebody may have taken it since).
            other if self.ours_before(tx, at, lease).await? => Ok(match other {
                Some(meta) if meta.state == ItemState::DeadLettered => ItemState::DeadLettered,
                _ if retry => ItemState::Pending,
                _ => ItemState::DeadLettered,
            }),
            _ => Err(Fail::Stop(lease.fenced(id))),
        }
    }

    pub(crate) async fn counts_once(&self, tx: &mut dyn Transaction) -> Result<ItemCounts, Fail> {
        let mut c = [0u64; 3];
        for (i, which) in [Count::Pending, Count::Owned, Count::Dead]
            .into_iter()
            .enumerate()
        {
            if let Some(raw) = tx.get(&self.layout.count(which), false).await? {
                c[i] = decode_count(&raw);
            }
        }
        Ok(ItemCounts {
            pending: c[0],
            owned: c[1],
            dead_lettered: c[2],
        })
    }

    pub(crate) async fn dead_letters_once(
        &self,
        tx: &mut dyn Transaction,
        limit: usize,
    ) -> Result<Vec<ItemRecord>, Fail> {
        let mut out = Vec::new();
        for id in self.dead_letter_ids(tx, limit).await? {
            if let Some(rec) = self.read_record(tx, id).await? {
                out.push(rec);
            }
        }
        Ok(out)
    }

    /// The ids of the first `limit` dead-lettered items, lowest first.
    async fn dead_letter_ids(
        &self,
        tx: &mut dyn Transaction,
        limit: usize,
    ) -> Result<Vec<u64>, Fail> {
        let (b, e) = self.layout.dead_letters_all();
        let keys = tx.range(RangeRead::new(&b, &e, limit)).await?;
        let ids = keys.iter().map(|(k, _)| self.layout.parse_id(k));
        Ok(ids.collect::<Result<_, _>>()?)
    }

    /// `items`: the state's index from `after` (pending, dead-lettered), or the item
    /// metas from `after` (owned: there is no index by id), read in one transaction.
    pub(crate) async fn items_once(
        &self,
        tx: &mut dyn Transaction,
        state: ItemStateKind,
        after: Option<ItemId>,
        limit: usize,
    ) -> Result<Vec<ItemRecord>, Fail> {
        let first_id = after.map_or(0, |a| a.0.saturating_add(1));
        let which = match state {
            ItemStateKind::Pending => "p",
            ItemStateKind::DeadLettered => "x",
            ItemStateKind::Owned => "i",
        };
        let (mut b, e) = self.layout.ids_from(which, first_id);
        let mut out = Vec::new();
        loop {
            let batch = if state == ItemStateKind::Owned {
                256
            } else {
                limit
            };
            let rows = tx.range(RangeRead::new(&b, &e, batch).snapshot()).await?;
            for (k, _) in &rows {
                let id = self.layout.parse_id(k)?;
                if let Some(rec) = self.read_record(tx, id).await? {
                    if rec.state.kind() == state {
                        out.push(rec);
                        if out.len() == limit {
                            return Ok(out);
                        }
                    }
                }
            }
            match rows.last() {
                Some((k, _)) if state == ItemStateKind::Owned && rows.len() == batch => {
                    b = k.clone();
                    b.push(0);
                }
                _ => return Ok(out),
            }
        }
    }

    /// `retry_dead_letter`: one item back to pending with no attempts.
    pub(crate) async fn revive_once(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        id: ItemId,
    ) -> Result<(), Fail> {
        let Some(mut meta) = self.read_meta(tx, id.0, false).await? else {
            return Err(Fail::Stop(Error::invalid("item", InputProblem::NoSuchItem)));
        };
        if meta.state != ItemState::DeadLettered {
            // After an unknown commit result, pending with no attempts is our own
            // earlier attempt's work.
            if at.maybe_committed && meta.state == ItemState::Pending && meta.attempts == 0 {
                return Ok(());
            }
            return Err(Fail::Stop(Error::invalid(
                "item",
                InputProblem::NotDeadLettered,
            )));
        }
        meta.attempts = 0;
        self.move_item(tx, id.0, &mut meta, ItemState::Pending, &[]);
        Ok(())
    }

    /// `retry_dead_letters`: the lowest dead-lettered items back to pending.
    pub(crate) async fn revive_many_once(
        &self,
        tx: &mut dyn Transaction,
        limit: usize,
    ) -> Result<Vec<ItemId>, Fail> {
        let mut out = Vec::new();
        for id in self.dead_letter_ids(tx, limit).await? {
            if let Some(mut meta) = self.read_meta(tx, id, false).await? {
                meta.attempts = 0;
                self.move_item(tx, id, &mut meta, ItemState::Pending, &[]);
                out.push(ItemId(id));
            }
        }
        Ok(out)
    }
}
