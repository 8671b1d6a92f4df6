//! Configurations as data (feature `serde`): every configuration reads from and writes
//! to any serde format (TOML, YAML, JSON), so a deployment keeps its timings in its
//! own configuration file.
//!
//! - Each configuration has the shape of its struct: a `MemberConfig` is
//!   `{ name, holder, heartbeat = { ttl, renew_every, safety_margin }, rejoin,
//!   shared_batcher, progress_timeout }`, a `WorkerConfig` nests its `member`.
//! - Durations are written as `humantime` text (`"10s"`, `"1m 30s"`, `"250ms"`).
//! - Only `name` and `heartbeat.ttl` (`name`, `holder` and `heartbeat.ttl` for an
//!   election) are required; every other field takes the default its constructor
//!   gives (`renew_every` and `safety_margin` derived from the ttl).
//! - Reading goes through the constructors and the configuration's `validate`, so a
//!   file can only give what code could build: a bad name, a ttl out of range, a
//!   renewal that leaves no time before the deadline, or an unknown field are errors
//!   that name the setting.
//! - What is not data stays out: the event bus, the clock and an explicit batcher
//!   take their defaults when read, and are not written.
//!
//! ```
//! # #[cfg(feature = "serde")] {
//! use liveness_core::{MemberConfig, WorkerConfig};
//!
//! let json = r#"{ "member": { "name": "resize-1", "heartbeat": { "ttl": "10s" } },
//!                 "concurrency": 16 }"#;
//! let config: WorkerConfig = serde_json::from_str(json).unwrap();
//! assert_eq!(config.concurrency, 16);
//! assert_eq!(config.member.heartbeat.renew_every.as_secs_f64().round(), 3.0);
//!
//! let bad = r#"{ "name": "m", "heartbeat": { "ttl": "0s" } }"#;
//! assert!(serde_json::from_str::<MemberConfig>(bad).is_err());
//! # }
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::checker::CheckerConfig;
use crate::election::ElectionConfig;
use crate::error::Error;
use crate::heartbeat::HeartbeatConfig;
use crate::item::{EnqueueOptions, RequestId, DEFAULT_MAX_ATTEMPTS};
use crate::member::MemberConfig;
use crate::queue_name::QueueName;
use crate::session::SessionConfig;
use crate::types::{HolderId, Space, Ttl};
use crate::worker::WorkerConfig;

fn yes() -> bool {
    true
}

/// [`HeartbeatConfig`] as written.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatForm {
    #[serde(with = "humantime_serde")]
    ttl: Duration,
    #[serde(default, with = "humantime_serde")]
    renew_every: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    safety_margin: Option<Duration>,
}

impl TryFrom<HeartbeatForm> for HeartbeatConfig {
    type Error = Error;

    fn try_from(form: HeartbeatForm) -> Result<Self, Error> {
        let mut config = HeartbeatConfig::new(Ttl::new(form.ttl)?);
        if let Some(every) = form.renew_every {
            config = config.renew_every(every);
        }
        if let Some(margin) = form.safety_margin {
            config = config.safety_margin(margin);
        }
        config.validate()?;
        Ok(config)
    }
}

impl From<HeartbeatConfig> for HeartbeatForm {
    fn from(config: HeartbeatConfig) -> Self {
        HeartbeatForm {
            ttl: config.ttl.duration(),
            renew_every: Some(config.renew_every),
            safety_margin: Some(config.safety_margin),
        }
    }
}

/// [`MemberConfig`] as written.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberForm {
    name: String,
    #[serde(default)]
    holder: Option<String>,
    heartbeat: HeartbeatConfig,
    #[serde(default = "yes")]
    rejoin: bool,
    #[serde(default = "yes")]
    shared_batcher: bool,
    #[serde(default, with = "humantime_serde")]
    progress_timeout: Option<Duration>,
}

impl TryFrom<MemberForm> for MemberConfig {
    type Error = Error;

    fn try_from(form: MemberForm) -> Result<Self, Error> {
        let mut config = MemberConfig::new(&form.name, form.heartbeat.ttl)?.rejoin(form.rejoin);
        config.heartbeat = form.heartbeat;
        config.shared_batcher = form.shared_batcher;
        if let Some(holder) = form.holder {
            config = config.holder(HolderId::new(&holder)?);
        }
        if let Some(timeout) = form.progress_timeout {
            config = config.progress_timeout(timeout);
        }
        config.validate()?;
        Ok(config)
    }
}

impl From<MemberConfig> for MemberForm {
    fn from(config: MemberConfig) -> Self {
        MemberForm {
            name: config.name.to_string(),
            holder: Some(config.holder.to_string()),
            heartbeat: config.heartbeat,
            rejoin: config.rejoin,
            shared_batcher: config.shared_batcher,
            progress_timeout: config.progress_timeout,
        }
    }
}

/// [`SessionConfig`] as written.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionForm {
    name: String,
    #[serde(default)]
    holder: Option<String>,
    heartbeat: HeartbeatConfig,
    #[serde(default = "yes")]
    reopen: bool,
}

impl TryFrom<SessionForm> for SessionConfig {
    type Error = Error;

    fn try_from(form: SessionForm) -> Result<Self, Error> {
        let mut config = SessionConfig::new(&form.name, form.heartbeat.ttl)?.reopen(form.reopen);
        config.heartbeat = form.heartbeat;
        if let Some(holder) = form.holder {
            config = config.holder(HolderId::new(&holder)?);
        }
        Ok(config)
    }
}

