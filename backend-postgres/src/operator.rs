//! `impl OperatorStore for PostgresStore`: the operator's views (the server's clock,
//! the leases of a space, the death history, the items by state) and moving dead
//! letters back to pending. Each method runs its own statement (below), or forwards to
//! `deaths.rs` (the death records). Their input was checked before the call
//! ([`liveness_core::CheckInput`]); they refuse only what the core cannot judge (an
//! item id that names no item).

use std::time::Duration;

use liveness_core::{
    async_trait, DeathRecord, Error, InputProblem, ItemCounts, ItemId, ItemRecord, ItemState,
    ItemStateKind, Key, LeaseInfo, OperatorStore, Page, QueueCounts, Result, Space, StoreTime,
};

use crate::core::{
    get, id_of, id_param, item_times, limit_param, listed_lease, queue_of, record_of, session_of,
    state_of, status_of, ttl_of, PostgresStore,
};
use crate::error::corrupt;

/// `leases`: $1 space, $2 after (the last name of the previous page, '' for the
/// first), $3 limit. Names compare by bytes (`COLLATE "C"`, which the primary key's
/// default collation may not be, so the order is the same on every server) and the
/// page is read on the `leases_members` index, by the function `members_page`
/// (migrations 4 and 8), which keeps the planner on that index whatever its
/// statistics: O(page). Columns: name, holder, token, ttl_ms, remaining_us (> 0 iff
/// live; a riding member's: its session's, NULL when that is gone), session name.
pub(crate) const LEASES: &str = r#"
SELECT m_name, m_holder, m_token, m_ttl_ms, m_remaining_us, m_session
FROM members_page($1, $2, $3)
"#;

/// `store_time`: the server clock in microseconds since the Unix epoch.
const STORE_TIME: &str = r#"
SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
"#;

/// `item_counts`: one consistent snapshot.
const ITEM_COUNTS: &str = r#"
SELECT count(*) FILTER (WHERE state = 0),
       count(*) FILTER (WHERE state = 1),
       count(*) FILTER (WHERE state = 2)
FROM items
"#;

/// `queue_counts`: the items of each queue by state, in queue name (byte) order; one
/// statement, one consistent snapshot, a scan of `items` as `ITEM_COUNTS`. Columns:
/// queue, state, count.
const QUEUE_COUNTS: &str = r#"
SELECT queue, state, count(*) FROM items GROUP BY queue, state ORDER BY queue COLLATE "C"
"#;

/// `items` of the owned (1) or dead-lettered (2) ones: $1 state, $2 after (exclusive
/// id), $3 limit. Lowest id first, on the state's partial index, with their last
/// errors, queues and times.
const ITEMS: &str = concat!(
    "SELECT id, payload, attempts, max_attempts, state, owner, last_error, queue, ",
    item_times!(""),
    " FROM items WHERE state = $1 AND id > $2 ORDER BY id LIMIT $3"
);

/// `items` of the pending ones, due or held back alike: $1 after (exclusive id), $2
/// limit. Lowest id first, with their last errors, queues and times: a page of the held-back
/// ones in id order (`items_held_id`, migration 9) merged with a page of each queue's
/// range of `items_ready_queue` (migration 13). The queues holding items due at once
/// are found one index probe each (`queues`: the next name after the last, a loose
/// index scan), so a page costs O(queues × (log items + page)), never a walk of the
/// items before it. The rows are read only for the page's ids.
pub(crate) const PENDING_ITEMS: &str = concat!(
    r#"
WITH RECURSIVE queues AS (
    (SELECT queue FROM items WHERE state = 0 AND due_at IS NULL ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT i.queue FROM items i
            WHERE i.state = 0 AND i.due_at IS NULL AND i.queue > q.queue
            ORDER BY i.queue LIMIT 1)
    FROM queues q
    WHERE q.queue IS NOT NULL
),
page AS (
    SELECT ready.id FROM queues q
    CROSS JOIN LATERAL (
        SELECT id FROM items
        WHERE state = 0 AND due_at IS NULL AND queue = q.queue AND id > $1
        ORDER BY id LIMIT $2
    ) ready
    UNION ALL
    SELECT held.id FROM (
        SELECT id FROM items
        WHERE state = 0 AND due_at IS NOT NULL AND id > $1 ORDER BY id LIMIT $2
    ) held
    ORDER BY id LIMIT $2
)
SELECT i.id, i.payload, i.attempts, i.max_attempts, i.state, i.owner, i.last_error, i.queue,
       "#,
    item_times!("i."),
    r#"
FROM page JOIN items i ON i.id = page.id
ORDER BY i.id
"#
);

