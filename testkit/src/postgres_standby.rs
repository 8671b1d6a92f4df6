//! A PostgreSQL primary with one streaming standby, for failover tests, behind a
//! switchable loopback forwarder ([`Proxy`]) that plays the virtual IP.
//!
//! The primary is a fresh cluster (`initdb`, password authentication, as in
//! [`crate::postgres`]) with `wal_level=replica`; the standby is a
//! `pg_basebackup -R -X stream` of it, streaming on another loopback port. With
//! [`Replication::Synchronous`] the primary names it in `synchronous_standby_names`
//! (`synchronous_commit=on`): a commit is acknowledged only once the standby flushed
//! it. With [`Replication::Asynchronous`] the primary acknowledges on its own flush.
//!
//! [`PgPair::promote`] runs `pg_ctl promote` on the standby and waits until it accepts
//! writes; [`PgPair::proxy`] is then switched to it by the test. When the process
//! runs as root, every server runs as the `postgres` OS user (see [`crate::postgres`]).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::postgres::{
    as_user, binaries, chown_tree, initdb, random_password, run, server_command, server_user,
    INSTALL_HINT,
};
use crate::proxy::Proxy;
use crate::{free_port, missing, Launcher, ServerProcess};

const READY_WITHIN: Duration = Duration::from_secs(30);

/// How the primary waits for its standby.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replication {
    /// `synchronous_standby_names='*'`, `synchronous_commit=on`: a commit returns once
    /// the standby has flushed its WAL.
    Synchronous,
    /// No synchronous standby: a commit returns once the primary flushed it; the
    /// standby follows a little behind.
    Asynchronous,
}

/// A primary, its streaming standby, and a forwarder pointing at the primary.
#[derive(Debug)]
pub struct PgPair {
    primary: ServerProcess,
    standby: ServerProcess,
    proxy: Proxy,
    password: String,
    pg_ctl: std::path::PathBuf,
    psql: std::path::PathBuf,
    owner: Option<(u32, u32)>,
}

/// `psql` against the server on `port` as `postgres` with `password`: unaligned,
/// tuples-only output, a 2 s connect timeout; the caller adds `-c SQL`.
fn psql_command(psql: &Path, port: u16, password: &str) -> Command {
    let mut cmd = Command::new(psql);
    cmd.args([
        "-h",
        "127.0.0.1",
        "-U",
        "postgres",
        "-d",
        "postgres",
        "-XAtq",
    ])
    .arg("-p")
    .arg(port.to_string())
    .env("PGPASSWORD", password)
    .env("PGCONNECT_TIMEOUT", "2");
    cmd
}

impl PgPair {
    /// Starts the primary and the standby, waits until the standby streams (and, for
    /// [`Replication::Synchronous`], is the synchronous one), and starts the forwarder
    /// on the primary.
    ///
    /// `None` (after a SKIP line) when PostgreSQL is not installed and [`missing`]
    /// allows a skip; a panic when it is but the pair does not start.
    pub fn start(replication: Replication) -> Option<PgPair> {
        let Some(bins) = binaries() else {
            return missing("postgresql", INSTALL_HINT);
        };
        // The tools of the same installation as initdb (PATH may hold a symlink to it).
        let initdb = std::fs::canonicalize(&bins.initdb).unwrap_or_else(|_| bins.initdb.clone());
        let bin_dir = initdb.parent().map(Path::to_path_buf).unwrap_or_default();
        for tool in ["pg_basebackup", "pg_ctl", "psql"] {
            if !bin_dir.join(tool).is_file() {
                return missing(tool, INSTALL_HINT);
            }
        }
        match boot(&bins, &bin_dir, replication) {
            Ok(pair) => Some(pair),
            Err(e) => panic!("starting a postgresql primary and standby failed: {e}"),
        }
    }

    /// The URL of the forwarder (what clients use: it follows the failover once the
    /// test switches it), superuser `postgres`, database `postgres`, with the query
    /// string `durability=relaxed`: the pair runs with `fsync=off` (speed), which the
    /// backend refuses otherwise. Append parameters with `&`.
    pub fn url(&self) -> String {
        self.url_of(self.proxy.port())
    }

    /// The URL of the primary itself, bypassing the forwarder.
    pub fn primary_url(&self) -> String {
        self.url_of(self.primary.port())
    }

    /// The URL of the standby itself, bypassing the forwarder.
    pub fn standby_url(&self) -> String {
        self.url_of(self.standby.port())
    }

    /// The URL naming both servers, primary first, as a host list
    /// (`127.0.0.1:P,127.0.0.1:S`): a client that follows a promotion by itself, with
    /// no forwarder in between.
    pub fn host_list_url(&self) -> String {
        format!(
            "postgres://postgres:{}@127.0.0.1:{},127.0.0.1:{}/postgres?durability=relaxed",
            self.password,
            self.primary.port(),
            self.standby.port()
        )
    }

    fn url_of(&self, port: u16) -> String {
        format!(
            "postgres://postgres:{}@127.0.0.1:{port}/postgres?durability=relaxed",
            self.password
        )
    }

    /// The forwarder; [`Proxy::switch`] it to [`PgPair::standby_port`] at a failover.
    pub fn proxy(&self) -> &Proxy {
        &self.proxy
    }

    /// The primary's port.
    pub fn primary_port(&self) -> u16 {
        self.primary.port()
    }

    /// The standby's port.
    pub fn standby_port(&self) -> u16 {
        self.standby.port()
    }

