//! `impl ItemStore for SqliteStore`: each method runs its statements here, in one
//! transaction, or forwards the dead set and the sweeps of dead tokens' items to
//! `deaths.rs` and `batch.rs` (`sweep` is `sweep_many` with one
//! token, [`liveness_core::Store`]). Their input was checked before the call
//! ([`liveness_core::CheckInput`]): they do not check it again.

use std::time::Duration;

use liveness_core::wake::tick;
use liveness_core::{
    async_trait, BatchResult, DeadToken, EnqueueOptions, FencingToken, Item, ItemId, ItemRecord,
    ItemState, ItemStore, Lease, Outcome, QueueName, RequestId, Result, Sweep, DEAD_LETTER_TRIM,
};
use sqlx::Row;
use tokio::sync::watch;

use crate::core::{as_db, limit_param, to_i64, SqliteStore, STATE_PENDING};
use crate::error::{corrupt, map};

/// The item id enqueue key ?2 answered (?1 ns), unless it expired: recorded before
/// store-clock ms ?3, the store's now less the key retention. A key with no recording
/// time (an older build's) never expires.
const ENQUEUE_KEY: &str = "SELECT id FROM liveness_enqueue_keys WHERE ns = ?1 AND key = ?2 \
    AND (recorded_boot_ms IS NULL OR recorded_boot_ms >= ?3)";

/// Deletes up to ?3 expired enqueue keys (?1 ns), recorded before store-clock ms ?2
/// (the store's now less the key retention), the oldest first, on the index of
/// recording times: a keyed enqueue's share of the forgetting, so that expired keys
/// go as fast as new ones come, and no statement's work grows with the backlog.
const FORGET_KEYS: &str = "DELETE FROM liveness_enqueue_keys WHERE ns = ?1 AND key IN \
    (SELECT key FROM liveness_enqueue_keys \
    WHERE ns = ?1 AND recorded_boot_ms < ?2 ORDER BY recorded_boot_ms LIMIT ?3)";

/// The most expired keys one keyed enqueue deletes: more than the one it records, so
/// a backlog (after a burst, or an upgrade) shrinks, yet a small, bounded write.
const FORGET_KEYS_AT_MOST: usize = 100;

/// Draws the namespace's next item id (?1 ns).
const NEXT_ITEM: &str =
    "INSERT INTO liveness_counters (ns, next_token, next_item) VALUES (?1, 0, 1) \
    ON CONFLICT (ns) DO UPDATE SET next_item = next_item + 1 RETURNING next_item";

/// Draws ?2 item ids at once (?1 ns): answers the last; the batch is the ?2 ids up to
/// it.
const NEXT_ITEMS: &str =
    "INSERT INTO liveness_counters (ns, next_token, next_item) VALUES (?1, 0, ?2) \
    ON CONFLICT (ns) DO UPDATE SET next_item = next_item + ?2 RETURNING next_item";

/// Writes a new pending item (?1 ns, ?2 id, ?3 payload, ?4 max attempts) in queue ?8,
/// held back until store-clock ms ?5 for ?6 ms (both NULL: claimable at once),
/// claimable from store-clock ms ?7 (its due time, else now), enqueued at store-clock
/// ms ?9 (now).
const ENQUEUE: &str = "INSERT INTO liveness_items \
    (ns, id, payload, attempts, max_attempts, state, owner, due_at, delay_ms, ready_at, queue, \
    enqueued_at) \
    VALUES (?1, ?2, ?3, 0, ?4, 0, NULL, ?5, ?6, ?7, ?8, ?9)";

/// Records that enqueue key ?2 answered item ?3 (?1 ns), at store-clock ms ?4; an
/// expired record of the key that is still there is replaced.
const SAVE_ENQUEUE_KEY: &str =
    "INSERT INTO liveness_enqueue_keys (ns, key, id, recorded_boot_ms) VALUES (?1, ?2, ?3, ?4) \
    ON CONFLICT (ns, key) DO UPDATE SET id = excluded.id, \
    recorded_boot_ms = excluded.recorded_boot_ms";

/// The items token ?2 owns that claim request ?3 assigned (?1 ns), whatever their
/// queues: a repeated claim's answer.
const CLAIMED_BY: &str =
    "SELECT id, payload, attempts, max_attempts, state, owner, queue FROM liveness_items \
    WHERE ns = ?1 AND state = 1 AND owner = ?2 AND claim_request = ?3 ORDER BY id";

