//! A real browser for the tests: Debian's headless Chromium, driven over WebDriver by Debian's
//! `chromedriver` on a free loopback port. Both live in a temporary directory of the
//! [`Browser`]'s own (their HOME and TMPDIR, where Chromium leaves its profile and sockets), and
//! nothing of either outlives it: on drop the session ends, every process of chromedriver's
//! process group (Chromium's too) is killed and the directory removed. `scripts/deps --test`
//! installs both.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use fantoccini::elements::Element;
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

use super::{free_low_port, try_send, until, KillOnDrop, Req};

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";
/// The window of a desktop browser, as [`Browser::start`] opens it (headless, its viewport is as
/// wide and some 140 px less high: screenshots are 1280 × 757).
pub const DESKTOP: (u32, u32) = (1280, 900);
/// A phone's viewport in CSS pixels (an iPhone 12 to 15), for [`Browser::phone`], which shows it
/// at 2 device pixels to the CSS pixel (screenshots are 780 × 1688).
pub const PHONE: (u32, u32) = (390, 844);
/// How long chromedriver may take to come up, and Chromium to open its first window.
const START: Duration = Duration::from_secs(30);

/// One cookie as the browser keeps it (what `Set-Cookie` said, as Chromium understood it).
#[derive(Clone, Debug, PartialEq)]
pub struct Cookie {
    pub name: String,
    pub value: String,
    pub path: Option<String>,
    pub http_only: bool,
    pub secure: bool,
    /// `Strict`, `Lax` or `None`, when the cookie said.
    pub same_site: Option<String>,
}

/// A headless Chromium with one WebDriver session. Every method panics with the page's URL when
/// WebDriver fails, except [`wait_until`](Self::wait_until), whose timeout is the test's to judge.
pub struct Browser {
    client: Client,
    /// The WebDriver session, ended on drop.
    session: Option<String>,
    driver: Driver,
}

/// chromedriver, the leader of its own process group, with its HOME and TMPDIR: on drop every
/// process of the browser ([`processes_of`]) is killed, then the directory removed.
struct Driver {
    child: KillOnDrop,
    port: u16,
    log: PathBuf,
    dir: tempfile::TempDir,
}

impl Browser {
    /// Start chromedriver, wait until its `/status` says ready, and open a session on a headless
    /// Chromium with a [`DESKTOP`] window.
    pub async fn start() -> Browser {
        let driver = Driver::start().await;
        let chrome_options = json!({
            "binary": CHROMIUM,
            "args": [
                "--headless=new",
                "--no-sandbox",
                "--disable-dev-shm-usage",
                format!("--window-size={},{}", DESKTOP.0, DESKTOP.1),
            ],
        });
        let caps = json!({"browserName": "chrome", "goog:chromeOptions": chrome_options});
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let connecting = ClientBuilder::new(connector)
            .capabilities(caps.as_object().unwrap().clone())
            .connect(&format!("http://127.0.0.1:{}", driver.port))
            .await;
        let client = connecting
            .unwrap_or_else(|e| panic!("no WebDriver session: {e}\n--- chromedriver log ---\n{}", read(&driver.log)));
        let session = client.session_id().await.ok().flatten();
        Browser { client, session, driver }
    }

    /// The WebDriver client itself, for what this API lacks.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// chromedriver's process id, which is also its process group's (Chromium's processes; see
    /// [`processes_of`]).
    pub fn pid(&self) -> u32 {
        self.driver.child.id()
    }

    /// chromedriver's port.
    pub fn port(&self) -> u16 {
        self.driver.port
    }

    /// The browser's HOME and TMPDIR.
    pub fn dir(&self) -> &Path {
        self.driver.dir.path()
    }

    /// What chromedriver has logged so far.
    pub fn driver_log(&self) -> String {
        read(&self.driver.log)
    }

    /// Open `url` and wait for its page to load.
    pub async fn goto(&self, url: &str) {
        if let Err(e) = self.client.goto(url).await {
            panic!("goto {url}: {e}\n--- chromedriver log ---\n{}", self.driver_log());
        }
    }

    /// The URL of the page on screen.
    pub async fn url(&self) -> String {
        match self.client.current_url().await {
            Ok(url) => url.to_string(),
            Err(e) => panic!("current URL: {e}"),
        }
    }

    /// The page's HTML as it is now (the DOM, serialized).
    pub async fn source(&self) -> String {
        match self.client.source().await {
            Ok(html) => html,
            Err(e) => panic!("page source at {}: {e}", self.url().await),
        }
    }

    /// The first element matching the CSS `selector`.
    pub async fn find(&self, selector: &str) -> Element {
        match self.client.find(Locator::Css(selector)).await {
            Ok(el) => el,
            Err(e) => panic!("no {selector:?}: {e}\n{}", self.context().await),
        }
    }

    /// Every element matching the CSS `selector` (none is no error).
    pub async fn find_all(&self, selector: &str) -> Vec<Element> {
        match self.client.find_all(Locator::Css(selector)).await {
            Ok(els) => els,
            Err(e) => panic!("find all {selector:?}: {e}\n{}", self.context().await),
        }
    }

