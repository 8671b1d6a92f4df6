//! `impl ItemStore for FdbStore`: each method runs its transaction body in
//! FoundationDB's retry loop (`transact!`), on input that
//! `liveness_core::CheckInput` already checked. The bodies are here, except the dead
//! set (`dead_once`) and the sweep of a dead token's items (`sweep_once`), in
//! `deaths.rs`, and the batch of many tokens (`batch.rs`).

use liveness_core::{
    async_trait, BatchResult, DeadToken, EnqueueOptions, FencingToken, Item, ItemId, ItemRecord,
    ItemState, ItemStore, Lease, Outcome, QueueName, RequestId, Sweep,
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
        Ok(ItemId(
            transact!(self.db, |tx, _at| self.enqueue_once(tx, payload, options))?.0,
        ))
    }

    async fn claim_request(
        &self,
        lease: &Lease,
        n: usize,
        req: RequestId,
    ) -> liveness_core::Result<Vec<Item>> {
        self.claim_from(lease, &[QueueName::DEFAULT], n, req).await
    }

    async fn claim_from(
        &self,
        lease: &Lease,
        queues: &[QueueName],
        n: usize,
        req: RequestId,
    ) -> liveness_core::Result<Vec<Item>> {
        Ok(transact!(self.db, |tx, _at| self
            .claim_once(tx, lease, queues, n, req))?
        .0)
    }

    async fn finish(
        &self,
        lease: &Lease,
        id: ItemId,
        outcome: Outcome,
    ) -> liveness_core::Result<Option<ItemState>> {
        self.finish_with_error(lease, id, outcome, "").await
    }

    async fn finish_with_error(
        &self,
        lease: &Lease,
        id: ItemId,
        outcome: Outcome,
        error: &str,
    ) -> liveness_core::Result<Option<ItemState>> {
        Ok(transact!(self.db, |tx, at| self
            .finish_once(tx, at, lease, id, outcome, error))?
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
        options: EnqueueOptions,
    ) -> Result<u64, Fail> {
        let key = options.key.map(|k| self.layout.enqueue_key(k.to_bytes()));
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
            max_attempts: options.max_attempts,
            state: ItemState::Pending,
            queue: options.queue,
        };
        tx.set(&self.layout.item(id), &meta.encode());
        tx.set(&self.layout.payload(id), payload);
        tx.set(&self.layout.pending(meta.queue, id), b"");
        self.count_add(tx, meta.queue, Count::Pending, 1);
        Ok(id)
    }

    /// One attempt of `claim_from`: up to `n` pending items of `queues`, the
    /// earlier queues first, each queue's range read lowest id first (with a
    /// conflict: a concurrent claim of the same items makes one of them retry).
    pub(crate) async fn claim_once(
        &self,
        tx: &mut dyn Transaction,
        lease: &Lease,
        queues: &[QueueName],
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
        let mut items = Vec::with_capacity(n);
        for queue in queues {
            if items.len() >= n {
                break;
            }
            let (b, e) = self.layout.pending_in(*queue);
            let rows = tx.range(RangeRead::new(&b, &e, n - items.len())).await?;
            for (k, _) in rows {
                let id = self.layout.parse_id(&k)?;
                let Some(mut meta) = self.read_meta(tx, id, false).await? else {
                    return Err(Fail::Stop(corrupt(
                        "a pending index entry without its item",
                    )));
                };
                if meta.queue != *queue {
                    return Err(Fail::Stop(corrupt(
                        "a pending index entry in another queue than its item's",
                    )));
                }
                meta.attempts += 1;
                self.move_item(tx, id, &mut meta, ItemState::Owned(lease.token), &request);
                let payload = tx
                    .get(&self.layout.payload(id), true)
                    .await?
                    .unwrap_or_default();
                items.push(
                    Item::new(ItemId(id), payload, meta.attempts, meta.max_attempts)
                        .with_queue(meta.queue),
                );
            }
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

    /// One attempt of `finish_with_error`: the item handed back as `outcome` says
    /// while the lease's token owns it, else `Fenced`; handed back with a non-empty
    /// `error`, that text replaces its last one in the same transaction; completed, its
    /// text is cleared with it. After an unknown commit result, an item the token no
    /// longer owns while its lease is still current was finished by an earlier attempt
    /// of this very call (completed: gone; handed back: somebody may have taken it
    /// since), which answers as it did (and wrote the text).
    pub(crate) async fn finish_once(
        &self,
        tx: &mut dyn Transaction,
        at: &Attempt,
        lease: &Lease,
        id: ItemId,
        outcome: Outcome,
        error: &str,
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
            tx.clear(&self.layout.error(id.0));
            tx.clear(&self.layout.owned(lease.token, id.0));
            self.count_add(tx, meta.queue, Count::Owned, -1);
            return Ok(None);
        };
        // An empty text leaves the one kept before.
        if !error.is_empty() {
            tx.set(&self.layout.error(id.0), error.as_bytes());
        }
        Ok(Some(self.hand_back(tx, id.0, &mut meta, retry)))
    }
}

