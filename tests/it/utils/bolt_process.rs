//! One unmodified Bolt app process (`tests/bolt/python/<script>.py` under the checkout's venv,
//! or `tests/bolt/js/<script>.js` under node) on a free loopback port, killed on drop. Its
//! stdout (`LISTENING <port>`, `HANDLED …` lines) and stderr go to files the tests read.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{eventually, KillOnDrop, SECRET};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bolt {
    Python,
    Js,
}

pub struct BoltProcess {
    pub kind: Bolt,
    pub child: KillOnDrop,
    pub port: u16,
    out: PathBuf,
    err: PathBuf,
    _dir: tempfile::TempDir,
}

impl BoltProcess {
    /// Start `script` (`app`, `turns_app`, …; the extension is the framework's) with the app's
    /// signing secret, `PORT=0` and `env`; wait until it listens.
    pub async fn start(kind: Bolt, script: &str, env: &[(&str, String)]) -> BoltProcess {
        Self::start_until(kind, script, env, "LISTENING ").await
    }

    /// Start a Socket Mode app (it listens on no port): wait until its socket is greeted
    /// (`CONNECTED` on stdout).
    pub async fn start_connected(kind: Bolt, script: &str, env: &[(&str, String)]) -> BoltProcess {
        Self::start_until(kind, script, env, "CONNECTED").await
    }

    /// Start `script` and wait for a stdout line starting with `ready` (`LISTENING <port>`).
    async fn start_until(kind: Bolt, script: &str, env: &[(&str, String)], ready: &str) -> BoltProcess {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        // Bolt for Python lives in the checkout's own venv (scripts/deps), never in the system's.
        let venv = root.join(".venv/bin/python3");
        let python = if venv.exists() { venv.display().to_string() } else { "python3".into() };
        let (program, dir, file) = match kind {
            Bolt::Python => (python, root.join("tests/bolt/python"), format!("{script}.py")),
            Bolt::Js => ("node".to_string(), root.join("tests/bolt/js"), format!("{script}.js")),
        };
        if kind == Bolt::Js {
            assert!(dir.join("node_modules/@slack/bolt").exists(), "@slack/bolt is not installed: run scripts/deps");
        }
        let tmp = tempfile::tempdir().unwrap();
        let (out, err) = (tmp.path().join("stdout.log"), tmp.path().join("stderr.log"));
        let child = Command::new(&program)
            .arg(&file)
            .current_dir(&dir)
            .env("SLACK_SIGNING_SECRET", SECRET)
            .env("PORT", "0")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("PYTHONUNBUFFERED", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            // Bolt reads these when set; the apps must run on `authorize` alone.
            .env_remove("SLACK_BOT_TOKEN")
            .env_remove("SLACK_CLIENT_ID")
            .env_remove("SLACK_CLIENT_SECRET")
            .env_remove("SLACK_STATE_SECRET")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("{program} on PATH (scripts/deps installs it): {e}"));
        let mut app = BoltProcess { kind, child: KillOnDrop::new(child), port: 0, out, err, _dir: tmp };
        // The app binds any free port and prints it.
        let listening = eventually(Duration::from_secs(30), || {
            if let Ok(Some(status)) = app.child.try_wait() {
                panic!("{kind:?} Bolt app exited with {status}:\n{}", app.logs());
            }
            let out = app.stdout();
            let line = out.lines().find_map(|l| l.strip_prefix(ready));
            app.port = line.and_then(|rest| rest.trim().parse().ok()).unwrap_or(0);
            line.is_some()
        })
        .await;
        assert!(listening, "{kind:?} Bolt app never printed {ready:?}:\n{}", app.logs());
        app
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    pub fn logs(&self) -> String {
        format!(
            "--- {:?} app stdout ---\n{}--- {:?} app stderr ---\n{}",
            self.kind,
            self.stdout(),
            self.kind,
            self.stderr()
        )
    }

    /// The app's `HANDLED <what> …` lines.
    pub fn handled_lines(&self, what: &str) -> Vec<String> {
        let tag = format!("HANDLED {what}");
        self.stdout().lines().filter(|l| *l == tag || l.starts_with(&format!("{tag} "))).map(String::from).collect()
    }
}
