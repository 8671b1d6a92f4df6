//! A real PostgreSQL server for tests.
//!
//! [`shared`] gives every test of one test binary the same server (started once, on
//! first use); [`PgServer::start`] starts a private one that a fault test may restart
//! or kill. Each server is a fresh cluster (`initdb`) in a temporary folder on a free
//! loopback port, with:
//!
//! - password (SCRAM-SHA-256) authentication for every TCP connection, as the
//!   superuser `postgres` with a random password ([`PgServer::url`] carries it);
//! - TLS enabled (`ssl=on`, a self-signed certificate made with `openssl`), so
//!   `sslmode=require` works ([`PgServer::tls`] says whether it could be set up);
//! - `fsync=off` and friends: test data need not survive a power cut. The backend
//!   refuses such a server unless told it is accepted: the kit's URLs say
//!   `durability=relaxed`.
//!
//! When the process runs as root (as in CI containers), `initdb` and `postgres`
//! refuse to run; they are then started as the `postgres` OS user (created by the
//! Debian package), with the temporary folder handed to that user. Root removes the
//! folder afterwards.
//!
//! `LIVENESS_POSTGRES_URL` makes [`shared`] use an existing server instead (set
//! `LIVENESS_POSTGRES_TLS=1` when it accepts TLS). Private servers always need the
//! binaries.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::{find_binary, free_port, missing, with_query, Launcher, ServerProcess};

pub(crate) const INSTALL_HINT: &str = "apt-get install postgresql";
const READY_WITHIN: Duration = Duration::from_secs(30);

/// A PostgreSQL server the tests can connect to.
#[derive(Debug)]
pub struct PgServer {
    base_url: String,
    tls: bool,
    process: Option<ServerProcess>,
}

/// The test binary's shared server: started on first use (or taken from
/// `LIVENESS_POSTGRES_URL`) and stopped when the test process exits.
///
/// `None` (after one printed skip line) when PostgreSQL is not installed and
/// [`missing`] allows a skip (`LIVENESS_ALLOW_SKIP=1` outside CI);
/// otherwise a panic.
pub fn shared() -> Option<&'static PgServer> {
    static SHARED: OnceLock<Option<PgServer>> = OnceLock::new();
    let server = SHARED.get_or_init(|| {
        if let Ok(url) = std::env::var("LIVENESS_POSTGRES_URL") {
            let tls = matches!(std::env::var("LIVENESS_POSTGRES_TLS"), Ok(v) if v == "1");
            return Some(PgServer {
                base_url: url,
                tls,
                process: None,
            });
        }
        PgServer::start_inner()
    });
    match server {
        Some(s) => Some(s),
        None => missing("postgresql", INSTALL_HINT),
    }
}

pub(crate) struct Binaries {
    pub(crate) initdb: PathBuf,
    pub(crate) postgres: PathBuf,
}

pub(crate) fn binaries() -> Option<Binaries> {
    let mut dirs: Vec<String> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut versions: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        versions.sort();
        versions.reverse();
        for v in versions {
            dirs.push(v.join("bin").to_string_lossy().into_owned());
        }
    }
    dirs.push("/usr/local/bin".to_owned());
    dirs.push("/usr/local/pgsql/bin".to_owned());
    let dirs: Vec<&str> = dirs.iter().map(String::as_str).collect();
    // initdb and postgres must come from the same installation: look in the same dir.
    let initdb = find_binary("initdb", &dirs)?;
    let postgres = initdb
        .parent()
        .map(|d| d.join("postgres"))
        .filter(|p| p.is_file())
        .or_else(|| find_binary("postgres", &dirs))?;
    Some(Binaries { initdb, postgres })
}

