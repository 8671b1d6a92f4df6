//! The workers as the parent knows them, and the staged failures: what happened to
//! each worker, the stages of the run, and the signals that stage them.

use std::process::ExitStatus;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::ChildStdin;
use tokio::time::Instant;

use crate::deaths::Death;

/// What happened to a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Left alone.
    Normal,
    /// Sent SIGKILL at `at`.
    Killed { at: Instant },
    /// Sent SIGSTOP at `at`, and SIGCONT at `resumed`.
    Frozen {
        at: Instant,
        resumed: Option<Instant>,
    },
}

/// The staged failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Waiting for 15% of the items done, to kill a worker.
    WaitKill,
    /// Waiting for 35%, to freeze another.
    WaitFreeze,
    /// Worker `victim` is frozen until `resume_at` (or its death is recorded).
    Frozen { victim: usize, resume_at: Instant },
    /// Both staged.
    Over,
}

/// The fault staged on a worker, and when.
pub fn fault(role: Role) -> Option<(&'static str, Instant)> {
    match role {
        Role::Killed { at } => Some(("SIGKILL", at)),
        Role::Frozen { at, .. } => Some(("SIGSTOP", at)),
        Role::Normal => None,
    }
}

/// Sends `sig` to the process `pid`.
pub fn signal(pid: Option<u32>, sig: Signal) -> Result<(), String> {
    let pid = pid.ok_or("the process has no pid (it already exited)")?;
    let pid = i32::try_from(pid).map_err(|_| format!("pid {pid} out of range"))?;
    kill(Pid::from_raw(pid), sig).map_err(|e| format!("{sig:?} to pid {pid}: {e}"))
}

/// A worker process, as the parent knows it from its facts.
pub struct Worker {
    pub name: String,
    pub pid: Option<u32>,
    pub stdin: Option<ChildStdin>,
    /// Tokens in the order the worker joined with them.
    pub tokens: Vec<u64>,
    pub done: u64,
    pub working_on: Option<u64>,
    pub role: Role,
    /// The token it worked under when its fault was staged: the death to show.
    pub fault_token: Option<u64>,
    pub exited: Option<ExitStatus>,
    pub lease: String,
    /// Facts seen after a freeze: cancellation, refused completions, re-join.
    pub lost: Vec<(u64, String)>,
    pub fenced: Vec<(u64, u64)>,
    pub rejoined: Option<u64>,
}

impl Worker {
    /// The token it joined with last.
    pub fn token(&self) -> Option<u64> {
        self.tokens.last().copied()
    }

    /// The fault staged on it and when, if `death` is the death of the token it
    /// worked under then.
    pub fn fault_of(&self, death: &Death) -> Option<(&'static str, Instant)> {
        let of_fault = death.name == self.name && Some(death.token) == self.fault_token;
        fault(self.role).filter(|_| of_fault)
    }
}
