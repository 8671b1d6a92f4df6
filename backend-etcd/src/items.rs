//! `impl ItemStore for EtcdStore`: each method runs its own transaction (enqueue,
//! claim, complete, fail, the item reads), or the inherent step it names (`deaths.rs`
//! for the sweep, `batch.rs` for `requeue_orphans_many`), on input that
//! `liveness_core::CheckInput` already checked (an item id that names no item is
//! refused here). Here too: the item listings by state and the dead-letter retries.

use etcd_client::{GetOptions, GetResponse, Txn, TxnOp};
use liveness_core::{
    async_trait, BatchResult, EnqueueOptions, Error, FencingToken, InputProblem, Item, ItemCounts,
    ItemId, ItemRecord, ItemState, ItemStateKind, ItemStore, Lease, Page, RequestId, Requeued,
    Result,
};

use crate::batch::REQUEUE_CHUNK;
use crate::core::{
    counter_at, del, exists, first, get, mod_rev, number, put, ranges, to_prefix_end, under,
    version, EtcdStore, MAX_TXN_OPS,
};
use crate::deaths::hand_back;
use crate::error::{at_key, corrupt, Conflicts, Fault, MAX_TRIES};
use crate::keys::{parse_request_id, Keys, Meta};
use crate::BACKEND;