/// Admits claim request ?5 under token ?4 of the lease on a key (?1 ns, ?2 space, ?3
/// name): raises the token's high-water mark to ?5 when ?5 is greater (one row
/// affected), else changes nothing (a late or repeated copy, or an older id). Runs
/// after the lease was found current and live in the same transaction.
const ADMIT_CLAIM: &str = "UPDATE liveness_leases SET last_claim = ?5 \
    WHERE ns = ?1 AND space = ?2 AND name = ?3 AND token = ?4 \
    AND (last_claim IS NULL OR last_claim < ?5)";

/// Makes up to ?3 held-back items due by store-clock ms ?2 claimable (?1 ns), the
/// earliest first: a claim runs it first, so that it walks claimable items only.
const PROMOTE_DUE: &str = "UPDATE liveness_items SET due_at = NULL, delay_ms = NULL \
    WHERE ns = ?1 AND id IN (SELECT id FROM liveness_items \
    WHERE ns = ?1 AND due_at IS NOT NULL AND due_at <= ?2 ORDER BY due_at LIMIT ?3)";

/// Hands up to ?3 claimable pending items of queue ?6 to token ?2 (?1 ns), oldest
/// first, marked with the claim's request id ?4: the first entries of the queue's
/// range of `liveness_items_ready_queue` (migration 11), so neither held-back items
/// nor other queues' are read. `INDEXED BY` pins that index: left to itself, SQLite
/// walks `liveness_items_state` (`ns, state, id`), every pending item of every
/// queue, filtering. Each is stamped attempted at the store clock's now ?5
/// (`attempted_at`) and answers, last, how long it waited: ?5 less when it became
/// claimable (`ready_at`), in ms, never negative (NULL for an item an older build made
/// pending).
pub(crate) const CLAIM: &str = "UPDATE liveness_items \
    SET state = 1, owner = ?2, attempts = attempts + 1, claim_request = ?4, attempted_at = ?5 \
    WHERE ns = ?1 AND id IN (SELECT id FROM liveness_items \
    INDEXED BY liveness_items_ready_queue \
    WHERE ns = ?1 AND queue = ?6 AND state = 0 AND due_at IS NULL ORDER BY id LIMIT ?3) \
    RETURNING id, payload, attempts, max_attempts, state, owner, queue, \
    max(?5 - ready_at, 0)";

/// The earliest due time of a held-back item (?1 ns), in store-clock ms.
const NEXT_DUE: &str =
    "SELECT min(due_at) FROM liveness_items WHERE ns = ?1 AND due_at IS NOT NULL";

/// Deletes item ?2 if token ?3 owns it (?1 ns).
const COMPLETE: &str =
    "DELETE FROM liveness_items WHERE ns = ?1 AND id = ?2 AND state = 1 AND owner = ?3";

/// Gives item ?2 back if token ?3 owns it (?1 ns): pending when ?4 (retry) and it has
/// attempts left, held back until store-clock ms ?5 for ?6 ms (both NULL: claimable
/// at once), claimable from store-clock ms ?8 (its due time, else now), else
/// dead-lettered, its retention counted from ?9 (`dead_at`); its attempt finished at
/// store-clock ms ?9 (now); its last error becomes ?7 unless ?7 is empty.
const HAND_BACK: &str = "UPDATE liveness_items SET owner = NULL, \
    state = CASE WHEN ?4 AND attempts < max_attempts THEN 0 ELSE 2 END, \
    due_at = CASE WHEN ?4 AND attempts < max_attempts THEN ?5 END, \
    delay_ms = CASE WHEN ?4 AND attempts < max_attempts THEN ?6 END, \
    dead_at = CASE WHEN ?4 AND attempts < max_attempts THEN NULL ELSE ?9 END, \
    ready_at = ?8, finished_at = ?9, \
    last_error = COALESCE(NULLIF(?7, ''), last_error) \
    WHERE ns = ?1 AND id = ?2 AND state = 1 AND owner = ?3 RETURNING state";

/// Deletes up to ?3 expired dead letters (?1 ns), dead-lettered before store-clock ms
/// ?2 (the store's now less the dead-letter retention), the oldest `dead_at` first
/// (ties by id), on the partial index of dead letters by `dead_at` (migration 13),
/// which it reads from its first expired entry and leaves at the first one kept. Each
/// row goes as an operator's discard of it (`CANCEL`, operator.rs) would: the row
/// deleted, nothing else to keep right (the counts are counted from the rows, every
/// index follows the row). A dead letter with no `dead_at` is never expired.
pub(crate) const FORGET_DEAD_LETTERS: &str = "DELETE FROM liveness_items \
    WHERE ns = ?1 AND state = 2 AND id IN (SELECT id FROM liveness_items \
    WHERE ns = ?1 AND state = 2 AND dead_at < ?2 ORDER BY dead_at, id LIMIT ?3)";