#[cfg(test)]
mod tests {
    use liveness_conformance::fresh_namespace;
    use liveness_core::{
        EnqueueOptions, HolderId, ItemId, ItemState, ItemStore, Key, Lease, LeaseStore,
        OperatorStore, Outcome, Store, Ttl,
    };

    use crate::double::DoubleDatabase;
    use crate::FdbStore;

    /// The error text of item `id` as the store keeps it, read from its key.
    async fn kept(store: &FdbStore, id: ItemId) -> Option<String> {
        let mut tx = store.db.begin().await.unwrap();
        let raw = tx.get(&store.layout.error(id.0), true).await.unwrap();
        raw.map(|raw| String::from_utf8(raw).unwrap())
    }

    async fn member(store: &FdbStore, name: &str) -> Lease {
        let ttl = Ttl::from_secs(30).unwrap();
        let key = Key::member(name).unwrap();
        let holder = HolderId::new("h").unwrap();
        store.acquire(&key, &holder, ttl).await.unwrap()
    }

    /// No clock, no retention: the store says it keeps idempotency keys for good,
    /// and a keyed repeat answers the first id whatever happened in between.
    #[tokio::test]
    async fn idempotency_keys_are_kept_for_good() {
        let db = DoubleDatabase::new();
        let store = db.store(&fresh_namespace());
        assert_eq!(store.capabilities().key_retention, None);
        let key = liveness_core::RequestId::random();
        let first = store
            .enqueue(b"a", EnqueueOptions::keyed(key))
            .await
            .unwrap();
        for _ in 0..3 {
            store
                .enqueue(b"b", EnqueueOptions::default())
                .await
                .unwrap();
        }
        let again = store
            .enqueue(b"a", EnqueueOptions::keyed(key))
            .await
            .unwrap();
        assert_eq!(again, first);
        assert_eq!(store.item_counts().await.unwrap().pending, 4);
    }

    /// True when one of the keys `written` (one list per commit) is `key`.
    fn writes(written: &[Vec<Vec<u8>>], key: &[u8]) -> bool {
        written.iter().flatten().any(|k| k == key)
    }

