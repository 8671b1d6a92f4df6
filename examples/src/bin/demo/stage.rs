//! The workers as the parent knows them, and the staged failures: what happened to
//! each worker process and each of its members, the stages of the run, and the
//! signals that stage them; the scheduled job and the job that fails once.

use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::ChildStdin;
use tokio::time::Instant;

use crate::deaths::Death;

/// What happened to a worker process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Role {
    /// Left alone.
    #[default]
    Normal,
    /// Sent SIGKILL at `at`.
    Killed { at: Instant },
    /// Sent SIGSTOP at `at`, and SIGCONT at `resumed`.
    Frozen {
        at: Instant,
        resumed: Option<Instant>,
    },
}

/// The staged failures, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Waiting for 15% of the items done, to kill a worker.
    WaitKill,
    /// Waiting for 25%, to make one member of another worker hang in its job.
    WaitStall,
    /// Waiting for 35%, to freeze a third.
    WaitFreeze,
    /// Worker `victim` is frozen until `resume_at` (or its death is recorded).
    Frozen { victim: usize, resume_at: Instant },
    /// All staged.
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

/// One member of a worker process, as the parent knows it from its facts.
#[derive(Default)]
pub struct MemberView {
    /// Its name, `worker-N.mK`.
    pub name: String,
    /// Tokens in the order it joined with them.
    pub tokens: Vec<u64>,
    pub done: u64,
    pub working_on: Option<u64>,
    /// Its leases lost: (token, reason).
    pub lost: Vec<(u64, String)>,
    /// Its completions the store refused: (item, token).
    pub fenced: Vec<(u64, u64)>,
    /// Its lease store status, as `inspect` last answered.
    pub lease: String,
}

impl MemberView {
    /// The token it joined with last.
    pub fn token(&self) -> Option<u64> {
        self.tokens.last().copied()
    }
}

/// The leases a worker held when its fault was staged: the deaths to show.
#[derive(Clone, Debug, Default)]
pub struct FaultTokens {
    /// Its session's token.
    pub session: Option<u64>,
    /// Each member's token (by member number).
    pub members: Vec<Option<u64>>,
}

/// A worker process, as the parent knows it from its facts.
#[derive(Default)]
pub struct Worker {
    pub name: String,
    pub pid: Option<u32>,
    pub stdin: Option<ChildStdin>,
    /// Its session's tokens in the order it took them.
    pub tokens: Vec<u64>,
    pub members: Vec<MemberView>,
    pub role: Role,
    /// The leases it held when its fault was staged.
    pub fault_tokens: FaultTokens,
    /// The items its members worked on when its fault was staged (when it was
    /// resumed, for the frozen one; at its end for the killed one): (member, item).
    pub held: Vec<(usize, u64)>,
    pub exited: Option<ExitStatus>,
    /// Its session's store status, as `inspect` last answered.
    pub lease: String,
    /// Its session's leases lost: (token, reason).
    pub lost: Vec<(u64, String)>,
    /// Asked to make one of its members hang ([`crate::proto::STALL`]).
    pub stall_host: bool,
}

impl Worker {
    /// A worker process `name` with `members` members, started as `pid`.
    pub fn new(name: String, members: usize, pid: Option<u32>, stdin: Option<ChildStdin>) -> Self {
        let views = (0..members)
            .map(|n| MemberView {
                name: crate::worker::member_name(&name, n),
                lease: "starting".to_owned(),
                ..MemberView::default()
            })
            .collect();
        Worker {
            name,
            pid,
            stdin,
            members: views,
            lease: "starting".to_owned(),
            ..Worker::default()
        }
    }

    /// Its session's token, the last it took.
    pub fn token(&self) -> Option<u64> {
        self.tokens.last().copied()
    }

    /// Stages `role` now: notes the leases it holds, whose deaths are to be shown.
    pub fn stage(&mut self, role: Role) {
        self.role = role;
        self.fault_tokens = FaultTokens {
            session: self.token(),
            members: self.members.iter().map(MemberView::token).collect(),
        };
    }

    /// Notes the items its members work on now: those its fault leaves behind.
    pub fn note_held(&mut self) {
        self.held = (self.members.iter().enumerate())
            .filter_map(|(n, m)| m.working_on.map(|id| (n, id)))
            .collect();
    }

    /// The fault staged on it and when, if `death` is the death of its session's
    /// token or of one of its members' tokens then (on a store without native
    /// sessions each member's lease dies on its own, beside the session's).
    pub fn fault_of(&self, death: &Death) -> Option<(&'static str, Instant)> {
        let of_fault = if death.session {
            death.name == self.name && Some(death.token) == self.fault_tokens.session
        } else {
            (self.members.iter().zip(&self.fault_tokens.members))
                .any(|(m, t)| m.name == death.name && *t == Some(death.token))
        };
        fault(self.role).filter(|_| of_fault)
    }
}

/// The stuck job: which member of which worker hangs on which item, and what
/// followed.
#[derive(Default)]
pub struct Stall {
    /// The worker asked to make a member hang.
    pub worker: usize,
    /// The member that hangs, on which item under which token, since when.
    pub hung: Option<(usize, u64, u64, Instant)>,
    /// When its watchdog released it (its `stalled` fact).
    pub stalled: Option<Instant>,
    /// Who claimed its item next (attempt 2 or more), and whether that one
    /// completed it.
    pub taken_by: Option<String>,
    pub redone: bool,
    /// Items the worker's other members completed while their fellow hung, and
    /// whether any of them (or the session) lost a lease meanwhile.
    pub others_done: u64,
    pub others_lost: bool,
}

impl Stall {
    /// The hung item, if a member hangs (or hung).
    pub fn item(&self) -> Option<u64> {
        self.hung.map(|(_, id, _, _)| id)
    }

    /// True while its member hangs and its watchdog has not released it yet.
    pub fn ongoing(&self) -> bool {
        self.hung.is_some() && self.stalled.is_none()
    }
}

/// The scheduled job: due `due` after its enqueue, by the store's clock.
pub struct Scheduled {
    pub id: u64,
    /// When the parent asked for it (just before the store's enqueue).
    pub enqueued: Instant,
    pub due: Duration,
    /// Its first claim: by whom, how long after its enqueue.
    pub claimed: Option<(String, Duration)>,
}

/// The job that fails on its first attempt, to be retried after its backoff.
pub struct Flaky {
    pub id: u64,
    /// Who failed it, and when.
    pub failed: Option<(String, Instant)>,
    /// Its first claim after the failure: by whom, on which attempt, how long after.
    pub again: Option<(String, u32, Duration)>,
}
