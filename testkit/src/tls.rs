//! Test certificates made with `openssl`: a CA and a server certificate it signed,
//! for `127.0.0.1` and `localhost` (rustls refuses a self-signed CA certificate as a
//! server's own, so the two are separate).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The certificate files of a TLS server, all in one folder: `ca.pem`,
/// `server.pem`, `server.key`.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The self-signed CA certificate (PEM) clients must trust.
    pub ca: PathBuf,
    /// The server certificate (PEM), for `127.0.0.1` and `localhost`.
    pub cert: PathBuf,
    /// The server's private key (PEM).
    pub key: PathBuf,
}

/// Makes a self-signed EC CA (`ca.pem`) and a server certificate it signed
/// (`server.pem`, key `server.key`) for 127.0.0.1 and localhost in `dir`.
pub fn make_certificates(dir: &Path) -> std::io::Result<TlsFiles> {
    let openssl = |args: &[&str]| -> std::io::Result<()> {
        let out = Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .stdin(Stdio::null())
            .output()?;
        if out.status.success() {
            Ok(())
        } else {
            Err(std::io::Error::other(format!(
                "openssl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            )))
        }
    };
    std::fs::write(
        dir.join("ca.cnf"),
        "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n\
         subjectKeyIdentifier=hash\n",
    )?;
    std::fs::write(
        dir.join("server.cnf"),
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n\
         extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )?;
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.csr",
        "-subj",
        "/CN=liveness test CA",
    ]);
    openssl(&ca)?;
    openssl(&[
        "x509", "-req", "-in", "ca.csr", "-signkey", "ca.key", "-out", "ca.pem", "-days", "7",
        "-extfile", "ca.cnf",
    ])?;
    let mut server = vec!["req"];
    server.extend(ec);
    server.extend([
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    openssl(&server)?;
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "7",
        "-extfile",
        "server.cnf",
    ])?;
    Ok(TlsFiles {
        ca: dir.join("ca.pem"),
        cert: dir.join("server.pem"),
        key: dir.join("server.key"),
    })
}