    /// Some element matches the CSS `selector`.
    pub async fn exists(&self, selector: &str) -> bool {
        !self.find_all(selector).await.is_empty()
    }

    /// The rendered text of the first element matching `selector` (as a user sees it: hidden
    /// text is left out).
    pub async fn text(&self, selector: &str) -> String {
        match self.find(selector).await.text().await {
            Ok(text) => text,
            Err(e) => panic!("text of {selector:?}: {e}\n{}", self.context().await),
        }
    }

    /// Type `value` into the form field named `name`, in place of what it held; a `<select>`
    /// picks the option of that value.
    pub async fn fill(&self, name: &str, value: &str) {
        let field = self.find(&format!("[name=\"{name}\"]")).await;
        let done = match field.tag_name().await.as_deref() {
            Ok("select") => field.select_by_value(value).await,
            _ => match field.clear().await {
                Ok(()) => field.send_keys(value).await,
                Err(e) => Err(e),
            },
        };
        if let Err(e) = done {
            panic!("fill {name:?} with {value:?}: {e}\n{}", self.context().await);
        }
    }

    /// Click the first element matching `selector`, as a user would (it must be visible).
    pub async fn click(&self, selector: &str) {
        if let Err(e) = self.find(selector).await.click().await {
            panic!("click {selector:?}: {e}\n{}", self.context().await);
        }
    }

    /// Submit the form matching `selector` as its submit button would (validation and `submit`
    /// handlers run). The next page loads after this returns: wait for it.
    pub async fn submit(&self, selector: &str) {
        let form = self.find(selector).await;
        let args = vec![serde_json::to_value(&form).unwrap()];
        if let Err(e) = self.client.execute("arguments[0].requestSubmit()", args).await {
            panic!("submit {selector:?}: {e}\n{}", self.context().await);
        }
    }

    /// Run `script` (a function body: `return …` gives its value) in the page.
    pub async fn js(&self, script: &str) -> Value {
        match self.client.execute(script, Vec::new()).await {
            Ok(v) => v,
            Err(e) => panic!("script {script:?}: {e}\n{}", self.context().await),
        }
    }

    /// Every cookie the page's origin sees, HttpOnly ones too.
    pub async fn cookies(&self) -> Vec<Cookie> {
        let cookies = match self.client.get_all_cookies().await {
            Ok(c) => c,
            Err(e) => panic!("cookies at {}: {e}", self.url().await),
        };
        cookies
            .iter()
            .map(|c| Cookie {
                name: c.name().into(),
                value: c.value().into(),
                path: c.path().map(String::from),
                http_only: c.http_only() == Some(true),
                secure: c.secure() == Some(true),
                same_site: c.same_site().map(|s| format!("{s:?}")),
            })
            .collect()
    }

    /// The cookie named `name`, if the browser keeps one for the page's origin.
    pub async fn cookie(&self, name: &str) -> Option<Cookie> {
        self.cookies().await.into_iter().find(|c| c.name == name)
    }

    /// Poll `check` every 50 ms until it holds or `limit` passes; on timeout an error naming
    /// `what`, with the page's URL and source.
    pub async fn wait_until(
        &self,
        what: &str,
        limit: Duration,
        check: impl AsyncFnMut() -> bool,
    ) -> Result<(), String> {
        if until(limit, check).await {
            return Ok(());
        }
        Err(format!("waited {limit:?} for {what}, in vain\n{}", self.context().await))
    }

    /// Wait until an element matches `selector`; the first that does.
    pub async fn wait_for(&self, selector: &str, limit: Duration) -> Element {
        let what = format!("an element matching {selector:?}");
        self.wait_until(&what, limit, async || self.exists(selector).await).await.unwrap_or_else(|e| panic!("{e}"));
        self.find(selector).await
    }

    /// Resize the window to `width` × `height`.
    pub async fn resize(&self, width: u32, height: u32) {
        if let Err(e) = self.client.set_window_size(width, height).await {
            panic!("resize to {width}x{height}: {e}");
        }
    }

    /// Show pages as a phone does: a [`PHONE`]-sized viewport, mobile (the page's `<meta
    /// name="viewport">` counts), until [`desktop`](Self::desktop).
    pub async fn phone(&self) {
        let (width, height) = PHONE;
        let params = json!({"width": width, "height": height, "deviceScaleFactor": 2, "mobile": true});
        self.cdp("Emulation.setDeviceMetricsOverride", params).await;
    }

    /// Back to the [`DESKTOP`] window after [`phone`](Self::phone).
    pub async fn desktop(&self) {
        self.cdp("Emulation.clearDeviceMetricsOverride", json!({})).await;
        self.resize(DESKTOP.0, DESKTOP.1).await;
    }

