//! `impl OperatorStore for SqliteStore`: the operator's views (the store clock, the
//! leases of a space, the death history, the items by state) and the retry of dead
//! letters, each one statement here or, for the death records, in `deaths.rs`. Their
//! input was checked before the call ([`liveness_core::CheckInput`]); they refuse only
//! what the core cannot judge (an item id that names no item).

use std::time::Duration;

use liveness_core::wake::tick;
use liveness_core::{
    async_trait, DeathRecord, Error, InputProblem, ItemCounts, ItemId, ItemRecord, ItemState,
    ItemStateKind, Key, LeaseInfo, Name, OperatorStore, Page, QueueCounts, Result, Space,
    StoreTime,
};
use sqlx::Row;

use crate::core::{
    as_db, get_text, get_u64, limit_param, live_until, queue_of, state_code, SqliteStore,
    STATE_DEAD, STATE_OWNED, STATE_PENDING,
};
use crate::error::{corrupt, map};
use crate::items::ITEM;
use crate::lease::lease_info;

/// Up to ?4 leases of space ?2 (?1 ns) whose name is greater than ?3, in name (byte)
/// order, on the primary key: O(page). The name, then the columns `INSPECT`
/// (lease.rs) reads.
const LEASES: &str = concat!(
    "SELECT l.name, l.holder, l.token, l.ttl_ms, ",
    live_until!(),
    ", l.session_name FROM liveness_leases l \
    WHERE l.ns = ?1 AND l.space = ?2 AND l.name > ?3 ORDER BY l.name LIMIT ?4"
);

/// How many items are in each state (?1 ns).
const ITEM_COUNTS: &str = "SELECT state, COUNT(*) FROM liveness_items WHERE ns = ?1 GROUP BY state";

/// How many items are in each state of each queue (?1 ns), in queue name (byte)
/// order: one statement, one snapshot.
const QUEUE_COUNTS: &str = "SELECT queue, state, COUNT(*) FROM liveness_items WHERE ns = ?1 \
    GROUP BY queue, state ORDER BY queue";

/// Up to ?4 items in state ?2 with id above ?3 (?1 ns), lowest id first, with their
/// queues, last errors and times.
const ITEMS: &str = "SELECT id, payload, attempts, max_attempts, state, owner, queue, \
    last_error, enqueued_at, attempted_at, finished_at \
    FROM liveness_items WHERE ns = ?1 AND state = ?2 AND id > ?3 ORDER BY id LIMIT ?4";

/// Moves dead-lettered item ?2 back to pending with no attempts (?1 ns), claimable at
/// once, from store-clock ms ?3 (now); no longer a dead letter, it has no `dead_at`.
const RETRY_DEAD_LETTER: &str =
    "UPDATE liveness_items SET state = 0, attempts = 0, ready_at = ?3, dead_at = NULL \
    WHERE ns = ?1 AND id = ?2 AND state = 2";

/// Removes item ?2 unless a token owns it (?1 ns): answers the state it had. The
/// removal of expired dead letters (`FORGET_DEAD_LETTERS`, items.rs) deletes their
/// rows the same way.
const CANCEL: &str =
    "DELETE FROM liveness_items WHERE ns = ?1 AND id = ?2 AND state <> 1 RETURNING state";

/// Moves up to ?2 dead-lettered items, lowest id first, back to pending with no
/// attempts (?1 ns), claimable at once, from store-clock ms ?3 (now), without `dead_at`.
const RETRY_DEAD_LETTERS: &str =
    "UPDATE liveness_items SET state = 0, attempts = 0, ready_at = ?3, dead_at = NULL \
    WHERE ns = ?1 AND id IN (SELECT id FROM liveness_items \
    WHERE ns = ?1 AND state = 2 ORDER BY id LIMIT ?2) RETURNING id";

#[async_trait]
impl OperatorStore for SqliteStore {
    async fn store_time(&self) -> Result<StoreTime> {
        if self.pool.is_closed() {
            return Err(map(sqlx::Error::PoolClosed));
        }
        let now = u64::try_from(self.now()?).unwrap_or(0);
        Ok(StoreTime::from_epoch(Duration::from_millis(now)))
    }

    async fn leases(&self, space: &Space, page: Page<&Key>) -> Result<Vec<LeaseInfo>> {
        let Page { after, limit } = page;
        let now = self.now()?;
        let q = self
            .query(LEASES)
            .bind(space.as_ref())
            .bind(after.map_or("", |k| k.name().as_ref()))
            .bind(limit_param(limit));
        self.list(q, |row| {
            let name = Name::new(get_text(row, 0)?)
                .map_err(|_| corrupt("bad name in the liveness database"))?;
            lease_info(row, 1, Key::new(space.clone(), name), now)
        })
        .await
    }

    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>> {
        self.death_records(before, limit).await
    }