/// Item ?2 (?1 ns), with its queue, last error and times.
pub(crate) const ITEM: &str = "SELECT id, payload, attempts, max_attempts, state, owner, queue, \
    last_error, enqueued_at, attempted_at, finished_at \
    FROM liveness_items WHERE ns = ?1 AND id = ?2";

#[async_trait]
impl ItemStore for SqliteStore {
    async fn enqueue(&self, payload: &[u8], options: EnqueueOptions) -> Result<ItemId> {
        let mut w = self.write().await?;
        // A keyed enqueue: the key and the store's now, read holding the write lock.
        let key = match options.key {
            None => None,
            Some(key) => Some((key.to_hex(), self.now()?)),
        };
        if let Some((key, now)) = &key {
            // Kept while recorded at or after this: expired once more than the
            // retention lies between its recording and now, so never early, though
            // the clock's readings are truncated to their ms.
            let kept_from = now.saturating_sub(self.key_retention_ms);
            let earlier: Option<i64> = sqlx::query_scalar(ENQUEUE_KEY)
                .bind(self.ns.as_ref())
                .bind(key)
                .bind(kept_from)
                .fetch_optional(w.conn())
                .await
                .map_err(map)?;
            if let Some(id) = earlier {
                w.rollback().await?;
                return item_id(id);
            }
            self.query(FORGET_KEYS)
                .bind(kept_from)
                .bind(limit_param(FORGET_KEYS_AT_MOST))
                .execute(w.conn())
                .await
                .map_err(map)?;
        }
        let id = self.next(w.conn(), NEXT_ITEM).await?;
        let due = self.due(options.delay)?;
        self.insert_item(w.conn(), id, payload, &options, due)
            .await?;
        if let Some((key, now)) = &key {
            self.query(SAVE_ENQUEUE_KEY)
                .bind(key)
                .bind(id)
                .bind(now)
                .execute(w.conn())
                .await
                .map_err(map)?;
        }
        w.commit().await?;
        tick(&self.pending);
        item_id(id)
    }

    async fn enqueue_many(
        &self,
        payloads: &[Vec<u8>],
        options: EnqueueOptions,
    ) -> Result<Vec<ItemId>> {
        // One write transaction: the ids drawn at once, every item written, one commit
        // (one sync of the file) for the batch.
        let mut w = self.write().await?;
        let n = i64::try_from(payloads.len()).map_err(|_| corrupt("batch too large"))?;
        let last: i64 = sqlx::query_scalar(NEXT_ITEMS)
            .bind(self.ns.as_ref())
            .bind(n)
            .fetch_one(w.conn())
            .await
            .map_err(map)?;
        let first = last - n + 1;
        let due = self.due(options.delay)?;
        for (id, payload) in (first..).zip(payloads) {
            self.insert_item(w.conn(), id, payload, &options, due)
                .await?;
        }
        w.commit().await?;
        tick(&self.pending);
        (first..=last).map(item_id).collect()
    }

    async fn claim_request(&self, lease: &Lease, n: usize, req: RequestId) -> Result<Vec<Item>> {
        self.claim_from(lease, &[QueueName::DEFAULT], n, req).await
    }

