//! `impl ItemStore for EtcdStore`: each method runs its own transaction (enqueue,
//! claim, finish, the item read), or the inherent step it names (`batch.rs` for
//! `sweep_many`, `deaths.rs` for the dead set), on input that
//! `liveness_core::CheckInput` already checked.

use std::time::Duration;

use etcd_client::{GetResponse, KeyValue, PutOptions, Txn, TxnOp};
use liveness_core::{
    async_trait, BatchResult, DeadToken, EnqueueOptions, Error, FencingToken, Item, ItemId,
    ItemRecord, ItemState, ItemStore, Lease, Outcome, QueueName, RequestId, Result, Sweep,
};

use crate::batch::SWEEP_CHUNK;
use crate::core::{
    counter_at, del, exists, first, get, mod_rev, number, put, ranges, under, version, EtcdStore,
    MAX_PAYLOAD, MAX_TXN_OPS,
};
use crate::deaths::hand_back;
use crate::delays::{due_waiting, held_op, timer_op, Timer};
use crate::error::{at_key, corrupt, is_not_found, map, Conflicts, Fault, MAX_TRIES};
use crate::keys::{parse_request_id, Keys, Meta};
use crate::BACKEND;

#[async_trait]
impl ItemStore for EtcdStore {
    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        let k = self.keys();
        let counter = k.counter();
        let key = options.key.map(|key| k.enqueue_key(&key.to_hex()));
        // Granted once, when the item is about to be written, and kept across the
        // retries: its countdown starts after the call arrived.
        let mut timer = None;
        // A key lease that etcd turned out not to know was replaced (once).
        let mut regranted = false;
        for _ in 0..MAX_TRIES {
            if let Some(key) = &key {
                if let Some(kv) = self.get_one(key).await? {
                    // Nothing of this call was written: its timer binds nothing.
                    self.disarm(timer);
                    return number(&kv).map(ItemId);
                }
            }
            let (guard, last) = counter_at(&counter, self.get_one(&counter).await?.as_ref())?;
            let id = last + 1;
            if timer.is_none() && !options.delay.is_zero() {
                timer = Some(self.arm(options.delay).await?);
            }
            let mut guards = vec![guard];
            let mut ops = vec![put(&counter, id.to_string())];
            ops.extend(item_ops(k, id, id, payload, options, timer.as_ref()));
            if let Some(t) = &timer {
                ops.push(timer_op(k, t, id));
            }
            let mut key_lease = None;
            if let Some(key) = &key {
                // Still unused: a concurrent enqueue with this key makes us retry and
                // answer its id. Bound to this bucket's key lease: etcd deletes it
                // once the retention has passed (`key_leases.rs`).
                let lease = *key_lease.insert(self.key_lease().await?);
                guards.push(version(key, 0));
                ops.push(TxnOp::put(
                    key.as_str(),
                    id.to_string(),
                    Some(PutOptions::new().with_lease(lease)),
                ));
            }
            let resp = match self
                .txn_unmapped(Txn::new().when(guards).and_then(ops))
                .await
            {
                Ok(resp) => resp,
                // The key lease ended early (revoked, or a restored cluster): nothing
                // was written; a new lease, and the transaction again, once.
                Err(e) if is_not_found(&e) && !regranted => {
                    if let Some(lease) = key_lease {
                        regranted = true;
                        self.key_lease_gone(lease).await;
                        continue;
                    }
                    return Err(map(e));
                }
                Err(e) => return Err(map(e)),
            };
            if resp.succeeded() {
                return Ok(ItemId(id));
            }
        }
        self.disarm(timer);
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    /// All the items in ONE transaction (all or none), sharing one timer when they
    /// are held back, when their payloads add up to at most [`MAX_PAYLOAD`] (etcd
    /// refuses requests over 1.5 MiB); a larger batch goes one item after the other,
    /// as the trait's default does (the items before a failing one stay added).
    async fn enqueue_many(
        &self,
        payloads: &[Vec<u8>],
        options: EnqueueOptions,
    ) -> Result<Vec<ItemId>> {
        let bytes: usize = payloads.iter().map(Vec::len).sum();
        if bytes > MAX_PAYLOAD || options.key.is_some() || payloads.is_empty() {
            let mut ids = Vec::with_capacity(payloads.len());
            for payload in payloads {
                ids.push(self.enqueue(payload, options).await?);
            }
            return Ok(ids);
        }
        let k = self.keys();
        let counter = k.counter();
        let mut timer = None;
        for _ in 0..MAX_TRIES {
            let (guard, last) = counter_at(&counter, self.get_one(&counter).await?.as_ref())?;
            let first = last + 1;
            let n = u64::try_from(payloads.len()).unwrap_or(u64::MAX);
            if timer.is_none() && !options.delay.is_zero() {
                timer = Some(self.arm(options.delay).await?);
            }
            // The counter, 3 writes per item and the timer: 98 for a full batch,
            // under etcd's 128.
            let mut ops = vec![put(&counter, (last + n).to_string())];
            for (id, payload) in (first..).zip(payloads) {
                ops.extend(item_ops(k, first, id, payload, options, timer.as_ref()));
            }
            if let Some(t) = &timer {
                ops.push(timer_op(k, t, first));
            }
            let resp = self.txn(Txn::new().when(vec![guard]).and_then(ops)).await?;
            if resp.succeeded() {
                return Ok((first..first + n).map(ItemId).collect());
            }
        }
        self.disarm(timer);
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    async fn claim_request(&self, lease: &Lease, n: usize, req: RequestId) -> Result<Vec<Item>> {
        self.claim_from(lease, &[QueueName::DEFAULT], n, req).await
    }

    /// One transaction reads the first `n` entries of the pending index of each
    /// queue in `queues` (and what a repeat and the mark need); the items are taken
    /// from them in the order of `queues`, and one transaction guarded on each taken
    /// entry assigns them.
    async fn claim_from(
        &self,
        lease: &Lease,
        queues: &[QueueName],
        n: usize,
        req: RequestId,
    ) -> Result<Vec<Item>> {
        let request_hex = req.to_hex();
        let k = self.keys();
        let mark_key = k.claim_mark(lease.token);
        let mut conflicts = Conflicts::new(self.inner.timeout);
        let _turn = self.inner.claims.lock().await;
        // Due held-back items are moved to pending at most once per call.
        let mut promoted = false;
        loop {
            // Live by its lease-bound key, or, riding a session, by the session's.
            let (is_live, why_not) = self.live_guard(lease);
            // The first `n` of each queue's pending index (at most `MAX_CLAIM_QUEUES`
            // ranges), then the token's owned items, its mark and the first held-back
            // key (is anything due to be moved?).
            let mut reads: Vec<TxnOp> = queues
                .iter()
                .map(|q| TxnOp::get(k.pendings(*q), Some(under(n))))
                .collect();
            reads.extend([
                TxnOp::get(k.owned_by(lease.token), Some(under(usize::MAX))),
                get(&mark_key),
                TxnOp::get(k.helds(), Some(under(1).with_keys_only())),
            ]);
            let resp = self
                .txn(
                    Txn::new()
                        .when(is_live.clone())
                        .and_then(reads)
                        .or_else(why_not.clone()),
                )
                .await?;
            if !resp.succeeded() {
                match self.lost_from(lease, &resp)? {
                    Some(e) => return Err(e),
                    // A riding member this handle did not know: ask again.
                    None if conflicts.again().await => continue,
                    None => break,
                }
            }
            let mut reads = ranges(&resp).into_iter().map(|mut g| g.take_kvs());
            // Strict priority: the earlier queues' entries first, `n` in all.
            let mut pending: Vec<(QueueName, KeyValue)> = Vec::with_capacity(n);
            for queue in queues {
                let entries = reads.next().unwrap_or_default();
                let room = n.saturating_sub(pending.len());
                pending.extend(entries.into_iter().take(room).map(|kv| (*queue, kv)));
            }
            let owned = reads.next().unwrap_or_default();
            let mark = reads.next().unwrap_or_default().into_iter().next();
            let held = reads.next().unwrap_or_default();
            // A repeat of this request answers what it assigned, and assigns nothing.
            let mut earlier = Vec::new();
            for kv in &owned {
                if Meta::request_of(kv.value()) == Some(request_hex.as_str()) {
                    let id =
                        Keys::trailing_id(kv.key()).ok_or_else(|| corrupt(at_key(kv.key())))?;
                    let meta = Meta::decode(kv.value()).ok_or_else(|| corrupt(at_key(kv.key())))?;
                    earlier.push((id, meta));
                }
            }
            if !earlier.is_empty() {
                let bodies: Vec<TxnOp> = earlier.iter().map(|(id, _)| get(&k.body(*id))).collect();
                let resp = self.txn(Txn::new().and_then(bodies)).await?;
                return claimed_items(k, earlier, ranges(&resp));
            }
            // Else admitted only above the token's high-water mark, which the write
            // below raises (also when nothing is pending): a late or repeated copy,
            // or an older id after a newer one, assigns nothing.
            let mark_guard = match &mark {
                Some(kv) => {
                    let last =
                        parse_request_id(kv.value()).ok_or_else(|| corrupt(at_key(kv.key())))?;
                    if req <= last {
                        return Ok(Vec::new());
                    }
                    mod_rev(&mark_key, kv.mod_revision())
                }
                None => version(&mark_key, 0),
            };
            if !promoted && due_waiting(k, held.first())? {
                // Admitted, and held-back items are due: moved to pending first (a
                // bounded number), then read again.
                promoted = true;
                self.promote_due().await?;
                continue;
            }
            let mut compares = is_live;
            compares.push(mark_guard);
            let mut ops = Vec::with_capacity(pending.len() * 4 + 1);
            ops.push(put(&mark_key, request_hex.clone()));
            let mut claimed = Vec::with_capacity(pending.len());
            for (queue, kv) in &pending {
                let id = Keys::trailing_id(kv.key()).ok_or_else(|| corrupt(at_key(kv.key())))?;
                let meta = Meta::decode(kv.value())
                    .filter(|m| m.queue == *queue)
                    .ok_or_else(|| corrupt(at_key(kv.key())))?;
                let meta = Meta {
                    attempts: meta.attempts.saturating_add(1),
                    ..meta
                };
                let entry = k.pending(*queue, id);
                compares.push(mod_rev(&entry, kv.mod_revision()));
                ops.push(del(&entry));
                ops.push(put(
                    &k.owned(lease.token, id),
                    meta.encode_claimed(lease.token, &request_hex),
                ));
                ops.push(put(
                    &k.meta(id),
                    meta.encode_with(ItemState::Owned(lease.token)),
                ));
                claimed.push((id, meta));
            }
            // The bodies are read in the same transaction as far as etcd's limit on
            // operations allows (a full batch leaves one over), the rest right after:
            // bodies never change while the item is owned.
            let mut gets: Vec<TxnOp> = claimed.iter().map(|(id, _)| get(&k.body(*id))).collect();
            let later = gets.split_off(gets.len().min(MAX_TXN_OPS.saturating_sub(ops.len())));
            ops.extend(gets);
            let resp = self
                .txn(Txn::new().when(compares).and_then(ops).or_else(why_not))
                .await?;
            if !resp.succeeded() {
                match self.lost_from(lease, &resp)? {
                    Some(e @ Error::Lost { .. }) => return Err(e),
                    // Another claim took one of these items first: try again.
                    _ if conflicts.again().await => continue,
                    _ => break,
                }
            }
            let mut bodies = ranges(&resp);
            if !later.is_empty() {
                bodies.extend(ranges(&self.txn(Txn::new().and_then(later)).await?));
            }
            return claimed_items(k, claimed, bodies);
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    async fn finish(
        &self,
        lease: &Lease,
        id: ItemId,
        outcome: Outcome,
    ) -> Result<Option<ItemState>> {
        self.finish_with_error(lease, id, outcome, "").await
    }

    /// [`ItemStore::finish`]; a failure's non-empty `error` is put at `item/e/<id>` by
    /// the transaction that hands the item back, and a completed item's text is
    /// deleted with it.
    async fn finish_with_error(
        &self,
        lease: &Lease,
        id: ItemId,
        outcome: Outcome,
        error: &str,
    ) -> Result<Option<ItemState>> {
        let k = self.keys();
        let owned = k.owned(lease.token, id.0);
        let fenced = || lease.fenced(id);
        let after = outcome.delay();
        let Some(retry) = outcome.retry() else {
            // Removed in one transaction guarded on the owned key.
            let resp = self
                .txn(Txn::new().when(vec![exists(&owned)]).and_then(vec![
                    del(&owned),
                    del(&k.meta(id.0)),
                    del(&k.body(id.0)),
                    del(&k.error(id.0)),
                ]))
                .await?;
            return if resp.succeeded() {
                Ok(None)
            } else {
                Err(fenced())
            };
        };
        // Handed back: where it goes depends on its attempts, read with the owned
        // key and guarded on that key's revision. Back to pending with a wait, it is
        // held back by a timer of its own (granted once, kept across the retries).
        let mut timer = None;
        for _ in 0..MAX_TRIES {
            let Some(kv) = self.get_one(&owned).await? else {
                self.disarm(timer);
                return Err(fenced());
            };
            let meta = Meta::decode(kv.value()).ok_or_else(|| corrupt(at_key(kv.key())))?;
            let (state, back) = hand_back(k, &owned, id.0, &meta, retry);
            let waits = state == ItemState::Pending && !after.is_zero();
            let mut ops = if waits {
                let t = match timer {
                    Some(t) => t,
                    None => *timer.insert(self.arm(after).await?),
                };
                vec![
                    del(&owned),
                    held_op(k, &t, id.0, id.0, meta),
                    timer_op(k, &t, id.0),
                    put(&k.meta(id.0), meta.encode_with(ItemState::Pending)),
                ]
            } else {
                Vec::from(back)
            };
            // An empty text leaves the one kept before.
            if !error.is_empty() {
                ops.push(put(&k.error(id.0), error));
            }
            let resp = self
                .txn(
                    Txn::new()
                        .when(vec![mod_rev(&owned, kv.mod_revision())])
                        .and_then(ops),
                )
                .await?;
            if resp.succeeded() {
                if !waits {
                    self.disarm(timer);
                }
                return Ok(Some(state));
            }
        }
        self.disarm(timer);
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    async fn sweep_many(&self, tokens: &[FencingToken]) -> BatchResult<Sweep> {
        let mut out = Vec::with_capacity(tokens.len());
        for chunk in tokens.chunks(SWEEP_CHUNK) {
            out.extend(self.sweep_batch(chunk).await?);
        }
        Ok(out)
    }

    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        self.dead_set(limit).await
    }

    async fn next_due(&self) -> Result<Option<Duration>> {
        self.next_due_in().await
    }

    /// Ticks when any handle on the same cluster and namespace, in any process, made
    /// items pending or ended a timer of held-back items: see `signal.rs`. `None`
    /// outside a Tokio runtime.
    fn pending(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.inner.pending.receiver(&self.inner.watch, self.keys())
    }

    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>> {
        let k = self.keys();
        let resp = self
            .txn(Txn::new().and_then(vec![
                get(&k.meta(id.0)),
                get(&k.body(id.0)),
                get(&k.error(id.0)),
            ]))
            .await?;
        let r = ranges(&resp);
        let Some(meta_kv) = first(r.first()) else {
            return Ok(None);
        };
        let (meta, state) = match Meta::decode_with(meta_kv.value()) {
            Some((m, Some(s))) => (m, s),
            _ => return Err(corrupt(at_key(meta_kv.key()))),
        };
        let payload = first(r.get(1))
            .map(|kv| kv.value().to_vec())
            .ok_or_else(|| corrupt(at_key(k.body(id.0).as_bytes())))?;
        let last_error = error_text(first(r.get(2)).as_ref())?;
        Ok(Some(
            ItemRecord::new(
                Item::new(id, payload, meta.attempts, meta.max_attempts).with_queue(meta.queue),
                state,
            )
            .with_last_error(last_error),
        ))
    }
}

/// The error text kept at `item/e/<id>`, as read in `kv` (`None` when the key is
/// absent: no failure gave a text).
pub(crate) fn error_text(kv: Option<&KeyValue>) -> Result<Option<String>> {
    kv.map(|kv| String::from_utf8(kv.value().to_vec()).map_err(|_| corrupt(at_key(kv.key()))))
        .transpose()
}

/// The writes that add item `id` with `payload`: its record and body, and its entry in
/// its queue's pending index, or, held back by `timer`, beside the timer of the group
/// whose first id is `group` (the caller puts the timer, once per group).
fn item_ops(
    k: &Keys,
    group: u64,
    id: u64,
    payload: &[u8],
    options: EnqueueOptions,
    timer: Option<&Timer>,
) -> [TxnOp; 3] {
    let meta = Meta {
        attempts: 0,
        max_attempts: options.max_attempts,
        queue: options.queue,
    };
    let index = match timer {
        Some(t) => held_op(k, t, group, id, meta),
        None => put(&k.pending(meta.queue, id), meta.encode()),
    };
    [
        put(&k.meta(id), meta.encode_with(ItemState::Pending)),
        put(&k.body(id), payload.to_vec()),
        index,
    ]
}

/// The items a claim answers: each `(id, meta)` with its body, read by the `get` ops
/// whose responses are `bodies`, in the same order.
fn claimed_items(
    k: &Keys,
    claimed: Vec<(u64, Meta)>,
    bodies: Vec<GetResponse>,
) -> Result<Vec<Item>> {
    claimed
        .into_iter()
        .zip(bodies.iter())
        .map(|((id, meta), body)| {
            let payload = body
                .kvs()
                .first()
                .map(|kv| kv.value().to_vec())
                .ok_or_else(|| corrupt(at_key(k.body(id).as_bytes())))?;
            Ok(
                Item::new(ItemId(id), payload, meta.attempts, meta.max_attempts)
                    .with_queue(meta.queue),
            )
        })
        .collect()
}
