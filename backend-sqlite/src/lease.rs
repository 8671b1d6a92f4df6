//! `impl LeaseStore for SqliteStore`: each method runs its statement here, or
//! forwards to the deaths (`deaths.rs`) and the batches (`batch.rs`). Their input was
//! checked before the call ([`liveness_core::CheckInput`]): they do not check it again.

use std::time::Duration;

use liveness_core::wake::tick;
use liveness_core::{
    async_trait, Acquire, BatchResult, DeadToken, DeathRecord, ExpiredLease, FencingToken,
    HolderId, JoinAsk, Key, Lease, LeaseInfo, LeaseStore, Name, Page, Result, Space, StoreInfo,
    StoreTime, Ttl,
};
use sqlx::sqlite::SqliteRow;
use sqlx::Row;
use tokio::sync::watch;

use crate::core::{get_text, get_u64, limit_param, live_until, status_at, SqliteStore};
use crate::error::{corrupt, map};

/// Deletes the lease on a key if it has token ?4 (?1 ns, ?2 space, ?3 name), answering
/// its holder (for the death record).
const RELEASE: &str = "DELETE FROM liveness_leases \
    WHERE ns = ?1 AND space = ?2 AND name = ?3 AND token = ?4 RETURNING holder";

/// The lease on a key (?1 ns, ?2 space, ?3 name): holder, token, ttl, when it expires
/// (a riding member: when its session does, [`live_until`]), the session it rides.
const INSPECT: &str = concat!(
    "SELECT l.holder, l.token, l.ttl_ms, ",
    live_until!(),
    ", l.session_name FROM liveness_leases l WHERE l.ns = ?1 AND l.space = ?2 AND l.name = ?3"
);

/// Up to ?4 leases of space ?2 (?1 ns) whose name is greater than ?3, in name (byte)
/// order, on the primary key: O(page). Columns as [`INSPECT`]'s, after the name.
const MEMBERS: &str = concat!(
    "SELECT l.name, l.holder, l.token, l.ttl_ms, ",
    live_until!(),
    ", l.session_name FROM liveness_leases l \
    WHERE l.ns = ?1 AND l.space = ?2 AND l.name > ?3 ORDER BY l.name LIMIT ?4"
);

/// The time left at ?3 (now) of the lease of space ?2 (?1 ns) that expires first, on
/// the expiry index (riding members have no expiry of their own).
const NEXT_EXPIRY: &str = "SELECT expires_boot_ms - ?3 FROM liveness_leases \
    WHERE ns = ?1 AND space = ?2 AND expires_boot_ms IS NOT NULL \
    ORDER BY expires_boot_ms LIMIT 1";

/// The session key column `idx` of `row` names (`session_name`, a key of
/// [`Space::sessions`]): `None` for a lease of its own.
fn session_of(row: &SqliteRow, idx: usize) -> Result<Option<Key>> {
    let name: Option<String> = row.try_get(idx).map_err(map)?;
    name.map(|name| {
        Name::new(name)
            .map(|name| Key::new(Space::sessions(), name))
            .map_err(|_| corrupt("bad session in the liveness database"))
    })
    .transpose()
}

#[async_trait]
impl LeaseStore for SqliteStore {
    fn info(&self) -> &StoreInfo {
        &self.info
    }

    async fn acquire(&self, key: &Key, holder: &HolderId, ttl: Ttl) -> Result<Lease> {
        let mut w = self.write().await?;
        let now = self.now()?;
        let (taken, retired) = self.take_at(w.conn(), key, holder, ttl, now, None).await?;
        w.commit_if(taken.is_ok()).await?;
        if retired {
            tick(&self.wake);
        }
        taken
    }

    async fn acquire_many(&self, asks: &[Acquire]) -> BatchResult<Lease> {
        self.acquire_batch(asks).await
    }

    async fn join_session(&self, session: &Lease, key: &Key, holder: &HolderId) -> Result<Lease> {
        let (mut w, now, ride) = match self.open_ride(session).await? {
            Ok(open) => open,
            Err(lost) => return Err(session.lost(lost)),
        };
        let (joined, retired) = self
            .take_at(w.conn(), key, holder, session.ttl, now, Some(ride))
            .await?;
        w.commit_if(joined.is_ok()).await?;
        if retired {
            tick(&self.wake);
        }
        joined
    }

