//! Prometheus metrics on their own listener (`--metrics-listen`, off by
//! default): operators scrape a private port while the protocol port keeps
//! exactly the spec's routes (anything else there is `404 no route`).
//!
//! Labels are bounded: matched route templates, methods, status codes and
//! resource families. Never slugs, ids or tokens.

use std::net::SocketAddr;
use std::time::Instant;

use anyhow::Context as _;
use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;

use crate::http::SharedState;

/// Install the process-wide recorder; call once, before serving.
pub fn install() -> anyhow::Result<PrometheusHandle> {
    PrometheusBuilder::new()
        .set_buckets(&[
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        ])
        .context("metric buckets")?
        .install_recorder()
        .context("installing the metrics recorder")
}

/// The bound metrics listener and the recorder's handle.
pub struct MetricsServer {
    listener: TcpListener,
    handle: PrometheusHandle,
}

impl MetricsServer {
    /// Install the recorder and bind `addr`.
    pub async fn bind(addr: SocketAddr) -> anyhow::Result<MetricsServer> {
        let handle = install()?;
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding --metrics-listen {addr}"))?;
        Ok(MetricsServer { listener, handle })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve `GET /metrics` in the background until shutdown.
    pub fn spawn(self, state: SharedState) {
        serve(self.listener, self.handle, state);
    }
}

fn serve(listener: TcpListener, handle: PrometheusHandle, state: SharedState) {
    let shutdown = state.shutdown.clone();
    let app = Router::new()
        .route("/metrics", get(render))
        .with_state((handle, state));
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(err) = served {
            tracing::error!(error = %err, "metrics listener failed");
        }
    });
}

/// Sample the gauges that are cheapest to read at scrape time, then render.
async fn render(State((handle, state)): State<(PrometheusHandle, SharedState)>) -> String {
    metrics::gauge!("abstore_held_reads_in_flight").set(state.held_reads.in_flight() as f64);
    let pool = state.store.pool_stats();
    metrics::gauge!("abstore_db_pool_connections", "state" => "idle").set(f64::from(pool.idle));
    metrics::gauge!("abstore_db_pool_connections", "state" => "busy")
        .set(f64::from(pool.size.saturating_sub(pool.idle)));
    metrics::gauge!("abstore_db_pool_max_connections").set(f64::from(pool.max));
    handle.render()
}

/// Count and time every request by matched route, method and status.
pub async fn track(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "(unmatched)".to_owned(), |p| p.as_str().to_owned());
    let method = request.method().as_str().to_owned();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics::counter!("abstore_http_requests_total", "route" => route.clone(), "method" => method.clone(), "status" => status).increment(1);
    metrics::histogram!("abstore_http_request_duration_seconds", "route" => route, "method" => method).record(started.elapsed().as_secs_f64());
    response
}