/// The uid and gid to run the server as: `None` when not root (run as ourselves).
pub(crate) fn server_user() -> std::io::Result<Option<(u32, u32)>> {
    let id = |flag: &str, user: Option<&str>| -> std::io::Result<u32> {
        let mut cmd = Command::new("id");
        cmd.arg(flag);
        if let Some(u) = user {
            cmd.arg(u);
        }
        let out = cmd.output()?;
        if !out.status.success() {
            return Err(std::io::Error::other(format!(
                "`id {flag} {}` failed: {}",
                user.unwrap_or(""),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(std::io::Error::other)
    };
    if id("-u", None)? != 0 {
        return Ok(None);
    }
    Ok(Some((
        id("-u", Some("postgres"))?,
        id("-g", Some("postgres"))?,
    )))
}

pub(crate) fn chown_tree(path: &Path, owner: Option<(u32, u32)>) -> std::io::Result<()> {
    let Some((uid, gid)) = owner else {
        return Ok(());
    };
    std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
    if path.is_dir() {
        for entry in std::fs::read_dir(path)? {
            chown_tree(&entry?.path(), owner)?;
        }
    }
    Ok(())
}

pub(crate) fn as_user(cmd: &mut Command, owner: Option<(u32, u32)>) {
    if let Some((uid, gid)) = owner {
        use std::os::unix::process::CommandExt;
        cmd.uid(uid).gid(gid);
    }
}

/// Runs `cmd` and returns its standard output, or an error naming `what` with
/// everything it printed when it fails.
pub(crate) fn run(cmd: &mut Command, what: &str) -> std::io::Result<String> {
    let out = cmd.output()?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(std::io::Error::other(format!(
            "{what} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

/// Makes a cluster in `root/data` with `initdb` (as `owner`): superuser `postgres`
/// with the password in `root/pwfile`, trust on the socket, SCRAM over TCP.
pub(crate) fn initdb(initdb: &Path, root: &Path, owner: Option<(u32, u32)>) -> std::io::Result<()> {
    let mut cmd = Command::new(initdb);
    cmd.arg("-D")
        .arg(root.join("data"))
        .args(["-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync"])
        .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
        .arg(format!("--pwfile={}", root.join("pwfile").display()))
        .current_dir(root);
    as_user(&mut cmd, owner);
    run(&mut cmd, "initdb").map(drop)
}

/// `postgres` serving `dir/data` on 127.0.0.1:`port` (its socket in `dir`, which is
/// also its working folder); the caller adds the settings (`-c NAME=VALUE`).
pub(crate) fn server_command(postgres: &Path, dir: &Path, port: u16) -> Command {
    let mut cmd = Command::new(postgres);
    cmd.arg("-D")
        .arg(dir.join("data"))
        .arg("-p")
        .arg(port.to_string())
        .arg("-k")
        .arg(dir)
        .args(["-c", "listen_addresses=127.0.0.1"])
        .current_dir(dir);
    cmd
}

pub(crate) fn random_password() -> String {
    use std::hash::{BuildHasher, RandomState};
    // std's randomly keyed hasher: a fresh random value per call, no clock involved.
    let random = RandomState::new().hash_one(std::process::id());
    format!("pw{random:016x}")
}

/// Makes a CA-signed certificate for 127.0.0.1 in `dir`; false when openssl is
/// missing or fails (the server then runs without TLS).
fn make_certificate(dir: &Path) -> bool {
    find_binary("openssl", &[]).is_some() && crate::tls::make_certificates(dir).is_ok()
}

impl PgServer {
    /// Starts a private server (for tests that restart or kill it).
    ///
    /// `None` (after a printed skip line) when PostgreSQL is not installed and
    /// [`missing`] allows a skip; otherwise, or when the server fails
    /// to start, a panic.
    pub fn start() -> Option<PgServer> {
        match PgServer::start_inner() {
            Some(s) => Some(s),
            None => missing("postgresql", INSTALL_HINT),
        }
    }

    fn start_inner() -> Option<PgServer> {
        let bins = binaries()?;
        match PgServer::boot(&bins) {
            Ok(s) => Some(s),
            Err(e) => panic!("starting postgresql failed: {e}"),
        }
    }

    fn boot(bins: &Binaries) -> std::io::Result<PgServer> {
        let owner = server_user()?;
        let dir = tempfile::Builder::new().prefix("liveness-pg-").tempdir()?;
        let root = dir.path().to_path_buf();
        let password = random_password();
        std::fs::write(root.join("pwfile"), format!("{password}\n"))?;
        let tls = make_certificate(&root);
        if tls {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(
                root.join("server.key"),
                std::fs::Permissions::from_mode(0o600),
            )?;
        }
        chown_tree(&root, owner)?;

        initdb(&bins.initdb, &root, owner)?;

        let postgres = bins.postgres.clone();
        let launcher: Launcher = Box::new(move |dir: &Path, port: u16| {
            let mut cmd = server_command(&postgres, dir, port);
            cmd.args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
                .args(["-c", "full_page_writes=off", "-c", "max_connections=400"]);
            if tls {
                cmd.args(["-c", "ssl=on"])
                    .arg("-c")
                    .arg(format!(
                        "ssl_cert_file={}",
                        dir.join("server.pem").display()
                    ))
                    .arg("-c")
                    .arg(format!("ssl_key_file={}", dir.join("server.key").display()));
            }
            as_user(&mut cmd, owner);
            cmd
        });

        // A free port may, rarely, be taken between probing and binding; the start then
        // fails loudly with the server's log.
        let port = free_port()?;
        let process = ServerProcess::start("postgres", dir, port, launcher, READY_WITHIN)?;
        Ok(PgServer {
            // fsync=off and friends (speed): the backend refuses such a server unless
            // the URL says this is accepted.
            base_url: format!(
                "postgres://postgres:{password}@127.0.0.1:{port}/postgres?durability=relaxed"
            ),
            tls,
            process: Some(process),
        })
    }

    /// A connection URL for the superuser (password included), database `postgres`;
    /// for a server this kit started, with the query string `durability=relaxed`
    /// (it runs with `fsync=off` and `synchronous_commit=off`, which the backend
    /// refuses otherwise). Add parameters with [`PgServer::url_with`].
    pub fn url(&self) -> &str {
        &self.base_url
    }

    /// The URL with a query string appended (`ns=...&sslmode=...`).
    pub fn url_with(&self, query: &str) -> String {
        with_query(&self.base_url, query)
    }

    /// True when the server accepts TLS connections (`sslmode=require`).
    pub fn tls(&self) -> bool {
        self.tls
    }

    /// The server process, for fault tests (`None` for a server from the environment).
    pub fn process(&mut self) -> Option<&mut ServerProcess> {
        self.process.as_mut()
    }

    /// Stops the server with a fast shutdown (SIGINT: sessions are terminated,
    /// nothing is lost) and starts it again on the same port and data.
    pub fn restart(&mut self) -> std::io::Result<()> {
        let Some(process) = self.process.as_mut() else {
            return Err(std::io::Error::other("cannot restart an external server"));
        };
        if let Some(pid) = process.pid() {
            let _ = Command::new("kill")
                .arg("-INT")
                .arg(pid.to_string())
                .status();
            let pidfile = process.dir().join("data").join("postmaster.pid");
            let until = std::time::Instant::now() + Duration::from_secs(20);
            while pidfile.exists() && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        process.restart(READY_WITHIN)
    }
}