    async fn item_counts(&self) -> Result<ItemCounts> {
        let rows = self
            .query(ITEM_COUNTS)
            .fetch_all(&self.pool)
            .await
            .map_err(map)?;
        let mut counts = ItemCounts::default();
        for row in &rows {
            let state: i64 = row.try_get(0).map_err(map)?;
            count_into(&mut counts, state, get_u64(row, 1, "count")?)?;
        }
        Ok(counts)
    }

    async fn queue_counts(&self) -> Result<Vec<QueueCounts>> {
        let rows = self
            .query(QUEUE_COUNTS)
            .fetch_all(&self.pool)
            .await
            .map_err(map)?;
        // One row per (queue, state) held, in queue order: a queue's rows are
        // adjacent.
        let mut out: Vec<QueueCounts> = Vec::new();
        for row in &rows {
            let queue = queue_of(&get_text(row, 0)?)?;
            let state: i64 = row.try_get(1).map_err(map)?;
            let n = get_u64(row, 2, "count")?;
            if out.last().is_none_or(|last| last.queue != queue) {
                out.push(QueueCounts::new(queue, ItemCounts::default()));
            }
            if let Some(last) = out.last_mut() {
                count_into(&mut last.counts, state, n)?;
            }
        }
        Ok(out)
    }

    async fn items(&self, state: ItemStateKind, page: Page<ItemId>) -> Result<Vec<ItemRecord>> {
        let Page { after, limit } = page;
        let q = self
            .query(ITEMS)
            .bind(state_code(state))
            .bind(after.map_or(0, |id| as_db(id.0)))
            .bind(limit_param(limit));
        self.list(q, Self::record_from_row).await
    }

    async fn retry_dead_letter(&self, id: ItemId) -> Result<()> {
        let mut w = self.write().await?;
        let done = self
            .query(RETRY_DEAD_LETTER)
            .bind(as_db(id.0))
            .bind(self.now()?)
            .execute(w.conn())
            .await
            .map_err(map)?;
        if done.rows_affected() == 1 {
            w.commit().await?;
            tick(&self.pending);
            return Ok(());
        }
        let found = self.item_row(w.conn(), id).await?;
        w.rollback().await?;
        Err(Error::invalid(
            "item",
            if found.is_some() {
                InputProblem::NotDeadLettered
            } else {
                InputProblem::NoSuchItem
            },
        ))
    }

    async fn cancel(&self, id: ItemId) -> Result<Option<ItemState>> {
        let mut w = self.write().await?;
        let removed: Option<i64> = self
            .query(CANCEL)
            .bind(as_db(id.0))
            .fetch_optional(w.conn())
            .await
            .and_then(|row| row.map(|r| r.try_get(0)).transpose())
            .map_err(map)?;
        if let Some(state) = removed {
            w.commit().await?;
            return Ok(Some(match state {
                STATE_PENDING => ItemState::Pending,
                _ => ItemState::DeadLettered,
            }));
        }
        // Owned (left to its owner), or no such item.
        let found = self.item_row(w.conn(), id).await?;
        w.rollback().await?;
        found
            .map(|row| Self::item_from_row(&row).map(|(_, state)| state))
            .transpose()
    }

    async fn retry_dead_letters(&self, limit: usize) -> Result<Vec<ItemId>> {
        let mut w = self.write().await?;
        let rows = self
            .query(RETRY_DEAD_LETTERS)
            .bind(limit_param(limit))
            .bind(self.now()?)
            .fetch_all(w.conn())
            .await
            .map_err(map)?;
        w.commit().await?;
        if !rows.is_empty() {
            tick(&self.pending);
        }
        let mut ids = rows
            .iter()
            .map(|row| get_u64(row, 0, "item id").map(ItemId))
            .collect::<Result<Vec<_>>>()?;
        ids.sort();
        Ok(ids)
    }
}

/// Adds `n` items of stored state `state` to `counts`.
fn count_into(counts: &mut ItemCounts, state: i64, n: u64) -> Result<()> {
    match state {
        STATE_PENDING => counts.pending += n,
        STATE_OWNED => counts.owned += n,
        STATE_DEAD => counts.dead_lettered += n,
        _ => return Err(corrupt("bad item state in the liveness database")),
    }
    Ok(())
}

impl SqliteStore {
    /// Item `id`'s row, read inside the caller's transaction.
    async fn item_row(
        &self,
        conn: &mut sqlx::SqliteConnection,
        id: ItemId,
    ) -> Result<Option<sqlx::sqlite::SqliteRow>> {
        self.query(ITEM)
            .bind(as_db(id.0))
            .fetch_optional(conn)
            .await
            .map_err(map)
    }
}
