//! TLS for the backends (`https://`, `grpcs://`): rustls with the ring provider, the server
//! checked against the system's CA certificates or, with `--ca-file`, against that file's
//! only, and, with `--client-cert` and `--client-key`, the agent shown to the server by its
//! own certificate (mutual TLS). Both transports use one configuration: HTTP/1.1 through rustls's blocking stream,
//! gRPC through tokio-rustls, which offers `h2` by ALPN.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail};
use rustls::client::ResolvesClientCert;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, SignatureScheme};

pub use crate::config::agent::ClientCert;

/// A client configuration: whom to trust, and the protocols offered.
#[derive(Debug, Clone)]
pub struct Tls {
    config: Arc<ClientConfig>,
    /// Without a client certificate: what notices a server asking for one.
    unanswered: Option<Arc<NoClientCert>>,
}

/// The client "certificate resolver" of a configuration without a certificate: it gives
/// none, and remembers that a server asked. A server that requires one ends the connection
/// after the handshake, with an alert the client may or may not read before its own write
/// fails (a broken pipe, a closed stream): the request says why either way.
#[derive(Debug, Default)]
struct NoClientCert {
    asked: AtomicBool,
}

impl ResolvesClientCert for NoClientCert {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        self.asked.store(true, Ordering::Relaxed);
        None
    }

    fn has_certs(&self) -> bool {
        false
    }
}

impl Tls {
    /// Trusts the certificates of `ca_file` (PEM) if given, else the system's; shows
    /// `client`'s certificate to a server that asks for one.
    pub fn new(ca_file: Option<&Path>, client: Option<&ClientCert>) -> Result<Tls> {
        let roots = match ca_file {
            Some(path) => roots_of(path)?,
            None => system_roots()?,
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("no TLS protocol version")?
            .with_root_certificates(roots);
        let unanswered = client.is_none().then(|| Arc::new(NoClientCert::default()));
        let mut config = match (client, &unanswered) {
            (None, Some(notice)) => builder.with_client_cert_resolver(notice.clone()),
            (None, None) => builder.with_no_client_auth(),
            (Some(c), _) => {
                let (chain, key) = (chain_of(&c.cert)?, key_of(&c.key)?);
                builder.with_client_auth_cert(chain, key).with_context(|| {
                    format!(
                        "the client certificate `{}` and key `{}` cannot be used together",
                        c.cert.display(),
                        c.key.display()
                    )
                })?
            }
        };
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Tls {
            config: Arc::new(config),
            unanswered,
        })
    }

    /// Forgets that a server asked for a client certificate: each attempt says only what
    /// its own servers asked (the flag is shared by the backends' copies of this trust).
    pub fn forget_asked(&self) {
        if let Some(n) = &self.unanswered {
            n.asked.store(false, Ordering::Relaxed);
        }
    }

    /// A failed attempt's message, with the likely cause when a server asked for a client
    /// certificate and none was given.
    pub fn explain(&self, why: String) -> String {
        match &self.unanswered {
            Some(n) if n.asked.load(Ordering::Relaxed) => format!(
                "{why} (the server asked for a client certificate, and none was given: \
                 --client-cert, --client-key)"
            ),
            _ => why,
        }
    }

    /// The same trust, offering only `protocol` by ALPN.
    fn offering(&self, protocol: &[u8]) -> Arc<ClientConfig> {
        let mut c = (*self.config).clone();
        c.alpn_protocols = vec![protocol.to_vec()];
        Arc::new(c)
    }

    /// A TLS session over `tcp` with `host`, for HTTP/1.1.
    pub fn http1(&self, host: &str, tcp: TcpStream) -> io::Result<Stream> {
        let name = server_name(host)?;
        let conn = rustls::ClientConnection::new(self.offering(b"http/1.1"), name)
            .map_err(io::Error::other)?;
        Ok(Stream(rustls::StreamOwned::new(conn, tcp)))
    }

    /// A TLS session over `tcp` with `host`, offering `h2` (gRPC).
    pub async fn h2(
        &self,
        host: &str,
        tcp: tokio::net::TcpStream,
    ) -> io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        let name = server_name(host)?;
        let connector = tokio_rustls::TlsConnector::from(self.offering(b"h2"));
        connector.connect(name, tcp).await
    }
}

/// A blocking TLS stream. A server that closes the connection without TLS's close_notify
/// (after a whole `Connection: close` response) ends the stream, as a plain one would.
pub struct Stream(rustls::StreamOwned<rustls::ClientConnection, TcpStream>);

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.0.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
            r => r,
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

fn server_name(host: &str) -> io::Result<ServerName<'static>> {
    ServerName::try_from(host.to_string())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("`{host}`: {e}")))
}

/// The certificates of a PEM file.
fn roots_of(path: &Path) -> Result<RootCertStore> {
    let shown = path.display();
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("failed to read the CA file `{shown}`"))?;
    for c in certs {
        let c = c.with_context(|| format!("`{shown}` holds a bad PEM block"))?;
        roots
            .add(c)
            .with_context(|| format!("`{shown}` holds a certificate rustls cannot use"))?;
    }
    if roots.is_empty() {
        bail!("`{shown}` holds no certificate (PEM, `-----BEGIN CERTIFICATE-----`)");
    }
    Ok(roots)
}

/// The certificate chain of a PEM file, the client's own first.
fn chain_of(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let shown = path.display();
    let chain = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("failed to read the client certificate `{shown}`"))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("`{shown}` holds a bad PEM block"))?;
    if chain.is_empty() {
        bail!("`{shown}` holds no certificate (PEM, `-----BEGIN CERTIFICATE-----`)");
    }
    Ok(chain)
}

/// The private key of a PEM file (PKCS #8, PKCS #1 or SEC1).
fn key_of(path: &Path) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path).with_context(|| {
        format!(
            "failed to read a private key (PEM, `-----BEGIN PRIVATE KEY-----` or an RSA or EC \
             key) from `{}`",
            path.display()
        )
    })
}

/// The system's CA certificates (`/etc/ssl/certs` and the like, or `$SSL_CERT_FILE`).
fn system_roots() -> Result<RootCertStore> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    for c in found.certs {
        let _ = roots.add(c);
    }
    if roots.is_empty() {
        bail!(
            "no CA certificate found in the system's store (install ca-certificates, or give \
             --ca-file){}",
            found
                .errors
                .first()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        );
    }
    Ok(roots)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_without_certificates_is_refused_clearly() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let e = format!("{:#}", Tls::new(Some(&missing), None).unwrap_err());
        assert!(e.contains("failed to read the CA file"), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = format!("{:#}", Tls::new(Some(&empty), None).unwrap_err());
        assert!(e.contains("holds no certificate"), "{e}");
    }

    #[test]
    fn a_client_certificate_file_without_certificates_is_refused_clearly() {
        let dir = tempfile::tempdir().unwrap();
        // Any CA file will do: the client certificate is read after it.
        let system = std::path::Path::new("/etc/ssl/certs/ca-certificates.crt");
        if !system.exists() {
            return;
        }
        let system = Some(system);
        let bad = dir.path().join("bad.pem");
        std::fs::write(&bad, "not a key\n").unwrap();
        let client = ClientCert {
            cert: bad.clone(),
            key: bad,
        };
        let e = format!("{:#}", Tls::new(system, Some(&client)).unwrap_err());
        assert!(e.contains("holds no certificate"), "{e}");
    }
}
