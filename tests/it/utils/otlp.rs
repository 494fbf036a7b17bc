//! A real OTLP/HTTP trace receiver (`tests/it/utils/otlp_receiver.py` under the checkout's venv,
//! decoding with PyPI's `opentelemetry-proto`) on a free loopback port, killed on drop. Exporters
//! post to [`OtlpReceiver::endpoint`]`/v1/traces`; the test reads back every span decoded, flattened
//! to JSON, and every request's headers, and can make the receiver hang or fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::{eventually, exchange, KillOnDrop, Req};

pub struct OtlpReceiver {
    pub port: u16,
    pub child: KillOnDrop,
    err: PathBuf,
    _dir: tempfile::TempDir,
}

/// The checkout's venv Python (scripts/deps installs the receiver's packages there), else the
/// system's.
pub fn venv_python() -> String {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python3");
    if venv.exists() {
        venv.display().to_string()
    } else {
        "python3".into()
    }
}

impl OtlpReceiver {
    /// Start the receiver and wait until it listens (it writes its port to a file then).
    pub async fn start() -> OtlpReceiver {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let python = venv_python();
        let tmp = tempfile::tempdir().unwrap();
        let (port_file, err) = (tmp.path().join("port"), tmp.path().join("stderr.log"));
        let child = Command::new(&python)
            .arg(root.join("tests/it/utils/otlp_receiver.py"))
            .arg(&port_file)
            .env("PYTHONUNBUFFERED", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("{python} (scripts/deps --test makes the venv): {e}"));
        let mut receiver = OtlpReceiver { port: 0, child: KillOnDrop::new(child), err, _dir: tmp };
        let listening = eventually(Duration::from_secs(30), || {
            if let Ok(Some(status)) = receiver.child.try_wait() {
                panic!(
                    "the OTLP receiver exited with {status} (run scripts/deps --test for its packages):\n{}",
                    receiver.logs()
                );
            }
            receiver.port = std::fs::read_to_string(&port_file).ok().and_then(|p| p.trim().parse().ok()).unwrap_or(0);
            receiver.port != 0
        })
        .await;
        assert!(listening, "the OTLP receiver never wrote its port:\n{}", receiver.logs());
        receiver
    }

    /// The base URL (`OTEL_EXPORTER_OTLP_ENDPOINT`); traces go to `{endpoint}/v1/traces`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The full traces URL (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`).
    pub fn traces_url(&self) -> String {
        format!("{}/v1/traces", self.endpoint())
    }

    /// What the receiver wrote to stderr (its request log, any traceback).
    pub fn logs(&self) -> String {
        format!("--- OTLP receiver stderr ---\n{}", std::fs::read_to_string(&self.err).unwrap_or_default())
    }

    /// Every span of every export answered 200 so far, in arrival order: `service_name`,
    /// `scope`, `trace_id`, `span_id`, `parent_span_id` (lowercase hex, `""` for none), `name`,
    /// `kind`, `start_time_unix_nano`, `end_time_unix_nano`, `status` {`code`, `message`},
    /// `attributes` {key: value}, `events` [{`name`, `time_unix_nano`, `attributes`}], `links`
    /// [{`trace_id`, `span_id`, `attributes`}], `flags`, `resource` {key: value}.
    pub async fn spans(&self) -> Vec<Value> {
        self.get_list("/spans").await
    }

    /// The spans of trace `trace_id` (lowercase hex).
    pub async fn spans_of_trace(&self, trace_id: &str) -> Vec<Value> {
        self.spans().await.into_iter().filter(|s| s["trace_id"] == trace_id).collect()
    }

    /// Every POST to `/v1/traces` so far, whatever it was answered: `headers` (names lowercased),
    /// `span_count`, `mode`, `status` (null for one held by `hang`), `error`.
    pub async fn requests(&self) -> Vec<Value> {
        self.get_list("/requests").await
    }

    /// Wait up to `limit` for the spans to satisfy `check`; the spans last seen, and whether they
    /// did.
    pub async fn spans_until(&self, limit: Duration, mut check: impl FnMut(&[Value]) -> bool) -> (bool, Vec<Value>) {
        let mut seen = Vec::new();
        let ok = super::until(limit, async || {
            seen = self.spans().await;
            check(&seen)
        })
        .await;
        (ok, seen)
    }

    /// How later exports are answered: `ok` (200), `fail503` (503) or `hang` (never: the
    /// connection is held until the mode changes, or 120 s, then closed).
    pub async fn set_mode(&self, mode: &str) {
        let req = Req {
            method: "POST",
            path: "/mode".into(),
            body: mode.as_bytes().to_vec(),
            content_type: "text/plain",
            headers: Vec::new(),
        };
        let (status, _, body) = exchange(self.port, req).await.unwrap_or_else(|e| panic!("POST /mode: {e}"));
        assert_eq!(status, 200, "POST /mode {mode}: {}", String::from_utf8_lossy(&body));
    }

    async fn get_list(&self, path: &str) -> Vec<Value> {
        let req =
            Req { method: "GET", path: path.into(), body: Vec::new(), content_type: "text/plain", headers: Vec::new() };
        let (status, _, body) =
            exchange(self.port, req).await.unwrap_or_else(|e| panic!("GET {path}: {e}\n{}", self.logs()));
        assert_eq!(status, 200, "GET {path}: {}", String::from_utf8_lossy(&body));
        serde_json::from_slice(&body).unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }
}