    /// Save what the viewport shows as `<target dir>/screenshots/<name>.png`; its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
            "a screenshot's name is a file name: {name:?}"
        );
        let png = match self.client.screenshot().await {
            Ok(png) => png,
            Err(e) => panic!("screenshot {name}: {e}\n{}", self.context().await),
        };
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        path
    }

    /// A Chrome DevTools Protocol command, through chromedriver.
    async fn cdp(&self, cmd: &'static str, params: Value) {
        if let Err(e) = self.client.issue_cmd(Cdp { cmd, params }).await {
            panic!("{cmd}: {e}");
        }
    }

    /// Where the browser is, for a failure's message: the URL and the page's source.
    async fn context(&self) -> String {
        let url = self.client.current_url().await.map(|u| u.to_string()).unwrap_or_else(|e| format!("? ({e})"));
        let source = self.client.source().await.unwrap_or_else(|e| format!("? ({e})"));
        format!("--- at {url} ---\n{source}")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver quits Chromium when its session ends, removing the profile it made;
        // whatever is left of either then goes with the driver's process group.
        if let Some(id) = &self.session {
            let _ = end_session(self.driver.port, id);
        }
    }
}

impl Driver {
    /// `chromedriver` on a free port, ready (`/status`); a port another process took meanwhile
    /// makes it exit, and a new one is tried.
    async fn start() -> Driver {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("chromedriver.log");
        for _ in 0..3 {
            let port = free_low_port();
            let mut child = spawn_driver(dir.path(), &log, port);
            let mut exited = false;
            let ready = until(START, async || {
                exited = matches!(child.try_wait(), Ok(Some(_)));
                exited || driver_ready(port).await
            })
            .await;
            if ready && !exited {
                return Driver { child, port, log, dir };
            }
            assert!(exited, "chromedriver not ready within {START:?}:\n{}", read(&log));
        }
        panic!("chromedriver exited three times:\n{}", read(&log));
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let (group, dir) = (self.child.id(), self.dir.path());
        // SIGKILL takes effect asynchronously: kill until none is left, before the directory
        // goes (the fields then reap chromedriver and remove the directory).
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let left = processes_of(group, dir);
            if left.is_empty() || std::time::Instant::now() > deadline {
                break;
            }
            let mut kill = Command::new("kill");
            kill.args(["-KILL", "--", &format!("-{group}")]).args(left.iter().map(u32::to_string));
            let _ = kill.stderr(Stdio::null()).status();
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The running processes of a browser: those of chromedriver's process group `group` (Chromium
/// and its helpers), and those whose command line names the browser's directory `dir` (Chromium's
/// crash handlers, which start sessions of their own). Zombies, dead and waiting to be reaped,
/// do not count.
pub fn processes_of(group: u32, dir: &Path) -> Vec<u32> {
    let Ok(procs) = std::fs::read_dir("/proc") else { return Vec::new() };
    let dir = dir.to_string_lossy();
    let group = group.to_string();
    let mut found = Vec::new();
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let stat = std::fs::read_to_string(p.path().join("stat")).unwrap_or_default();
        // `pid (comm) state ppid pgrp …`; the command's name may hold spaces and parentheses.
        let fields: Vec<&str> =
            stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
        if fields.len() < 3 || fields[0] == "Z" {
            continue;
        }
        let cmdline = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
        if fields[2] == group || String::from_utf8_lossy(&cmdline).contains(&*dir) {
            found.push(pid);
        }
    }
    found
}

fn spawn_driver(dir: &Path, log: &Path, port: u16) -> KillOnDrop {
    use std::os::unix::process::CommandExt;
    let out = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
    let child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .env("HOME", dir)
        .env("TMPDIR", dir)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        // A group of its own, which Chromium's processes join (not its crash handlers).
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("{CHROMEDRIVER} (scripts/deps --test installs chromium-driver): {e}"));
    KillOnDrop::new(child)
}

/// chromedriver's `/status` says it is ready for a new session.
async fn driver_ready(port: u16) -> bool {
    let req = Req {
        method: "GET",
        path: "/status".into(),
        body: Vec::new(),
        content_type: "text/plain",
        headers: Vec::new(),
    };
    match try_send(port, req).await {
        Ok((200, body)) => serde_json::from_slice::<Value>(&body).is_ok_and(|v| v["value"]["ready"] == true),
        _ => false,
    }
}

/// `DELETE /session/<id>`, blocking (a drop cannot await), until chromedriver has answered
/// (it keeps the connection open: the answer ends where its `Content-Length` says).
fn end_session(port: u16, id: &str) -> std::io::Result<()> {
    use std::io::{BufRead, Read, Write};
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port))?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(conn, "DELETE /session/{id} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\n\r\n")?;
    let mut answer = std::io::BufReader::new(conn);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if answer.read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    answer.read_exact(&mut vec![0; length])
}

/// `<target dir>/screenshots`: CARGO_TARGET_DIR's (now, or when the tests were built), else the
/// checkout's `target/`.
fn screenshot_dir() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(|| option_env!("CARGO_TARGET_DIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("target"));
    root.join(target).join("screenshots")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// A command of the Chrome DevTools Protocol, sent through chromedriver's `goog/cdp/execute`.
#[derive(Debug)]
struct Cdp {
    cmd: &'static str,
    params: Value,
}

impl WebDriverCompatibleCommand for Cdp {
    fn endpoint(&self, base: &url::Url, session: Option<&str>) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/goog/cdp/execute", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(json!({"cmd": self.cmd, "params": self.params}).to_string()))
    }
}