    async fn claim_from(
        &self,
        lease: &Lease,
        queues: &[QueueName],
        n: usize,
        req: RequestId,
    ) -> Result<Vec<Item>> {
        let req = req.to_hex();
        let mut w = self.write().await?;
        let now = self.now()?;
        let cur = self.current(w.conn(), &lease.key, now).await?;
        if let Some(e) = Self::lost(lease, &cur) {
            w.rollback().await?;
            return Err(e);
        }
        // A repeat of this request answers what it assigned and assigns nothing new,
        // whatever queues it names.
        let repeat = self
            .query(CLAIMED_BY)
            .bind(as_db(lease.token.0))
            .bind(&req)
            .fetch_all(w.conn())
            .await
            .map_err(map)?;
        if !repeat.is_empty() {
            w.commit().await?;
            // Lowest id first (the statement's order); a repeat answers no wait.
            return repeat
                .iter()
                .map(|row| Self::item_from_row(row).map(|(item, _)| item))
                .collect();
        }
        // Else admitted only above the token's high-water mark, which it raises: a
        // late or repeated copy, or an older id after a newer one, assigns nothing.
        let admitted = self
            .query(ADMIT_CLAIM)
            .bind(lease.key.space().as_ref())
            .bind(lease.key.name().as_ref())
            .bind(as_db(lease.token.0))
            .bind(&req)
            .execute(w.conn())
            .await
            .map_err(map)?
            .rows_affected()
            == 1;
        let mut items = Vec::new();
        if admitted {
            self.query(PROMOTE_DUE)
                .bind(now)
                .bind(limit_param(PROMOTE_AT_MOST))
                .execute(w.conn())
                .await
                .map_err(map)?;
            // The queues in the order given, each a range of its own index: a claim
            // from one queue is one statement, as a claim was before queues.
            for queue in queues {
                let left = n.saturating_sub(items.len());
                if left == 0 {
                    break;
                }
                let rows = self
                    .query(CLAIM)
                    .bind(as_db(lease.token.0))
                    .bind(limit_param(left))
                    .bind(&req)
                    .bind(now)
                    .bind(queue.as_str())
                    .fetch_all(w.conn())
                    .await
                    .map_err(map)?;
                let mut taken = rows
                    .iter()
                    .map(|row| {
                        let (item, _) = Self::item_from_row(row)?;
                        let waited: Option<i64> = row.try_get(7).map_err(map)?;
                        let waited =
                            waited.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)));
                        Ok(item.with_waited(waited))
                    })
                    .collect::<Result<Vec<_>>>()?;
                // Lowest id first within the queue.
                taken.sort_by_key(|i| i.id);
                items.append(&mut taken);
            }
        }
        w.commit().await?;
        Ok(items)
    }

    async fn finish(
        &self,
        lease: &Lease,
        id: ItemId,
        outcome: Outcome,
    ) -> Result<Option<ItemState>> {
        self.finish_with_error(lease, id, outcome, "").await
    }

    async fn finish_with_error(
        &self,
        lease: &Lease,
        id: ItemId,
        outcome: Outcome,
        error: &str,
    ) -> Result<Option<ItemState>> {
        match outcome.retry() {
            // A completed item's row goes, its error text with it.
            None => self.complete_item(lease, id).await.map(|()| None),
            Some(retry) => self
                .hand_back(lease, id, retry, outcome.delay(), error)
                .await
                .map(Some),
        }
    }

    async fn sweep_many(&self, tokens: &[FencingToken]) -> BatchResult<Sweep> {
        self.sweep_batch(tokens).await
    }

    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        self.dead_set(limit).await
    }

    fn pending(&self) -> Option<watch::Receiver<u64>> {
        Some(self.pending.subscribe())
    }

    async fn item(&self, id: ItemId) -> Result<Option<ItemRecord>> {
        let row = self
            .query(ITEM)
            .bind(as_db(id.0))
            .fetch_optional(&self.pool)
            .await
            .map_err(map)?;
        row.map(|row| Self::record_from_row(&row)).transpose()
    }

    async fn next_due(&self) -> Result<Option<Duration>> {
        let first: Option<i64> = self
            .query(NEXT_DUE)
            .fetch_one(&self.pool)
            .await
            .and_then(|row| row.try_get(0))
            .map_err(map)?;
        let now = self.now()?;
        Ok(first.map(|at| Duration::from_millis(u64::try_from(at - now).unwrap_or(0))))
    }
}

/// When an item made pending becomes claimable, in store-clock ms ([`SqliteStore::due`]).
#[derive(Clone, Copy)]
struct Due {
    /// Its due time when held back (`due_at`), else `None`: claimable at once.
    at: Option<i64>,
    /// The wait it was given (`delay_ms`), which a reboot counts again.
    delay: Option<i64>,
    /// When it becomes claimable (`ready_at`): its due time, else now.
    ready: i64,
    /// The store's now, as read for it: when the move happened.
    now: i64,
}

/// The most held-back items one claim makes claimable: a claim's work stays bounded
/// however many came due at once (the rest on the next claims).
const PROMOTE_AT_MOST: usize = 1000;

/// An item id as the database stores it, or a corrupt-record error.
fn item_id(id: i64) -> Result<ItemId> {
    u64::try_from(id)
        .map(ItemId)
        .map_err(|_| corrupt("bad item id in the liveness database"))
}

impl SqliteStore {
    /// Writes new pending item `id` (`ENQUEUE`) with `options`' attempts and queue,
    /// held back as `due` says and enqueued at its now, inside the caller's write
    /// transaction.
    async fn insert_item(
        &self,
        conn: &mut sqlx::SqliteConnection,
        id: i64,
        payload: &[u8],
        options: &EnqueueOptions,
        due: Due,
    ) -> Result<()> {
        self.query(ENQUEUE)
            .bind(id)
            .bind(payload)
            .bind(i64::from(options.max_attempts))
            .bind(due.at)
            .bind(due.delay)
            .bind(due.ready)
            .bind(options.queue.as_str())
            .bind(due.now)
            .execute(conn)
            .await
            .map_err(map)?;
        Ok(())
    }

