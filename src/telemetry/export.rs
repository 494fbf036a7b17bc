//! The exporter: spans are queued (bounded; a full queue drops the span and counts it, never
//! waits), batched and posted to the collector over OTLP/HTTP with protobuf by a thread of its
//! own, on a runtime of its own — so a collector that is slow, down or never answers costs the
//! ack path one `try_send`, and never a wait.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use opentelemetry_sdk::Resource;
use prometheus::IntCounterVec;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::config::TelemetryConfig;

/// Spans posted at once, at most.
const BATCH: usize = 512;
/// A batch that is not full leaves this long after its first span came.
const LINGER: Duration = Duration::from_millis(500);

/// Start the exporting thread; the queue's sending end.
pub(super) fn start(cfg: &TelemetryConfig, counts: IntCounterVec) -> Result<mpsc::Sender<SpanData>, String> {
    let url = cfg.traces_url().ok_or("telemetry is off")?;
    let (tx, rx) = mpsc::channel(cfg.max_queue);
    let (timeout, service) = (cfg.export_timeout, cfg.service_name.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot build the exporter's runtime: {e}"))?;
    let exporter = runtime.block_on(async { exporter(&url, timeout, &service) })?;
    std::thread::Builder::new()
        .name("slackgate-traces".into())
        .spawn(move || runtime.block_on(batches(rx, exporter, timeout, counts)))
        .map_err(|e| format!("cannot start the exporter's thread: {e}"))?;
    info!(endpoint = %url, "traces exported over OTLP/HTTP");
    Ok(tx)
}

/// The OTLP exporter toward `url`, through [`Http`]. Its headers come from
/// `OTEL_EXPORTER_OTLP_HEADERS` (or `OTEL_EXPORTER_OTLP_TRACES_HEADERS`), read by the exporter.
fn exporter(url: &str, timeout: Duration, service: &str) -> Result<opentelemetry_otlp::SpanExporter, String> {
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(timeout)
        .with_http_client(Http::new(timeout))
        .build()
        .map_err(|e| format!("cannot build the OTLP exporter: {e}"))?;
    exporter.set_resource(&Resource::builder_empty().with_service_name(service.to_string()).build());
    Ok(exporter)
}

/// Take spans off the queue, post them in batches, count what became of each.
async fn batches(
    mut rx: mpsc::Receiver<SpanData>,
    exporter: opentelemetry_otlp::SpanExporter,
    timeout: Duration,
    counts: IntCounterVec,
) {
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        if batch.is_empty() {
            match rx.recv().await {
                Some(span) => batch.push(span),
                None => return,
            }
        }
        let linger = tokio::time::sleep(LINGER);
        tokio::pin!(linger);
        while batch.len() < BATCH {
            let room = BATCH - batch.len();
            tokio::select! {
                n = rx.recv_many(&mut batch, room) => if n == 0 { break },
                _ = &mut linger => break,
            }
        }
        let n = batch.len() as u64;
        let sent = tokio::time::timeout(timeout, exporter.export(std::mem::take(&mut batch))).await;
        let outcome = match sent {
            Ok(Ok(())) => "exported",
            Ok(Err(e)) => {
                warn!(error = %e, spans = n, "traces not exported: the collector refused or failed them");
                "failed"
            }
            Err(_) => {
                warn!(spans = n, "traces not exported: the collector did not answer in time");
                "failed"
            }
        };
        counts.with_label_values(&[outcome]).inc_by(n);
    }
}

/// The exporter's HTTP client: the gateway's hyper with rustls, each request bounded by the
/// export timeout (the OTLP exporter bounds only its retries).
#[derive(Debug, Clone)]
struct Http {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
}

impl Http {
    fn new(timeout: Duration) -> Http {
        let roots = hyper_rustls::HttpsConnectorBuilder::new().with_native_roots().unwrap_or_else(|e| {
            warn!(error = %e, "no system root certificates: an https collector will fail");
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(
                rustls::ClientConfig::builder()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth(),
            )
        });
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(timeout));
        let https = roots.https_or_http().enable_http1().wrap_connector(http);
        Http { client: Client::builder(TokioExecutor::new()).build(https), timeout }
    }
}

#[async_trait::async_trait]
impl HttpClient for Http {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let exchange = async {
            let response = self.client.request(http::Request::from_parts(parts, Full::new(body))).await?;
            let (parts, body) = response.into_parts();
            Ok::<_, HttpError>(Response::from_parts(parts, body.collect().await?.to_bytes()))
        };
        tokio::time::timeout(self.timeout, exchange).await.map_err(|_| "the collector did not answer in time")?
    }
}