impl From<SessionConfig> for SessionForm {
    fn from(config: SessionConfig) -> Self {
        SessionForm {
            name: config.name.to_string(),
            holder: Some(config.holder.to_string()),
            heartbeat: config.heartbeat,
            reopen: config.reopen,
        }
    }
}

/// [`ElectionConfig`] as written.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ElectionForm {
    name: String,
    holder: String,
    heartbeat: HeartbeatConfig,
}

impl TryFrom<ElectionForm> for ElectionConfig {
    type Error = Error;

    fn try_from(form: ElectionForm) -> Result<Self, Error> {
        let mut config = ElectionConfig::new(&form.name, &form.holder, form.heartbeat.ttl)?;
        config.heartbeat = form.heartbeat;
        Ok(config)
    }
}

impl From<ElectionConfig> for ElectionForm {
    fn from(config: ElectionConfig) -> Self {
        ElectionForm {
            name: config.name.to_string(),
            holder: config.holder.to_string(),
            heartbeat: config.heartbeat,
        }
    }
}

/// [`CheckerConfig`] as written.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckerForm {
    #[serde(default)]
    space: Option<String>,
    #[serde(default = "yes")]
    sessions: bool,
    #[serde(default, with = "humantime_serde")]
    check_every: Option<Duration>,
    #[serde(default)]
    batch: Option<usize>,
    #[serde(default)]
    elected: Option<ElectionConfig>,
    #[serde(default, with = "humantime_serde")]
    depth_every: Option<Duration>,
}

impl TryFrom<CheckerForm> for CheckerConfig {
    type Error = Error;

    fn try_from(form: CheckerForm) -> Result<Self, Error> {
        let mut config = CheckerConfig::default().sessions(form.sessions);
        if let Some(space) = form.space {
            config = config.space(Space::new(&space)?);
        }
        if let Some(every) = form.check_every {
            config = config.check_every(every);
        }
        if let Some(batch) = form.batch {
            config = config.batch(batch);
        }
        if let Some(election) = form.elected {
            config = config.elected(election);
        }
        if let Some(every) = form.depth_every {
            config = config.depth_every(every);
        }
        config.validate()?;
        Ok(config)
    }
}

impl From<CheckerConfig> for CheckerForm {
    fn from(config: CheckerConfig) -> Self {
        CheckerForm {
            space: Some(config.space.to_string()),
            sessions: config.sessions,
            check_every: Some(config.check_every),
            batch: Some(config.batch),
            elected: config.elected,
            depth_every: Some(config.depth_every),
        }
    }
}

/// [`WorkerConfig`] as written.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerForm {
    member: MemberConfig,
    #[serde(default)]
    concurrency: Option<usize>,
    #[serde(default, with = "humantime_serde")]
    poll: Option<Duration>,
    #[serde(default = "yes")]
    checker: bool,
    #[serde(default, with = "humantime_serde")]
    retry_first: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    retry_max: Option<Duration>,
    #[serde(default)]
    queues: Option<Vec<QueueName>>,
}

impl TryFrom<WorkerForm> for WorkerConfig {
    type Error = Error;

    fn try_from(form: WorkerForm) -> Result<Self, Error> {
        let ttl = form.member.heartbeat.ttl;
        let mut config = WorkerConfig::new(form.member.name.as_str(), ttl)?.checker(form.checker);
        config.member = form.member;
        if let Some(n) = form.concurrency {
            config = config.concurrency(n);
        }
        if let Some(poll) = form.poll {
            config = config.poll(poll);
        }
        let first = form.retry_first.unwrap_or(config.retry_first);
        let max = form.retry_max.unwrap_or(config.retry_max);
        config = config.retry_backoff(first, max);
        if let Some(queues) = form.queues {
            config = config.queues(queues);
        }
        config.validate()?;
        Ok(config)
    }
}

impl From<WorkerConfig> for WorkerForm {
    fn from(config: WorkerConfig) -> Self {
        WorkerForm {
            member: config.member,
            concurrency: Some(config.concurrency),
            poll: Some(config.poll),
            checker: config.checker,
            retry_first: Some(config.retry_first),
            retry_max: Some(config.retry_max),
            queues: Some(config.queues),
        }
    }
}

/// [`EnqueueOptions`] as written: the key is the idempotency key's number.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnqueueForm {
    #[serde(default = "default_attempts")]
    max_attempts: u32,
    #[serde(default)]
    key: Option<u128>,
    #[serde(default, with = "humantime_serde")]
    delay: Duration,
    #[serde(default)]
    queue: QueueName,
}

fn default_attempts() -> u32 {
    DEFAULT_MAX_ATTEMPTS
}

impl TryFrom<EnqueueForm> for EnqueueOptions {
    type Error = Error;

    fn try_from(form: EnqueueForm) -> Result<Self, Error> {
        let mut options = EnqueueOptions::default()
            .max_attempts(form.max_attempts)
            .delay(form.delay)
            .queue(form.queue);
        if let Some(key) = form.key {
            options = options.key(RequestId(key));
        }
        options.validate(&[], 0)?;
        Ok(options)
    }
}

impl From<EnqueueOptions> for EnqueueForm {
    fn from(options: EnqueueOptions) -> Self {
        EnqueueForm {
            max_attempts: options.max_attempts,
            key: options.key.map(|k| k.0),
            delay: options.delay,
            queue: options.queue,
        }
    }
}