/// `cancel`: removes item $1 unless a token owns it, and answers the state (and
/// owner) it had; no row: no such item. The lock serialises it with a claim or a
/// finish of the same item.
const CANCEL: &str = r#"
WITH cur AS MATERIALIZED (SELECT id, state, owner FROM items WHERE id = $1 FOR UPDATE),
gone AS (DELETE FROM items i USING cur WHERE i.id = cur.id AND cur.state <> 1)
SELECT state, owner FROM cur
"#;

/// `retry_dead_letter`: $1 id, $2 the pending channel. Back to pending with no
/// attempts, due at once (claimable from the server's now, `ready_at`), its
/// dead-lettering time cleared (`dead_at`, migration 15), iff dead-lettered,
/// notifying `revived` on the pending channel; answers the item's state before (no
/// row: no such item), and the count of notifications (`woke`, which the answer must
/// name for the notifying CTE to run).
const RETRY_DEAD_LETTER: &str = r#"
WITH cur AS MATERIALIZED (SELECT id, state FROM items WHERE id = $1 FOR UPDATE),
moved AS (
    UPDATE items i
    SET state = 0, attempts = 0, due_at = NULL, ready_at = clock_timestamp(), dead_at = NULL
    FROM cur WHERE i.id = cur.id AND cur.state = 2
    RETURNING i.id
),
woke AS (SELECT pg_notify($2, 'revived') WHERE EXISTS (SELECT 1 FROM moved))
SELECT state, (SELECT count(*) FROM woke) AS woke FROM cur
"#;

/// `retry_dead_letters`: $1 limit, $2 the pending channel. Up to limit dead-lettered
/// items, lowest id first, back to pending with no attempts, due at once (claimable
/// from the server's now, `ready_at`), `dead_at` cleared, notifying `revived` once on
/// the pending channel when it moved any; answers their ids (and `woke`, as
/// `RETRY_DEAD_LETTER`).
const RETRY_DEAD_LETTERS: &str = r#"
WITH pick AS (
    SELECT id FROM items WHERE state = 2 ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED
),
moved AS (
    UPDATE items i
    SET state = 0, attempts = 0, due_at = NULL, ready_at = clock_timestamp(), dead_at = NULL
    FROM pick WHERE i.id = pick.id
    RETURNING i.id
),
woke AS (SELECT pg_notify($2, 'revived') WHERE EXISTS (SELECT 1 FROM moved))
SELECT id, (SELECT count(*) FROM woke) AS woke FROM moved
"#;

#[async_trait]
impl OperatorStore for PostgresStore {
    async fn store_time(&self) -> Result<StoreTime> {
        let q = sqlx::query(STORE_TIME);
        let row = self.db().fetch_one(q).await?;
        let micros: i64 = get(&row, 0)?;
        let micros = u64::try_from(micros).map_err(|_| {
            corrupt(format!(
                "unexpected value in the clock_timestamp column: {micros}"
            ))
        })?;
        // The contract wants it non-decreasing per handle; a server clock stepped
        // back (NTP) must not show through.
        Ok(self.high_water().observe(Duration::from_micros(micros)))
    }

    async fn leases(&self, space: &Space, page: Page<&Key>) -> Result<Vec<LeaseInfo>> {
        let Page { after, limit } = page;
        let q = sqlx::query(LEASES)
            .bind(space.as_str())
            .bind(after.map_or("", |k| k.name().as_str()))
            .bind(limit_param(limit));
        self.list(q, |row| {
            let (key, holder, token) = listed_lease(space, row)?;
            Ok(LeaseInfo::of(
                key,
                holder,
                token,
                ttl_of(get(row, 3)?)?,
                status_of(get(row, 4)?),
            )
            .with_session(session_of(get(row, 5)?)?))
        })
        .await
    }

    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>> {
        self.death_records(before, limit).await
    }

