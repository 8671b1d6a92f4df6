//! The dashboard of `liveness check --http ADDR`: its flags, and its mounting next to
//! `/metrics` and `/health` on the same listener (see the `liveness-dashboard` crate).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use liveness::{Space, Store};
use liveness_dashboard::{redact_url, Actions, CheckerSource, Dashboard, Deferred, Options};

use crate::Failure;

/// The environment variable that may carry the dashboard's access token.
const TOKEN_ENV: &str = "LIVENESS_DASHBOARD_TOKEN";

/// The dashboard's flags, on `liveness check`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct DashboardArgs {
    /// Let the dashboard retry dead letters. Needs an access token (from
    /// --access-token-file, or the LIVENESS_DASHBOARD_TOKEN variable), which the
    /// page sends with every action; without this flag the dashboard is read-only.
    #[arg(long, requires = "http")]
    pub allow_actions: bool,
    /// A file whose first line is the dashboard's access token.
    #[arg(long, value_name = "PATH", requires = "allow_actions")]
    pub access_token_file: Option<PathBuf>,
}

impl DashboardArgs {
    /// The actions the dashboard obeys: none unless `--allow-actions` and a token.
    fn actions(&self) -> Result<Actions, Failure> {
        if !self.allow_actions {
            return Ok(Actions::Off);
        }
        let token = match &self.access_token_file {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|e| {
                    Failure::Input(format!(
                        "cannot read --access-token-file {}: {e}",
                        path.display()
                    ))
                })?
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .to_string(),
            None => std::env::var(TOKEN_ENV)
                .unwrap_or_default()
                .trim()
                .to_string(),
        };
        if token.len() < 8 {
            return Err(Failure::Input(format!(
                "--allow-actions needs an access token of at least 8 characters, from \
                 --access-token-file or {TOKEN_ENV}"
            )));
        }
        Ok(Actions::Token(token))
    }
}

/// Parses `--http`: `HOST:PORT`, or a bare `PORT` on the loopback address.
pub(crate) fn parse_http_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    if let Some(port) = s.strip_prefix("localhost:") {
        let port = port.parse::<u16>().map_err(|e| format!("{s}: {e}"))?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    s.parse()
        .map_err(|_| format!("{s}: expected PORT (on 127.0.0.1) or HOST:PORT"))
}

/// The dashboard, mounted on the listener before the store is connected.
pub(crate) struct Mount {
    later: Deferred,
    actions: Actions,
    checker: Arc<dyn CheckerSource>,
    /// The host names it answers to: the loopback names when bound to loopback.
    hosts: Vec<String>,
}

impl Mount {
    /// Checks the flags (a missing token is bad input) and makes the router the
    /// listener serves for every path but `/metrics` and `/health`.
    pub(crate) fn new(
        addr: SocketAddr,
        args: &DashboardArgs,
        checker: Arc<dyn CheckerSource>,
    ) -> Result<(Mount, axum::Router), Failure> {
        let later = Deferred::default();
        let router = later.router();
        let mount = Mount {
            later,
            actions: args.actions()?,
            checker,
            hosts: liveness_dashboard::loopback_hosts(addr),
        };
        Ok((mount, router))
    }

    /// Gives the dashboard its store, once connected.
    pub(crate) fn connect(
        &self,
        store: Arc<dyn Store>,
        url: &str,
        space: &str,
    ) -> Result<(), Failure> {
        let options = Options {
            space: Space::new(space)?,
            actions: self.actions.clone(),
            store_description: redact_url(url),
            hosts: self.hosts.clone(),
            ..Options::default()
        };
        let router = Dashboard::new(store, options)
            .checker(self.checker.clone())
            .router();
        self.later.set(router);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_port_binds_the_loopback_address() {
        assert_eq!(
            parse_http_addr("9464").unwrap().to_string(),
            "127.0.0.1:9464"
        );
        assert_eq!(
            parse_http_addr("localhost:9464").unwrap().to_string(),
            "127.0.0.1:9464"
        );
        assert_eq!(
            parse_http_addr("0.0.0.0:80").unwrap().to_string(),
            "0.0.0.0:80"
        );
        assert!(parse_http_addr("nowhere").is_err());
    }
}
