//! Whose turn it is to write the file.
//!
//! SQLite lets one connection at a time hold the file's write lock, and a process
//! waiting for it polls from SQLite's busy handler, sleeping up to 100 ms between
//! tries. Against a process writing flat out, whose next transaction begins the
//! instant its last one commits, it hardly ever finds the lock free: measured, a
//! neighbour's renewals waited 3.4 s and its 2 s leases expired. So writers take turns
//! before `BEGIN IMMEDIATE`:
//! - inside a process, on an async mutex per file (first come, first served);
//! - across processes, on an advisory lock (`flock`) of the sidecar file `<db>-turn`,
//!   which a waiting process blocks on in the kernel and is woken from the moment it is
//!   free. While it waits it holds a shared lock on `<db>-want`; a process about to take
//!   the turn again first looks there, and when another process waits, pauses
//!   ([`COURTESY`]) so that the waiter goes first. Two busy processes thus alternate.
//!
//! SQLite's own lock still guards every transaction: the turns only decide who asks
//! for it next. A process that takes no turn (an older build, the `sqlite3` shell) is
//! as safe as before, only not polite; a directory where the sidecar files cannot be
//! made leaves SQLite's busy handler alone in charge.

use std::collections::HashMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex as StdMutex, OnceLock};
use std::time::Duration;

use liveness_core::sync::lock;
use liveness_core::{Error, Result};
use tokio::sync::{Mutex, MutexGuard};

use crate::BACKEND;

/// How long a process about to write again waits when another process waits for
/// the turn: time for the waiter, woken by the last unlock, to take it.
const COURTESY: Duration = Duration::from_millis(2);

/// The writers' turns on one file, shared by every handle of this process on it.
#[derive(Debug)]
pub(crate) struct Turns {
    local: Mutex<()>,
    files: Option<Arc<Files>>,
}

/// The sidecar files of the turns across processes.
#[derive(Debug)]
struct Files {
    /// Locked exclusively by the process whose turn it is.
    turn: File,
    /// Locked shared by every process waiting for the turn.
    want: File,
}

/// The turns on the database file `path` (canonical), one per file in this process.
pub(crate) fn turns(path: &Path) -> Arc<Turns> {
    static TURNS: OnceLock<StdMutex<HashMap<PathBuf, Arc<Turns>>>> = OnceLock::new();
    let mut all = lock(TURNS.get_or_init(StdMutex::default));
    all.entry(path.to_path_buf())
        .or_insert_with(|| {
            let files = Files::open(path)
                .map_err(|e| {
                    tracing::warn!(path = %path.display(), error = %e, "no write turns across processes: SQLite's busy handler alone decides who writes next");
                })
                .ok();
            Arc::new(Turns {
                local: Mutex::new(()),
                files: files.map(Arc::new),
            })
        })
        .clone()
}

impl Files {
    fn open(db: &Path) -> std::io::Result<Files> {
        let sidecar = |suffix: &str| {
            let mut name = db.as_os_str().to_owned();
            name.push(suffix);
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(PathBuf::from(name))
        };
        Ok(Files {
            turn: sidecar("-turn")?,
            want: sidecar("-want")?,
        })
    }

    /// True when another process waits for the turn.
    fn others_waiting(&self) -> bool {
        match self.want.try_lock() {
            Ok(()) => {
                let _ = self.want.unlock();
                false
            }
            Err(_) => true,
        }
    }
}

/// This writer's turn: the file may be written until it is dropped.
pub(crate) struct Turn<'a> {
    _local: MutexGuard<'a, ()>,
    held: Option<Arc<Files>>,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if let Some(files) = &self.held {
            let _ = files.turn.unlock();
        }
    }
}

/// Between a blocked lock and the call that waits for it: who gave up, who holds.
#[derive(Default)]
struct Handoff {
    abandoned: bool,
    held: bool,
}

impl Turns {
    /// Waits for this writer's turn, up to `timeout` for another process's turn to
    /// end (`Unavailable` then, as SQLite's busy timeout answers).
    pub(crate) async fn take(&self, timeout: Duration) -> Result<Turn<'_>> {
        let local = self.local.lock().await;
        let Some(files) = self.files.clone() else {
            return Ok(Turn {
                _local: local,
                held: None,
            });
        };
        let busy = || {
            Error::unavailable(
                BACKEND,
                "another process kept its write turn past the busy timeout",
            )
        };
        if timeout.is_zero() {
            return match files.turn.try_lock() {
                Ok(()) => Ok(Turn {
                    _local: local,
                    held: Some(files),
                }),
                Err(TryLockError::WouldBlock) => Err(busy()),
                Err(TryLockError::Error(e)) => Ok(self.alone(local, &e)),
            };
        }
        if files.others_waiting() {
            tokio::time::sleep(COURTESY).await;
        }
        let handoff = Arc::new(StdMutex::new(Handoff::default()));
        let blocked = tokio::task::spawn_blocking({
            let (files, handoff) = (files.clone(), handoff.clone());
            move || -> std::io::Result<()> {
                files.want.lock_shared()?;
                let got = files.turn.lock();
                let _ = files.want.unlock();
                got?;
                let mut h = lock(&handoff);
                if h.abandoned {
                    let _ = files.turn.unlock();
                } else {
                    h.held = true;
                }
                Ok(())
            }
        });
        match tokio::time::timeout(timeout, blocked).await {
            Ok(Ok(Ok(()))) => Ok(Turn {
                _local: local,
                held: Some(files),
            }),
            Ok(Ok(Err(e))) => Ok(self.alone(local, &e)),
            Ok(Err(e)) => Ok(self.alone(local, &e)),
            Err(_) => {
                let mut h = lock(&handoff);
                h.abandoned = true;
                if h.held {
                    let _ = files.turn.unlock();
                }
                Err(busy())
            }
        }
    }

    /// The turn inside this process only, after the lock file failed with `e`.
    fn alone<'a>(&'a self, local: MutexGuard<'a, ()>, e: &dyn std::fmt::Display) -> Turn<'a> {
        tracing::warn!(error = %e, "a write turn across processes could not be taken: SQLite's busy handler decides");
        Turn {
            _local: local,
            held: None,
        }
    }
}