#[async_trait]
impl ItemStore for EtcdStore {
    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        let k = self.keys();
        let counter = k.counter();
        let meta = Meta {
            attempts: 0,
            max_attempts: options.max_attempts,
        };
        let key = options.key.map(|key| k.enqueue_key(&key.to_hex()));
        for _ in 0..MAX_TRIES {
            if let Some(key) = &key {
                if let Some(kv) = self.get_one(key).await? {
                    return number(&kv).map(ItemId);
                }
            }
            let (guard, last) = counter_at(&counter, self.get_one(&counter).await?.as_ref())?;
            let id = last + 1;
            let mut guards = vec![guard];
            let mut ops = vec![
                put(&counter, id.to_string()),
                put(&k.meta(id), meta.encode_with(ItemState::Pending)),
                put(&k.body(id), payload.to_vec()),
                put(&k.pending(id), meta.encode()),
            ];
            if let Some(key) = &key {
                // Still unused: a concurrent enqueue with this key makes us retry and
                // answer its id.
                guards.push(version(key, 0));
                ops.push(put(key, id.to_string()));
            }
            let resp = self.txn(Txn::new().when(guards).and_then(ops)).await?;
            if resp.succeeded() {
                return Ok(ItemId(id));
            }
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    async fn claim_request(&self, lease: &Lease, n: usize, req: RequestId) -> Result<Vec<Item>> {
        let request_hex = req.to_hex();
        let k = self.keys();
        let mark_key = k.claim_mark(lease.token);
        let mut conflicts = Conflicts::new(self.inner.timeout);
        let _turn = self.inner.claims.lock().await;
        loop {
            // Live by its lease-bound key, or, riding a session, by the session's.
            let (is_live, why_not) = self.live_guard(lease);
            let opts = under(n);
            let resp = self
                .txn(
                    Txn::new()
                        .when(is_live.clone())
                        .and_then(vec![
                            TxnOp::get(k.pendings(), Some(opts)),
                            TxnOp::get(k.owned_by(lease.token), Some(under(usize::MAX))),
                            get(&mark_key),
                        ])
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
            let pending = reads.next().unwrap_or_default();
            let owned = reads.next().unwrap_or_default();
            let mark = reads.next().unwrap_or_default().into_iter().next();
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
            let mut compares = is_live;
            compares.push(mark_guard);
            let mut ops = Vec::with_capacity(pending.len() * 4 + 1);
            ops.push(put(&mark_key, request_hex.clone()));
            let mut claimed = Vec::with_capacity(pending.len());
            for kv in &pending {
                let id = Keys::trailing_id(kv.key()).ok_or_else(|| corrupt(at_key(kv.key())))?;
                let meta = Meta::decode(kv.value()).ok_or_else(|| corrupt(at_key(kv.key())))?;
                let meta = Meta {
                    attempts: meta.attempts.saturating_add(1),
                    ..meta
                };
                compares.push(mod_rev(&k.pending(id), kv.mod_revision()));
                ops.push(del(&k.pending(id)));
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

    async fn complete(&self, lease: &Lease, id: ItemId) -> Result<()> {
        let k = self.keys();
        let owned = k.owned(lease.token, id.0);
        let resp = self
            .txn(Txn::new().when(vec![exists(&owned)]).and_then(vec![
                del(&owned),
                del(&k.meta(id.0)),
                del(&k.body(id.0)),
            ]))
            .await?;
        if resp.succeeded() {
            Ok(())
        } else {
            Err(lease.fenced(id))
        }
    }

    async fn fail(&self, lease: &Lease, id: ItemId, retry: bool) -> Result<ItemState> {
        let k = self.keys();
        let owned = k.owned(lease.token, id.0);
        let fenced = || lease.fenced(id);
        for _ in 0..MAX_TRIES {
            let Some(kv) = self.get_one(&owned).await? else {
                return Err(fenced());
            };
            let meta = Meta::decode(kv.value()).ok_or_else(|| corrupt(at_key(kv.key())))?;
            let (state, ops) = hand_back(k, &owned, id.0, &meta, retry);
            let resp = self
                .txn(
                    Txn::new()
                        .when(vec![mod_rev(&owned, kv.mod_revision())])
                        .and_then(Vec::from(ops)),
                )
                .await?;
            if resp.succeeded() {
                return Ok(state);
            }
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    async fn requeue_orphans(&self, token: FencingToken) -> Result<Requeued> {
        self.sweep(token).await
    }

    async fn requeue_orphans_many(&self, tokens: &[FencingToken]) -> BatchResult<Requeued> {
        let mut out = Vec::with_capacity(tokens.len());
        for chunk in tokens.chunks(REQUEUE_CHUNK) {
            out.extend(self.requeue_batch(chunk).await?);
        }
        Ok(out)
    }

    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>> {
        let k = self.keys();
        let resp = self
            .txn(Txn::new().and_then(vec![get(&k.meta(id.0)), get(&k.body(id.0))]))
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
        Ok(Some(ItemRecord {
            item: Item {
                id,
                payload,
                attempts: meta.attempts,
                max_attempts: meta.max_attempts,
            },
            state,
        }))
    }

    async fn item_counts(&self) -> Result<ItemCounts> {
        let k = self.keys();
        let count =
            |p: String| TxnOp::get(p, Some(GetOptions::new().with_prefix().with_count_only()));
        let resp = self
            .txn(Txn::new().and_then(vec![
                count(k.pendings()),
                count(k.owneds()),
                count(k.dead_letters()),
            ]))
            .await?;
        let r = ranges(&resp);
        let n = |i: usize| {
            r.get(i)
                .map(|g| u64::try_from(g.count()).unwrap_or(0))
                .unwrap_or(0)
        };
        Ok(ItemCounts {
            pending: n(0),
            owned: n(1),
            dead_lettered: n(2),
        })
    }

    async fn dead_letters(&self, limit: usize) -> Result<Vec<ItemRecord>> {
        let k = self.keys();
        let ids = self
            .trailing_ids(k.dead_letters(), under(limit).with_keys_only())
            .await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // Dead-lettered items never change again: reading them after the listing is
        // as good as reading them with it.
        let at = |key: String| TxnOp::get(key, None);
        let ops = ids
            .iter()
            .flat_map(|id| [at(k.meta(*id)), at(k.body(*id))])
            .collect::<Vec<_>>();
        let resp = self.txn(Txn::new().and_then(ops)).await?;
        let r = ranges(&resp);
        ids.iter()
            .enumerate()
            .map(|(i, id)| {
                let meta_kv =
                    first(r.get(2 * i)).ok_or_else(|| corrupt(at_key(k.meta(*id).as_bytes())))?;
                let meta =
                    Meta::decode(meta_kv.value()).ok_or_else(|| corrupt(at_key(meta_kv.key())))?;
                let payload = first(r.get(2 * i + 1))
                    .map(|kv| kv.value().to_vec())
                    .ok_or_else(|| corrupt(at_key(k.body(*id).as_bytes())))?;
                Ok(ItemRecord {
                    item: Item {
                        id: ItemId(*id),
                        payload,
                        attempts: meta.attempts,
                        max_attempts: meta.max_attempts,
                    },
                    state: ItemState::DeadLettered,
                })
            })
            .collect()
    }

    async fn items(&self, state: ItemStateKind, page: Page<ItemId>) -> Result<Vec<ItemRecord>> {
        let Page { after, limit } = page;
        self.item_page(state, after, limit).await
    }

    async fn retry_dead_letter(&self, id: ItemId) -> Result<()> {
        for _ in 0..MAX_TRIES {
            if let Some(mut answer) = self.revive(&[id.0]).await? {
                return answer.pop().unwrap_or(Ok(id.0)).map(|_| ());
            }
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }

    async fn retry_dead_letters(&self, limit: usize) -> Result<Vec<ItemId>> {
        self.revive_many(limit).await
    }
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
            Ok(Item {
                id: ItemId(id),
                payload,
                attempts: meta.attempts,
                max_attempts: meta.max_attempts,
            })
        })
        .collect()
}

impl EtcdStore {
    /// `ItemStore::items`: ids from the state's index (pending, dead-lettered) or
    /// from the meta records (owned: there is no index by id), then their metas and
    /// payloads in one transaction; an item whose state changed in between is left
    /// out.
    pub(crate) async fn item_page(
        &self,
        state: ItemStateKind,
        after: Option<ItemId>,
        limit: usize,
    ) -> Result<Vec<ItemRecord>> {
        let k = self.keys();
        let first_id = after.map_or(0, |a| a.0.saturating_add(1));
        let mut ids = Vec::new();
        match state {
            ItemStateKind::Pending | ItemStateKind::DeadLettered => {
                let (prefix, start) = if state == ItemStateKind::Pending {
                    (k.pendings(), k.pending(first_id))
                } else {
                    (k.dead_letters(), k.dead_letter(first_id))
                };
                for kv in self
                    .range(start, to_prefix_end(&prefix, limit).with_keys_only())
                    .await?
                {
                    ids.push(Keys::trailing_id(kv.key()).ok_or_else(|| corrupt(at_key(kv.key())))?);
                }
            }
            ItemStateKind::Owned => {
                // Walk the meta records from `after`, a batch at a time.
                let prefix = k.metas();
                let mut start = k.meta(first_id);
                'walk: loop {
                    let batch = self
                        .range(start.clone(), to_prefix_end(&prefix, 256))
                        .await?;
                    let Some(last) = batch.last() else { break };
                    let next =
                        Keys::trailing_id(last.key()).ok_or_else(|| corrupt(at_key(last.key())))?;
                    for kv in &batch {
                        if let Some((_, Some(ItemState::Owned(_)))) = Meta::decode_with(kv.value())
                        {
                            ids.push(
                                Keys::trailing_id(kv.key())
                                    .ok_or_else(|| corrupt(at_key(kv.key())))?,
                            );
                            if ids.len() == limit {
                                break 'walk;
                            }
                        }
                    }
                    if batch.len() < 256 {
                        break;
                    }
                    start = k.meta(next.saturating_add(1));
                }
            }
        }
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ops = ids
            .iter()
            .flat_map(|id| [get(&k.meta(*id)), get(&k.body(*id))])
            .collect::<Vec<_>>();
        let resp = self.txn(Txn::new().and_then(ops)).await?;
        let r = ranges(&resp);
        let mut out = Vec::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            let Some(meta_kv) = first(r.get(2 * i)) else {
                continue; // completed since the listing
            };
            let (meta, now) = match Meta::decode_with(meta_kv.value()) {
                Some((m, Some(s))) => (m, s),
                _ => return Err(corrupt(at_key(meta_kv.key()))),
            };
            if now.kind() != state {
                continue;
            }
            let payload = first(r.get(2 * i + 1))
                .map(|kv| kv.value().to_vec())
                .ok_or_else(|| corrupt(at_key(k.body(*id).as_bytes())))?;
            out.push(ItemRecord {
                item: Item {
                    id: ItemId(*id),
                    payload,
                    attempts: meta.attempts,
                    max_attempts: meta.max_attempts,
                },
                state: now,
            });
        }
        Ok(out)
    }

    /// Moves the dead-lettered items `ids` back to pending with no attempts, in one
    /// transaction guarded by their metas as read. `Ok(None)` when one changed
    /// meanwhile (the caller reads again); otherwise the ids moved and, for each id
    /// that is not dead-lettered, why (`NoSuchItem` / `NotDeadLettered`).
    pub(crate) async fn revive(&self, ids: &[u64]) -> Result<Option<Vec<Result<u64>>>> {
        let k = self.keys();
        let resp = self
            .txn(Txn::new().and_then(ids.iter().map(|id| get(&k.meta(*id))).collect::<Vec<_>>()))
            .await?;
        let r = ranges(&resp);
        let mut compares = Vec::new();
        let mut ops = Vec::new();
        let mut out = Vec::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            let Some(kv) = first(r.get(i)) else {
                out.push(Err(Error::invalid("item", InputProblem::NoSuchItem)));
                continue;
            };
            let (meta, state) = match Meta::decode_with(kv.value()) {
                Some((m, Some(s))) => (m, s),
                _ => return Err(corrupt(at_key(kv.key()))),
            };
            if state != ItemState::DeadLettered {
                out.push(Err(Error::invalid("item", InputProblem::NotDeadLettered)));
                continue;
            }
            let fresh = Meta {
                attempts: 0,
                ..meta
            };
            compares.push(mod_rev(&k.meta(*id), kv.mod_revision()));
            ops.extend([
                del(&k.dead_letter(*id)),
                put(&k.pending(*id), fresh.encode()),
                put(&k.meta(*id), fresh.encode_with(ItemState::Pending)),
            ]);
            out.push(Ok(*id));
        }
        if ops.is_empty() {
            return Ok(Some(out));
        }
        let resp = self.txn(Txn::new().when(compares).and_then(ops)).await?;
        Ok(resp.succeeded().then_some(out))
    }

    /// `ItemStore::retry_dead_letters`: the lowest dead-lettered ids, moved in one
    /// transaction (retried when one of them changed meanwhile).
    pub(crate) async fn revive_many(&self, limit: usize) -> Result<Vec<ItemId>> {
        let k = self.keys();
        for _ in 0..MAX_TRIES {
            let prefix = k.dead_letters();
            let ids = self
                .trailing_ids(
                    prefix.clone(),
                    to_prefix_end(&prefix, limit).with_keys_only(),
                )
                .await?;
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            if let Some(moved) = self.revive(&ids).await? {
                return Ok(moved.into_iter().flatten().map(ItemId).collect());
            }
        }
        Err(Error::unavailable(BACKEND, Fault::Contention))
    }
}
