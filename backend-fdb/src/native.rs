//! The real client (feature `native`): the transaction interface over the
//! `foundationdb` crate (API version 710, `fdb-7_1`), linked against `libfdb_c`.
//!
//! `cargo check --features native` proves this compiles against the real API; it
//! does not prove it runs: on the machines this crate is developed on there is no
//! `libfdb_c` and no cluster, so nothing here has been executed (see the README).

use std::sync::{Mutex, OnceLock};

use foundationdb::api::{FdbApiBuilder, NetworkAutoStop};
use foundationdb::options::{MutationType, StreamingMode, TransactionOption};
use foundationdb::{FdbError, RangeOption};
use liveness_core::sync::lock;
use liveness_core::{async_trait, Error};

use crate::config::FdbConfig;
use crate::error::{is_transient, map};
use crate::kv::{Class, Database, DbError, Pair, RangeRead, Stamp, Transaction};

/// The client's network thread: started once per process, by the first `connect`.
static NETWORK: OnceLock<Result<Mutex<Option<NetworkAutoStop>>, FdbError>> = OnceLock::new();

/// Starts the FoundationDB client network thread once per process.
///
/// The `foundationdb` crate marks booting `unsafe` because the returned guard must be
/// dropped (stopping the network) before the process exits; it is kept in a static,
/// and [`stop_network`] drops it. This is the crate's only unsafe code.
#[allow(unsafe_code)]
fn boot() -> Result<(), FdbError> {
    let slot = NETWORK.get_or_init(|| {
        let builder = FdbApiBuilder::default().build()?;
        // SAFETY: the guard is stored in `NETWORK` and dropped by `stop_network`; a
        // process that exits without calling it skips only the clean network stop
        // (FoundationDB documents aborting as safe).
        let guard = unsafe { builder.boot() }?;
        Ok(Mutex::new(Some(guard)))
    });
    slot.as_ref().map(|_| ()).map_err(|e| *e)
}

/// Stops the FoundationDB client network thread started by the first `connect`.
///
/// Call it once before the process exits, after the last store handle is dropped.
/// The client cannot be restarted in the same process afterwards: every later
/// operation fails.
pub fn stop_network() {
    if let Some(Ok(m)) = NETWORK.get() {
        let guard = lock(m).take();
        drop(guard);
    }
}

/// A real FoundationDB database.
pub(crate) struct NativeDatabase {
    db: foundationdb::Database,
    timeout_ms: i32,
}

impl std::fmt::Debug for NativeDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeDatabase")
            .field("timeout_ms", &self.timeout_ms)
            .finish_non_exhaustive()
    }
}

impl NativeDatabase {
    pub(crate) fn open(config: &FdbConfig) -> Result<NativeDatabase, Error> {
        boot().map_err(|e| map(native(e)))?;
        let path = config.cluster_file().and_then(|p| p.to_str());
        if config.cluster_file().is_some() && path.is_none() {
            return Err(Error::invalid(
                "cluster file",
                liveness_core::InputProblem::NotUtf8,
            ));
        }
        let db = foundationdb::Database::new(path).map_err(|e| map(native(e)))?;
        let timeout_ms = i32::try_from(config.timeout().as_millis()).unwrap_or(i32::MAX);
        Ok(NativeDatabase { db, timeout_ms })
    }
}

#[async_trait]
impl Database for NativeDatabase {
    async fn begin(&self) -> Result<Box<dyn Transaction>, DbError> {
        let trx = self.db.create_trx().map_err(native)?;
        // Bounds the whole retry loop: after it, on_error gives up with
        // transaction_timed_out (1031), mapped to Unavailable.
        trx.set_option(TransactionOption::Timeout(self.timeout_ms))
            .map_err(native)?;
        Ok(Box::new(NativeTxn {
            trx: Some(trx),
            failed: None,
            stamped: false,
        }))
    }
}

struct NativeTxn {
    /// `None` only while a commit or `on_error` owns it.
    trx: Option<foundationdb::Transaction>,
    /// A commit that failed, kept for `on_error`.
    failed: Option<foundationdb::TransactionCommitError>,
    stamped: bool,
}

/// 2000 client_invalid_operation: used when the transaction is gone (a commit or
/// on_error that failed to hand it back).
fn gone() -> DbError {
    native(FdbError::from_code(2000))
}