    /// Kills the primary (SIGKILL of the postmaster; its sessions die with it as soon
    /// as they notice, and the forwarder's open connections to it are cut by the
    /// test's switch).
    pub fn kill_primary(&mut self) {
        self.primary.kill();
    }

    /// Runs one SQL statement with `psql` against `port` and returns its unaligned,
    /// tuples-only output.
    pub fn psql(&self, port: u16, sql: &str) -> std::io::Result<String> {
        let mut cmd = psql_command(&self.psql, port, &self.password);
        cmd.arg("-c").arg(sql);
        run(&mut cmd, "psql").map(|s| s.trim().to_owned())
    }

    /// Promotes the standby (`pg_ctl promote`, which waits until it leaves recovery)
    /// and waits until it accepts a write.
    pub fn promote(&self) -> std::io::Result<()> {
        let mut cmd = Command::new(&self.pg_ctl);
        cmd.arg("promote")
            .arg("-D")
            .arg(self.standby.dir().join("data"))
            .args(["-w", "-t", "30"]);
        as_user(&mut cmd, self.owner);
        run(&mut cmd, "pg_ctl promote")?;
        let until = Instant::now() + READY_WITHIN;
        loop {
            match self.psql(self.standby.port(), "SELECT pg_is_in_recovery()") {
                Ok(s) if s == "f" => return Ok(()),
                Ok(_) | Err(_) if Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(s) => return Err(std::io::Error::other(format!("still in recovery: {s}"))),
                Err(e) => return Err(e),
            }
        }
    }
}

fn wait_ready(psql: &Path, port: u16, password: &str) -> std::io::Result<()> {
    let until = Instant::now() + READY_WITHIN;
    loop {
        let mut cmd = psql_command(psql, port, password);
        cmd.args(["-c", "SELECT 1"]);
        match run(&mut cmd, "psql") {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() > until => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn launcher(
    postgres: &Path,
    owner: Option<(u32, u32)>,
    replication: Option<Replication>,
) -> Launcher {
    let postgres = postgres.to_path_buf();
    Box::new(move |dir: &Path, port: u16| {
        let mut cmd = server_command(&postgres, dir, port);
        // No power cuts here: skipping fsync keeps the tests fast; what a failover
        // loses is decided by replication, which stays as configured.
        cmd.args(["-c", "fsync=off", "-c", "full_page_writes=off"])
            .args(["-c", "synchronous_commit=on", "-c", "max_connections=400"])
            .args(["-c", "wal_level=replica", "-c", "max_wal_senders=5"])
            .args(["-c", "hot_standby=on"]);
        match replication {
            Some(Replication::Synchronous) => {
                cmd.args(["-c", "synchronous_standby_names=*"]);
            }
            Some(Replication::Asynchronous) | None => {
                cmd.args(["-c", "synchronous_standby_names="]);
            }
        }
        as_user(&mut cmd, owner);
        cmd
    })
}

fn boot(
    bins: &crate::postgres::Binaries,
    bin_dir: &Path,
    replication: Replication,
) -> std::io::Result<PgPair> {
    let owner = server_user()?;
    let password = random_password();

    let primary_dir = tempfile::Builder::new()
        .prefix("liveness-pg-primary-")
        .tempdir()?;
    let root = primary_dir.path().to_path_buf();
    std::fs::write(root.join("pwfile"), format!("{password}\n"))?;
    chown_tree(&root, owner)?;
    initdb(&bins.initdb, &root, owner)?;
    let primary_port = free_port()?;
    let primary = ServerProcess::start(
        "postgres primary",
        primary_dir,
        primary_port,
        launcher(&bins.postgres, owner, Some(replication)),
        READY_WITHIN,
    )?;

    // The port listens before the server accepts sessions ("the database system is
    // starting up"): wait until it answers a query.
    wait_ready(&bin_dir.join("psql"), primary_port, &password)?;

    let standby_dir = tempfile::Builder::new()
        .prefix("liveness-pg-standby-")
        .tempdir()?;
    chown_tree(standby_dir.path(), owner)?;
    let mut backup = Command::new(bin_dir.join("pg_basebackup"));
    backup
        .args([
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
        ])
        .arg("-p")
        .arg(primary_port.to_string())
        .arg("-D")
        .arg(standby_dir.path().join("data"))
        .env("PGPASSWORD", &password)
        .current_dir(standby_dir.path());
    as_user(&mut backup, owner);
    run(&mut backup, "pg_basebackup")?;
    let standby_port = free_port()?;
    let standby = ServerProcess::start(
        "postgres standby",
        standby_dir,
        standby_port,
        launcher(&bins.postgres, owner, None),
        READY_WITHIN,
    )?;

    let pair = PgPair {
        primary,
        standby,
        proxy: Proxy::start(primary_port)?,
        password,
        pg_ctl: bin_dir.join("pg_ctl"),
        psql: bin_dir.join("psql"),
        owner,
    };
    // The standby streams, and (when asked) as the synchronous standby.
    let want = match replication {
        Replication::Synchronous => "sync",
        Replication::Asynchronous => "async",
    };
    let until = Instant::now() + READY_WITHIN;
    loop {
        let state = pair
            .psql(
                primary_port,
                "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'",
            )
            .unwrap_or_default();
        if state == want {
            return Ok(pair);
        }
        if Instant::now() > until {
            return Err(std::io::Error::other(format!(
                "the standby did not stream as {want} within {READY_WITHIN:?} (state: {state:?})"
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
