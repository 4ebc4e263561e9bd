//! One accepted connection: optional TLS (rustls with ring, ALPN `h2` and
//! `http/1.1`), then HTTP/1.1 or HTTP/2 by what the client speaks.

use crate::args::TlsFiles;
use crate::router::{self, Conn, State};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls::{crypto::ring, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// A client that opens a socket and never finishes the handshake is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS acceptor for `--tls-cert`/`--tls-key`; `Err` says which file is wrong.
pub fn tls_acceptor(files: &TlsFiles) -> Result<TlsAcceptor, String> {
    let cert_path = files.cert.display();
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("--tls-cert {cert_path}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("--tls-cert {cert_path}: no certificate found"));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("--tls-key {}: {e}", files.key.display()))?;
    // ring, set explicitly: rustls' default provider (aws-lc-rs) needs cmake.
    let mut config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("TLS certificate and key: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Serves one connection until it closes; errors are client hang-ups,
/// failed handshakes or injected drops, none worth more than closing.
pub async fn connection(stream: TcpStream, tls: Option<TlsAcceptor>, state: Arc<State>) {
    // Small SSE chunks must leave immediately.
    let _ = stream.set_nodelay(true);
    let Some(acceptor) = tls else {
        http(stream, Conn::default(), state).await;
        return;
    };
    let Ok(Ok(stream)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
    else {
        return;
    };
    let conn = Conn {
        tls: true,
        sni: stream.get_ref().1.server_name().map(str::to_owned),
    };
    http(stream, conn, state).await;
}

/// HTTP/1.1, or HTTP/2 when the client opens with its preface (after ALPN
/// `h2`, or as h2c prior knowledge on plain TCP).
async fn http<I>(io: I, conn: Conn, state: Arc<State>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let conn = Arc::new(conn);
    let service = service_fn(move |req| router::handle(Arc::clone(&state), Arc::clone(&conn), req));
    let _ = auto::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(io), service)
        .await;
}