impl NativeTxn {
    fn trx(&self) -> Result<&foundationdb::Transaction, DbError> {
        self.trx.as_ref().ok_or_else(gone)
    }
}

/// A client error as the transaction interface carries it.
fn native(e: FdbError) -> DbError {
    let class = Class {
        transient: is_transient(&e),
        maybe_committed: e.is_maybe_committed(),
    };
    DbError::new(e, class)
}

#[async_trait]
impl Transaction for NativeTxn {
    async fn read_version(&mut self) -> Result<u64, DbError> {
        let v = self.trx()?.get_read_version().await.map_err(native)?;
        Ok(u64::try_from(v).unwrap_or(0))
    }

    async fn get(&mut self, key: &[u8], snapshot: bool) -> Result<Option<Vec<u8>>, DbError> {
        let v = self.trx()?.get(key, snapshot).await.map_err(native)?;
        Ok(v.map(|s| s.to_vec()))
    }

    async fn range(&mut self, read: RangeRead<'_>) -> Result<Vec<Pair>, DbError> {
        let mut out = Vec::new();
        if read.is_empty() {
            return Ok(out);
        }
        let mut opt = RangeOption::from((read.begin.to_vec(), read.end.to_vec()));
        opt.limit = Some(read.limit);
        opt.reverse = read.reverse;
        opt.mode = StreamingMode::WantAll;
        loop {
            let kvs = self
                .trx()?
                .get_range(&opt, 1, read.snapshot)
                .await
                .map_err(native)?;
            for kv in &kvs {
                out.push((kv.key().to_vec(), kv.value().to_vec()));
            }
            match opt.next_range(&kvs) {
                Some(next) if out.len() < read.limit => opt = next,
                _ => break,
            }
        }
        out.truncate(read.limit);
        Ok(out)
    }

    fn set(&mut self, key: &[u8], value: &[u8]) {
        if let Some(t) = &self.trx {
            t.set(key, value);
        }
    }

    fn clear(&mut self, key: &[u8]) {
        if let Some(t) = &self.trx {
            t.clear(key);
        }
    }

    fn add(&mut self, key: &[u8], delta: i64) {
        if let Some(t) = &self.trx {
            t.atomic_op(key, &delta.to_le_bytes(), MutationType::Add);
        }
    }

    fn set_versionstamped_key(&mut self, key: &[u8], value: &[u8]) {
        if let Some(t) = &self.trx {
            t.atomic_op(key, value, MutationType::SetVersionstampedKey);
            self.stamped = true;
        }
    }

    fn set_versionstamped_value(&mut self, key: &[u8], value: &[u8]) {
        if let Some(t) = &self.trx {
            t.atomic_op(key, value, MutationType::SetVersionstampedValue);
            self.stamped = true;
        }
    }

    async fn commit(&mut self) -> Result<Option<Stamp>, DbError> {
        let trx = self.trx.take().ok_or_else(gone)?;
        let stamp = self.stamped.then(|| trx.get_versionstamp());
        match trx.commit().await {
            Ok(committed) => {
                self.trx = Some(committed.reset());
                self.stamped = false;
                match stamp {
                    Some(f) => {
                        let slice = f.await.map_err(native)?;
                        let mut s: Stamp = [0; 10];
                        if slice.len() != s.len() {
                            return Err(native(FdbError::from_code(2000)));
                        }
                        s.copy_from_slice(&slice);
                        Ok(Some(s))
                    }
                    None => Ok(None),
                }
            }
            Err(e) => {
                let err = *e;
                // Keep the failed commit for on_error (FoundationDB's backoff needs it).
                self.failed = Some(e);
                Err(native(err))
            }
        }
    }

    async fn on_error(&mut self, err: DbError) -> Result<(), DbError> {
        let Some(code) = err.downcast_ref::<FdbError>().copied() else {
            return Err(err);
        };
        let trx = match self.failed.take() {
            Some(failed) => failed.on_error().await.map_err(native)?,
            None => {
                let trx = self.trx.take().ok_or_else(gone)?;
                trx.on_error(code).await.map_err(native)?
            }
        };
        self.trx = Some(trx);
        self.stamped = false;
        Ok(())
    }
}
