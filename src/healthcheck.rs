//! `abstore healthcheck`: exit 0 only when `/readyz` answers 200. Used by
//! the Docker `HEALTHCHECK` (the runtime image has no curl).
//!
//! A plain HTTP/1.1 GET over a TCP stream: the server's own loopback
//! endpoint needs no TLS, redirects or pooling, so a client library would
//! add a dependency for nothing.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// Probe `addr` (a wildcard listen address is probed on loopback).
pub async fn probe(addr: SocketAddr, timeout: Duration) -> anyhow::Result<()> {
    let target = if addr.ip().is_unspecified() {
        let loopback = if addr.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        };
        SocketAddr::new(loopback, addr.port())
    } else {
        addr
    };
    tokio::time::timeout(timeout, async {
        let mut stream = TcpStream::connect(target)
            .await
            .with_context(|| format!("connecting to {target}"))?;
        let request =
            format!("GET /readyz HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        let text = String::from_utf8_lossy(&response);
        let status_line = text.lines().next().unwrap_or_default();
        if status_line.split_whitespace().nth(1) != Some("200") {
            let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
            bail!("not ready: {status_line} {body}");
        }
        Ok(())
    })
    .await
    .with_context(|| format!("no answer from {target} within {timeout:?}"))?
}