    /// A failure's text is a key of its own, set by the commit that hands the item
    /// back (one commit); a claim, a failure without text, the sweep after its
    /// owner's death and a dead letter's retry do not write it, and completing or
    /// cancelling the item clears it.
    #[tokio::test]
    async fn an_error_text_goes_with_its_hand_back_and_with_its_item() {
        let db = DoubleDatabase::new();
        let store = db.store(&fresh_namespace());
        let five = EnqueueOptions::default().max_attempts(5);
        let a = store.enqueue(b"a", five).await.unwrap();
        let b = store.enqueue(b"b", five).await.unwrap();
        let (ka, kb) = (store.layout.error(a.0), store.layout.error(b.0));
        let lease = member(&store, "w").await;
        assert_eq!(store.claim(&lease, 10).await.unwrap().len(), 2);

        db.keep_written();
        let r = store
            .finish_with_error(&lease, a, Outcome::RETRY, "a: \"x\"\n\\ ✓")
            .await;
        assert_eq!(r.unwrap(), Some(ItemState::Pending));
        let written = db.take_written();
        assert_eq!(written.len(), 1, "one commit");
        assert!(writes(&written, &ka));
        let r = store
            .finish_with_error(&lease, b, Outcome::DeadLetter, "b")
            .await;
        assert_eq!(r.unwrap(), Some(ItemState::DeadLettered));
        assert_eq!(kept(&store, a).await.as_deref(), Some("a: \"x\"\n\\ ✓"));
        assert_eq!(kept(&store, b).await.as_deref(), Some("b"));

        // Claimed, handed back without text or with an empty one, claimed again, its
        // owner dead and swept, and a dead letter retried: none writes a text.
        db.take_written();
        assert_eq!(store.claim(&lease, 10).await.unwrap().len(), 1);
        store.finish(&lease, a, Outcome::RETRY).await.unwrap();
        assert_eq!(store.claim(&lease, 10).await.unwrap().len(), 1);
        store
            .finish_with_error(&lease, a, Outcome::RETRY, "")
            .await
            .unwrap();
        assert_eq!(store.claim(&lease, 10).await.unwrap().len(), 1);
        assert!(store.release(&lease).await.unwrap());
        assert_eq!(store.sweep(lease.token).await.unwrap().requeued, [a]);
        store.retry_dead_letter(b).await.unwrap();
        let written = db.take_written();
        assert!(!writes(&written, &ka) && !writes(&written, &kb));
        let record = store.item(a).await.unwrap().unwrap();
        assert_eq!(record.last_error.as_deref(), Some("a: \"x\"\n\\ ✓"));
        assert_eq!(kept(&store, b).await.as_deref(), Some("b"));

        // Cancelled and completed: cleared with the item.
        assert_eq!(store.cancel(a).await.unwrap(), Some(ItemState::Pending));
        assert_eq!(kept(&store, a).await, None);
        let lease = member(&store, "w2").await;
        assert_eq!(store.claim(&lease, 10).await.unwrap().len(), 1);
        store.complete(&lease, b).await.unwrap();
        assert_eq!(kept(&store, b).await, None);
    }

    /// After an unknown commit result, the retry of a hand-back answers what the
    /// applied commit did, and the text it wrote is there once.
    #[tokio::test]
    async fn a_hand_back_after_an_unknown_result_keeps_its_text() {
        let db = DoubleDatabase::new();
        let store = db.store(&fresh_namespace());
        let id = store
            .enqueue(b"x", EnqueueOptions::default())
            .await
            .unwrap();
        let lease = member(&store, "w").await;
        assert_eq!(store.claim(&lease, 1).await.unwrap().len(), 1);
        db.inject_unknown_results(1);
        let r = store
            .finish_with_error(&lease, id, Outcome::DeadLetter, "gone")
            .await;
        assert_eq!(r.unwrap(), Some(ItemState::DeadLettered));
        let record = store.item(id).await.unwrap().unwrap();
        assert_eq!(record.state, ItemState::DeadLettered);
        assert_eq!(record.last_error.as_deref(), Some("gone"));
        let listed = store
            .items(
                liveness_core::ItemStateKind::DeadLettered,
                liveness_core::Page::first(10),
            )
            .await
            .unwrap();
        assert_eq!(listed, [record]);
    }

    /// A cancelled item of a named queue leaves its queue's index and counts.
    #[tokio::test]
    async fn a_cancel_takes_an_item_out_of_its_own_queue() {
        let db = DoubleDatabase::new();
        let store = db.store(&fresh_namespace());
        let mail = liveness_core::QueueName::new("mail").unwrap();
        let on_mail = EnqueueOptions::default().queue(mail);
        let a = store.enqueue(b"a", on_mail).await.unwrap();
        let b = store.enqueue(b"b", on_mail).await.unwrap();
        assert_eq!(store.cancel(a).await.unwrap(), Some(ItemState::Pending));
        let mut tx = store.db.begin().await.unwrap();
        assert_eq!(
            tx.get(&store.layout.pending(mail, a.0), true)
                .await
                .unwrap(),
            None
        );
        assert!(tx
            .get(&store.layout.pending(mail, b.0), true)
            .await
            .unwrap()
            .is_some());
        let counts = store.queue_counts().await.unwrap();
        assert_eq!(counts.len(), 1);
        assert_eq!((counts[0].queue, counts[0].counts.pending), (mail, 1));
        assert_eq!(store.cancel(b).await.unwrap(), Some(ItemState::Pending));
        assert_eq!(store.queue_counts().await.unwrap(), []);
    }
}
