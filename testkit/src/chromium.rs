//! A headless Chromium for browser tests: `chromedriver` (Debian's `chromium-driver`)
//! on a free loopback port, and the arguments that start Chromium headless with a
//! profile in a temporary folder. Drive it with any WebDriver client.
//!
//! ```no_run
//! let Some(driver) = liveness_testkit::chromium::ChromeDriver::start() else {
//!     return; // SKIP printed (outside CI, with LIVENESS_ALLOW_SKIP=1)
//! };
//! let url = driver.url(); // http://127.0.0.1:PORT
//! let args = driver.chrome_args(); // --headless=new, --no-sandbox, ...
//! # let _ = (url, args);
//! ```

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Where Debian installs them (also looked up on PATH).
const CHROMIUM: &[&str] = &["chromium", "chromium-browser", "google-chrome"];
const DRIVER: &str = "chromedriver";
const INSTALL_HINT: &str = "install the Debian packages chromium and chromium-driver";

/// A running `chromedriver`, killed (and its profile folder removed) on drop.
pub struct ChromeDriver {
    child: Child,
    port: u16,
    browser: PathBuf,
    profile: tempfile::TempDir,
}

impl ChromeDriver {
    /// Starts `chromedriver` on a free loopback port once it and a Chromium are found
    /// and run; otherwise reports them [`missing`](crate::missing) (a failure under
    /// CI, a `SKIP` line with `LIVENESS_ALLOW_SKIP=1`).
    pub fn start() -> Option<ChromeDriver> {
        let Some(driver) = crate::find_binary(DRIVER, &["/usr/lib/chromium"]) else {
            return crate::missing("chromedriver", INSTALL_HINT);
        };
        let Some(browser) = CHROMIUM
            .iter()
            .find_map(|name| crate::find_binary(name, &["/usr/lib/chromium"]))
        else {
            return crate::missing("chromium", INSTALL_HINT);
        };
        let runs = Command::new(&driver)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !runs {
            return crate::missing("chromedriver (it does not run)", INSTALL_HINT);
        }
        let mut profile = match tempfile::tempdir() {
            Ok(dir) => dir,
            Err(e) => return crate::missing("a temporary folder", &e.to_string()),
        };
        for _ in 0..3 {
            let Ok(port) = crate::free_port() else {
                continue;
            };
            let Ok(child) = Command::new(&driver)
                .arg(format!("--port={port}"))
                .arg("--allowed-ips=127.0.0.1")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
            else {
                break;
            };
            let mut started = ChromeDriver {
                child,
                port,
                browser: browser.clone(),
                profile,
            };
            if crate::wait_for_port(port, Duration::from_secs(20)) {
                return Some(started);
            }
            let _ = started.child.kill();
            let _ = started.child.wait();
            profile = std::mem::replace(&mut started.profile, tempfile::tempdir().ok()?);
        }
        crate::missing("chromedriver (it did not start listening)", INSTALL_HINT)
    }

    /// The WebDriver endpoint: `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The Chromium binary found.
    pub fn browser(&self) -> &std::path::Path {
        &self.browser
    }

    /// Chromium's arguments for a test: headless, no sandbox (tests may run as root),
    /// no GPU, a fresh profile in a temporary folder, a fixed window size, and no
    /// traffic of its own to any outside host.
    pub fn chrome_args(&self) -> Vec<String> {
        vec![
            "--headless=new".into(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--window-size=1400,1000".into(),
            format!("--user-data-dir={}", self.profile.path().display()),
        ]
    }
}

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
