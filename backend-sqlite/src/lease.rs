//! `impl LeaseStore for SqliteStore`: each method runs its statement here, or
//! forwards to the deaths (`deaths.rs`) and the batches (`batch.rs`). The one-entry
//! forms (`acquire`, `join_session`, `renew`, `reap`) are the batches with one entry
//! ([`liveness_core::Store`]). Their input was checked before the call
//! ([`liveness_core::CheckInput`]): they do not check it again.

use std::time::Duration;

use liveness_core::wake::tick;
use liveness_core::{
    async_trait, Acquire, BatchResult, ExpiredLease, FencingToken, HolderId, JoinAsk, Key, Lease,
    LeaseInfo, LeaseStore, Name, Result, Space, StoreInfo, Ttl,
};
use sqlx::sqlite::SqliteRow;
use sqlx::Row;
use tokio::sync::watch;

use crate::core::{get_text, get_u64, live_until, status_at, SqliteStore};
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

/// The time left at ?3 (now) of the lease of space ?2 (?1 ns) that expires first, on
/// the expiry index (riding members have no expiry of their own).
const NEXT_EXPIRY: &str = "SELECT expires_boot_ms - ?3 FROM liveness_leases \
    WHERE ns = ?1 AND space = ?2 AND expires_boot_ms IS NOT NULL \
    ORDER BY expires_boot_ms LIMIT 1";

/// The lease on `key` from the columns of `row` from `at` on, as [`INSPECT`] reads
/// them (holder, token, ttl, when it expires, the session it rides), judged at store
/// time `now`.
pub(crate) fn lease_info(row: &SqliteRow, at: usize, key: Key, now: i64) -> Result<LeaseInfo> {
    let session: Option<String> = row.try_get(at + 4).map_err(map)?;
    let session = session
        .map(|name| {
            Name::new(name)
                .map(|name| Key::new(Space::sessions(), name))
                .map_err(|_| corrupt("bad session in the liveness database"))
        })
        .transpose()?;
    let expires_at: i64 = row.try_get(at + 3).map_err(map)?;
    let info = LeaseInfo::of(
        key,
        HolderId::new(get_text(row, at)?)
            .map_err(|_| corrupt("bad holder in the liveness database"))?,
        FencingToken(get_u64(row, at + 1, "token")?),
        Ttl::from_millis(get_u64(row, at + 2, "ttl")?)
            .map_err(|_| corrupt("bad ttl in the liveness database"))?,
        status_at(expires_at, now),
    );
    Ok(info.with_session(session))
}

#[async_trait]
impl LeaseStore for SqliteStore {
    fn info(&self) -> &StoreInfo {
        &self.info
    }

    async fn acquire_many(&self, asks: &[Acquire]) -> BatchResult<Lease> {
        self.acquire_batch(asks).await
    }

    async fn join_session_many(&self, session: &Lease, asks: &[JoinAsk]) -> BatchResult<Lease> {
        self.join_batch(session, asks).await
    }

    async fn renew_many(&self, leases: &[Lease]) -> BatchResult<Lease> {
        self.renew_batch(leases).await
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let mut w = self.write().await?;
        let now = self.now()?;
        if !self
            .declare_dead_in(w.conn(), RELEASE, &lease.key, lease.token, false, now)
            .await?
        {
            w.rollback().await?;
            return Ok(false);
        }
        w.commit().await?;
        tick(&self.wake);
        Ok(true)
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
        row.map(|row| lease_info(&row, 0, key.clone(), now))
            .transpose()
    }

    async fn expired(&self, space: &Space, limit: usize) -> Result<Vec<ExpiredLease>> {
        self.find_expired(space, limit).await
    }

    async fn reap_many(&self, expired: &[(Key, FencingToken)]) -> BatchResult<bool> {
        self.reap_batch(expired).await
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