    /// When an item made pending now and held back `delay` becomes claimable, by
    /// the store's now (read once, inside the write transaction).
    fn due(&self, delay: Duration) -> Result<Due> {
        let now = self.now()?;
        if delay.is_zero() {
            return Ok(Due {
                at: None,
                delay: None,
                ready: now,
                now,
            });
        }
        // At most `MAX_DELAY` (checked before the call): fits in an i64 of ms. Rounded
        // up, and one more ms for the clock's reading, truncated to its ms: never due
        // early, at most 2 ms late.
        let ms = delay.as_nanos().div_ceil(1_000_000);
        let delay = to_i64(u64::try_from(ms).unwrap_or(u64::MAX), "delay")?;
        let at = now.saturating_add(delay + 1);
        Ok(Due {
            at: Some(at),
            delay: Some(delay),
            ready: at,
            now,
        })
    }

    /// [`ItemStore::finish`] with [`Outcome::Completed`]: deletes item `id` if the
    /// lease's token owns it, else `Fenced`. One DELETE in autocommit: atomic on its
    /// own.
    async fn complete_item(&self, lease: &Lease, id: ItemId) -> Result<()> {
        let _turn = self.turn().await?;
        let done = self
            .query(COMPLETE)
            .bind(as_db(id.0))
            .bind(as_db(lease.token.0))
            .execute(&self.pool)
            .await
            .map_err(map)?;
        if done.rows_affected() == 0 {
            return Err(lease.fenced(id));
        }
        Ok(())
    }

    /// Removes up to `at_most` dead letters expired at store time `now` (dead-lettered
    /// more than the dead-letter retention before it), the oldest first
    /// ([`FORGET_DEAD_LETTERS`]), inside the caller's write transaction: the share of
    /// a call that dead-lettered something
    /// ([`Capabilities::dead_letter_retention`](liveness_core::Capabilities::dead_letter_retention)).
    /// Answers how many it removed.
    pub(crate) async fn forget_dead_letters(
        &self,
        conn: &mut sqlx::SqliteConnection,
        now: i64,
        at_most: usize,
    ) -> Result<usize> {
        // Kept while dead-lettered at or after this: expired once more than the
        // retention lies between its `dead_at` and now, so never early, though the
        // clock's readings are truncated to their ms.
        let kept_from = now.saturating_sub(self.dead_letter_retention_ms);
        let removed = self
            .query(FORGET_DEAD_LETTERS)
            .bind(kept_from)
            .bind(limit_param(at_most))
            .execute(conn)
            .await
            .map_err(map)?
            .rows_affected();
        Ok(usize::try_from(removed).unwrap_or(usize::MAX))
    }

    /// [`ItemStore::finish_with_error`] with [`Outcome::Retry`] (`retry`, held back
    /// `after`) or [`Outcome::DeadLetter`]: gives item `id` back if the lease's token
    /// owns it, else `Fenced`; answers its new state. A non-empty `error` becomes its
    /// last error in the same statement; an empty one leaves it as it was.
    async fn hand_back(
        &self,
        lease: &Lease,
        id: ItemId,
        retry: bool,
        after: Duration,
        error: &str,
    ) -> Result<ItemState> {
        let mut w = self.write().await?;
        let due = self.due(after)?;
        let state: Option<i64> = sqlx::query_scalar(HAND_BACK)
            .bind(self.ns.as_ref())
            .bind(as_db(id.0))
            .bind(as_db(lease.token.0))
            .bind(retry)
            .bind(due.at)
            .bind(due.delay)
            .bind(error)
            .bind(due.ready)
            .bind(due.now)
            .fetch_optional(w.conn())
            .await
            .map_err(map)?;
        let Some(state) = state else {
            w.rollback().await?;
            return Err(lease.fenced(id));
        };
        if state != STATE_PENDING {
            // A dead-lettering: its share of the removal of expired dead letters.
            self.forget_dead_letters(w.conn(), due.now, DEAD_LETTER_TRIM)
                .await?;
        }
        w.commit().await?;
        Ok(if state == STATE_PENDING {
            tick(&self.pending);
            ItemState::Pending
        } else {
            ItemState::DeadLettered
        })
    }
}