    async fn join_session_many(&self, session: &Lease, asks: &[JoinAsk]) -> BatchResult<Lease> {
        self.join_batch(session, asks).await
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        // The clock is read holding the write lock, so the renewal happens at that
        // instant: a lease that expired while this call queued for the lock (another
        // process writing) stays expired.
        let mut w = self.write().await?;
        let now = self.now()?;
        let renewed = self.renew_at(w.conn(), lease, now).await?;
        w.commit_if(renewed.is_ok()).await?;
        renewed
    }

    async fn renew_many(&self, leases: &[Lease]) -> BatchResult<Lease> {
        self.renew_batch(leases).await
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.retire(RELEASE, &lease.key, lease.token, false).await
    }

    async fn inspect(&self, key: &Key) -> Result<Option<LeaseInfo>> {
        let now = self.now()?;
        let row = self
            .query(INSPECT)
            .bind(key.space().as_ref())
            .bind(key.name().as_ref())
            .fetch_optional(&self.pool)
            .await
            .map_err(map)?;
        let Some(row) = row else {
            return Ok(None);
        };
        let holder = HolderId::new(get_text(&row, 0)?)
            .map_err(|_| corrupt("bad holder in the liveness database"))?;
        let token = FencingToken(get_u64(&row, 1, "token")?);
        let ttl = Ttl::from_millis(get_u64(&row, 2, "ttl")?)
            .map_err(|_| corrupt("bad ttl in the liveness database"))?;
        let expires_at: i64 = row.try_get(3).map_err(map)?;
        let status = status_at(expires_at, now);
        Ok(Some(LeaseInfo {
            session: session_of(&row, 4)?,
            key: key.clone(),
            holder,
            token,
            ttl,
            status,
        }))
    }

    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        self.find_expired(space, limit).await
    }

    async fn reap(&self, key: &Key, token: FencingToken) -> Result<bool> {
        self.reap_key(key, token).await
    }

    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> BatchResult<bool> {
        self.reap_batch(expired).await
    }

    async fn dead_tokens(&self, limit: usize) -> Result<Vec<DeadToken>> {
        self.dead_set(limit).await
    }

    async fn members(&self, space: &Space, page: Page<&Key>) -> Result<Vec<LeaseInfo>> {
        let Page { after, limit } = page;
        let now = self.now()?;
        let q = self
            .query(MEMBERS)
            .bind(space.as_ref())
            .bind(after.map_or("", |k| k.name().as_ref()))
            .bind(limit_param(limit));
        self.list(q, |row| {
            let name = Name::new(get_text(row, 0)?)
                .map_err(|_| corrupt("bad name in the liveness database"))?;
            let expires_at: i64 = row.try_get(4).map_err(map)?;
            Ok(LeaseInfo {
                session: session_of(row, 5)?,
                key: Key::new(space.clone(), name),
                holder: HolderId::new(get_text(row, 1)?)
                    .map_err(|_| corrupt("bad holder in the liveness database"))?,
                token: FencingToken(get_u64(row, 2, "token")?),
                ttl: Ttl::from_millis(get_u64(row, 3, "ttl")?)
                    .map_err(|_| corrupt("bad ttl in the liveness database"))?,
                status: status_at(expires_at, now),
            })
        })
        .await
    }

    async fn deaths(&self, before: Option<u64>, limit: usize) -> Result<Vec<DeathRecord>> {
        self.death_records(before, limit).await
    }

    async fn store_time(&self) -> Result<StoreTime> {
        if self.pool.is_closed() {
            return Err(map(sqlx::Error::PoolClosed));
        }
        let now = u64::try_from(self.now()?).unwrap_or(0);
        Ok(StoreTime::from_epoch(Duration::from_millis(now)))
    }

    async fn next_expiry(&self, space: &Space) -> Result<Option<Duration>> {
        let now = self.now()?;
        let left: Option<i64> = sqlx::query_scalar(NEXT_EXPIRY)
            .bind(self.ns.as_ref())
            .bind(space.as_ref())
            .bind(now)
            .fetch_optional(&self.pool)
            .await
            .map_err(map)?;
        Ok(left.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
    }

    fn wakeups(&self) -> Option<watch::Receiver<u64>> {
        Some(self.wake.subscribe())
    }
}