    async fn item_counts(&self) -> Result<ItemCounts> {
        let q = sqlx::query(ITEM_COUNTS);
        let row = self.db().fetch_one(q).await?;
        let n = |i: usize| -> Result<u64> {
            let v: i64 = get(&row, i)?;
            u64::try_from(v)
                .map_err(|_| corrupt(format!("unexpected value in the count column: {v}")))
        };
        Ok(ItemCounts::new(n(0)?, n(1)?, n(2)?))
    }

    async fn queue_counts(&self) -> Result<Vec<QueueCounts>> {
        let q = sqlx::query(QUEUE_COUNTS);
        let rows = self.db().fetch_all(q).await?;
        // One row per (queue, state) held, in queue order: a queue's rows are
        // adjacent.
        let mut out: Vec<QueueCounts> = Vec::new();
        for row in &rows {
            let queue = queue_of(get(row, 0)?)?;
            let state: i16 = get(row, 1)?;
            let n: i64 = get(row, 2)?;
            let n = u64::try_from(n)
                .map_err(|_| corrupt(format!("unexpected value in the count column: {n}")))?;
            if out.last().is_none_or(|last| last.queue != queue) {
                out.push(QueueCounts::new(queue, ItemCounts::default()));
            }
            let Some(counts) = out.last_mut().map(|last| &mut last.counts) else {
                continue;
            };
            match state {
                0 => counts.pending += n,
                1 => counts.owned += n,
                2 => counts.dead_lettered += n,
                _ => {
                    return Err(corrupt(format!(
                        "unexpected value in the state column: {state}"
                    )))
                }
            }
        }
        Ok(out)
    }

    async fn items(&self, state: ItemStateKind, page: Page<ItemId>) -> Result<Vec<ItemRecord>> {
        let Page { after, limit } = page;
        let code: i16 = match state {
            ItemStateKind::Pending => 0,
            ItemStateKind::Owned => 1,
            ItemStateKind::DeadLettered => 2,
        };
        let after = after.map_or(0, |id| i64::try_from(id.0).unwrap_or(i64::MAX));
        let q = match code {
            0 => sqlx::query(PENDING_ITEMS),
            _ => sqlx::query(ITEMS).bind(code),
        }
        .bind(after)
        .bind(limit_param(limit));
        self.list(q, record_of).await
    }

    async fn retry_dead_letter(&self, id: ItemId) -> Result<()> {
        let no_such = || Error::invalid("item", InputProblem::NoSuchItem);
        let Some(db_id) = id_param(id) else {
            return Err(no_such());
        };
        let q = sqlx::query(RETRY_DEAD_LETTER)
            .bind(db_id)
            .bind(self.pending_channel());
        let Some(row) = self.db().fetch_optional(q).await? else {
            return Err(no_such());
        };
        let before: i16 = get(&row, 0)?;
        if before == 2 {
            self.pending_local();
            Ok(())
        } else {
            Err(Error::invalid("item", InputProblem::NotDeadLettered))
        }
    }

    async fn cancel(&self, id: ItemId) -> Result<Option<ItemState>> {
        let Some(db_id) = id_param(id) else {
            return Ok(None);
        };
        let q = sqlx::query(CANCEL).bind(db_id);
        match self.db().fetch_optional(q).await? {
            Some(row) => state_of(get(&row, 0)?, get(&row, 1)?).map(Some),
            None => Ok(None),
        }
    }

    async fn retry_dead_letters(&self, limit: usize) -> Result<Vec<ItemId>> {
        let q = sqlx::query(RETRY_DEAD_LETTERS)
            .bind(limit_param(limit))
            .bind(self.pending_channel());
        let mut ids = self.list(q, |row| id_of(get(row, 0)?)).await?;
        if !ids.is_empty() {
            self.pending_local();
        }
        ids.sort();
        Ok(ids)
    }
}
