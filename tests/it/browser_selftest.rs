//! The headless browser ([`Browser`]) against a tiny site served here: what the page tests rely
//! on it for (a form posted for real, the answer page, an HttpOnly cookie, screenshots, and
//! nothing left behind).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::json;

use crate::utils::browser::DESKTOP;
use crate::utils::{processes_of, Browser, PHONE};

const LIMIT: Duration = Duration::from_secs(10);

const FORM: &str = r#"<!doctype html><html><head><meta name="viewport" content="width=device-width">
<title>Hello</title></head><body><h1>Say hello</h1>
<form method="post" action="/hello"><input name="who"><button>Send</button></form></body></html>"#;

/// A site of two pages on a loopback port: `GET /` is [`FORM`], `POST /hello` greets whoever the
/// form named and sets an HttpOnly, SameSite=Strict cookie. It records each POST's body.
struct Site {
    port: u16,
    posts: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Site {
    async fn start() -> Site {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let posts = Arc::new(Mutex::new(Vec::new()));
        let recorded = posts.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let recorded = recorded.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| page(recorded.clone(), req));
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Site { port, posts, task }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn page(posts: Arc<Mutex<Vec<String>>>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let html = Response::builder().header("Content-Type", "text/html; charset=utf-8");
    if req.method() != hyper::Method::POST {
        return Ok(html.body(Full::new(Bytes::from_static(FORM.as_bytes()))).unwrap());
    }
    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    posts.lock().unwrap().push(String::from_utf8_lossy(&body).into_owned());
    let who = form_urlencoded::parse(&body).find(|(k, _)| k == "who").map(|(_, v)| v.into_owned()).unwrap_or_default();
    let answer = format!(
        "<!doctype html><title>Hi</title><p id=greeting>Hello, {}!</p>",
        who.replace('&', "&amp;").replace('<', "&lt;")
    );
    let resp = html.header("Set-Cookie", "sid=s3cret; Path=/; HttpOnly; SameSite=Strict");
    Ok(resp.body(Full::new(Bytes::from(answer))).unwrap())
}

#[tokio::test]
async fn browser_posts_a_form_reads_the_answer_and_its_httponly_cookie_and_saves_screenshots() {
    let site = Site::start().await;
    let browser = Browser::start().await;
    browser.goto(&site.url("/")).await;
    assert_eq!(browser.text("h1").await, "Say hello");
    assert!(browser.cookies().await.is_empty());

    browser.fill("who", "Ada & Bob").await;
    browser.submit("form").await;
    browser.wait_for("#greeting", LIMIT).await;
    assert_eq!(browser.url().await, site.url("/hello"));
    assert_eq!(browser.text("#greeting").await, "Hello, Ada & Bob!");
    assert_eq!(*site.posts.lock().unwrap(), ["who=Ada+%26+Bob"], "one real POST, form-encoded");
    let sid = browser.cookie("sid").await.expect("the site's cookie");
    assert_eq!((sid.value.as_str(), sid.path.as_deref()), ("s3cret", Some("/")));
    assert!(sid.http_only && !sid.secure, "{sid:?}");
    assert_eq!(sid.same_site.as_deref(), Some("Strict"));
    assert_eq!(browser.js("return document.cookie").await, json!(""), "HttpOnly: hidden from scripts");

    let timeout = browser.wait_until("a page that never comes", Duration::from_millis(200), async || false).await;
    let err = timeout.expect_err("nothing to wait for");
    assert!(err.contains("a page that never comes") && err.contains("Hello, Ada &amp; Bob!"), "{err}");

    let desktop = browser.screenshot("browser_selftest_desktop").await;
    browser.phone().await;
    browser.goto(&site.url("/")).await;
    assert_eq!(browser.js("return window.innerWidth").await, json!(PHONE.0));
    let phone = browser.screenshot("browser_selftest_phone").await;
    // A PNG's width is the 4 bytes after its signature and IHDR's length and type; the phone's
    // viewport shows at 2 device pixels to the CSS pixel.
    for (png, width) in [(&desktop, DESKTOP.0), (&phone, 2 * PHONE.0)] {
        let bytes = std::fs::read(png).unwrap();
        assert!(
            bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 1000,
            "{}: {} bytes",
            png.display(),
            bytes.len()
        );
        assert_eq!(u32::from_be_bytes(bytes[16..20].try_into().unwrap()), width, "{}", png.display());
    }
    browser.desktop().await;
    assert_eq!(browser.js("return window.innerWidth").await, json!(DESKTOP.0));

    let (group, dir) = (browser.pid(), browser.dir().to_path_buf());
    drop(browser);
    assert!(!dir.exists(), "the browser's directory is removed");
    assert_eq!(processes_of(group, &dir), [0u32; 0], "no process of the browser outlives it");
}
