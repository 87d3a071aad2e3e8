//! `serve --ui`: the session inspector, in a real browser (Debian's Chromium, driven
//! over WebDriver by chromedriver) and over plain HTTP as an attacker would try it.
//!
//! The browser test needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (Debian's
//! `chromium` and `chromium-driver` packages; `.ci/run` installs them). Without them it
//! fails and says so, unless `AGENT_SESSIONS_SKIP_BROWSER=1` is set. With
//! `AGENT_SESSIONS_SCREENSHOTS=1` it also writes the screenshots in `docs/images/`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agent_sessions::exactly_once::Delivery;
use agent_sessions::prelude::*;
use fantoccini::{Client, ClientBuilder, Locator};
use reqwest::redirect::Policy;
use reqwest::StatusCode;
use serde_json::{json, Value};

const SECRET: &str = "inspector-s3cret";
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A message crafted to run script wherever it is put into a page as HTML.
const HOSTILE: &str =
    "<img src=x onerror=\"document.title='pwned'\"><script>document.title='pwned'</script>";

/// A process killed when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `agent-sessions serve --ui` on a free port of `store`: the process and its address.
fn serve_ui(store: &str) -> (Killed, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-sessions"))
        .env_remove("AGENT_SESSIONS_SECRET")
        .env_remove("AGENT_SESSIONS_STORE")
        .args(["--store", store, "serve", "--listen", "127.0.0.1:0"])
        .args(["--secret", SECRET, "--ui"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut banner = String::new();
    stderr.read_line(&mut banner).unwrap();
    // The rest of what it prints goes to the test's output (a closed pipe would fail it).
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            eprintln!("serve: {line}");
        }
    });
    let base = banner
        .split_whitespace()
        .find(|word| word.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {banner:?}"))
        .to_owned();
    (Killed(child), base)
}

async fn manager(url: &str) -> SessionManager {
    SessionManager::connect(url).await.unwrap().build().unwrap()
}

/// Two people's conversations, one of them with a message crafted to inject script.
async fn conversations(url: &str) -> SessionKey {
    let manager = manager(url).await;
    let dm = |text: &str| InboundMessage::direct("telegram", "42", text);
    for (text, reply, tokens) in [
        ("when is my shift?", "Thursday at 9.", 1200),
        (HOSTILE, "I can't help with that.", 1900),
    ] {
        let turn = manager.turn(&dm(text)).await.unwrap();
        let usage = TurnUsage::tokens(tokens, 40, 0, 0);
        turn.complete(TurnReply::from(reply).with_usage(usage))
            .await
            .unwrap();
    }
    let other = manager
        .turn(&InboundMessage::direct(
            "whatsapp",
            "+15550100",
            "hello there",
        ))
        .await
        .unwrap();
    other.complete("hi!").await.unwrap();
    manager.key_for(&dm("x")).unwrap()
}

/// The key's current session, as the store has it now.
async fn current_session(store: &str, key: &SessionKey) -> StoredSession {
    let manager = manager(store).await;
    manager.session(key).get().await.unwrap().unwrap()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .build()
        .unwrap()
}

/// Logs in over HTTP: the cookie header to send, and the login's CSRF token.
async fn log_in(base: &str) -> (String, String) {
    let response = client()
        .post(format!("{base}/ui/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("secret={SECRET}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(response.headers()["location"], "/ui/sessions");
    let set_cookie = response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(set_cookie.contains(attribute), "{set_cookie}");
    }
    let cookie = set_cookie.split(';').next().unwrap().to_owned();
    let me: Value = client()
        .get(format!("{base}/ui/api/me"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (cookie, me["csrf"].as_str().unwrap().to_owned())
}

/// What an attacker tries without a browser: the secret's header is no login, a wrong
/// secret is no login, an action without the CSRF token or from another site is
/// refused, and every page forbids inline script.
#[tokio::test]
async fn the_inspector_lets_in_only_a_login_and_acts_only_for_its_own_page() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("json:{}", dir.path().display());
    let key = conversations(&store).await;
    let (_server, base) = serve_ui(&store);
    let http = client();

    let page = http
        .get(format!("{base}/ui/sessions"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        page.status(),
        StatusCode::SEE_OTHER,
        "a page asks to log in first"
    );
    assert_eq!(page.headers()["location"], "/ui/login");
    let csp = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");

    let with_header = http
        .get(format!("{base}/ui/api/sessions"))
        .header("x-kernel-secret", SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(
        with_header.status(),
        StatusCode::UNAUTHORIZED,
        "the API secret is not a login"
    );

    let wrong = http
        .post(format!("{base}/ui/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("secret=guess")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.headers()["location"], "/ui/login?failed");
    assert!(wrong.headers().get("set-cookie").is_none());
    let forged = http
        .get(format!("{base}/ui/api/me"))
        .header("cookie", "agent_sessions_inspector=0123456789abcdef")
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::UNAUTHORIZED);

    let (cookie, csrf) = log_in(&base).await;
    let reset = |token: Option<&str>, origin: Option<&str>| {
        let mut request = http
            .post(format!("{base}/ui/api/reset"))
            .header("cookie", &cookie)
            .json(&json!({ "key": key.as_str() }));
        if let Some(token) = token {
            request = request.header("x-csrf-token", token);
        }
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send()
    };
    let before = current_session(&store, &key).await;
    assert_eq!(
        reset(None, None).await.unwrap().status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        reset(Some("not-the-token"), None).await.unwrap().status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        reset(Some(&csrf), Some("http://evil.example"))
            .await
            .unwrap()
            .status(),
        StatusCode::FORBIDDEN,
        "another site's page cannot act, even with a stolen token"
    );
    let unchanged = current_session(&store, &key).await;
    assert_eq!(
        unchanged.entry.session_id, before.entry.session_id,
        "nothing was reset"
    );

    let done = reset(Some(&csrf), None).await.unwrap();
    assert_eq!(done.status(), StatusCode::OK);
    let after = current_session(&store, &key).await;
    assert_ne!(after.entry.session_id, before.entry.session_id);

    // A session of another key, and a key that is no key, are refused before a read.
    for (query, status) in [
        (
            format!("key={}&session={}", key.as_str(), "../../etc/passwd"),
            StatusCode::BAD_REQUEST,
        ),
        (
            format!(
                "key=agent:main:whatsapp:dm:%2B15550100&session={}",
                before.entry.session_id
            ),
            StatusCode::NOT_FOUND,
        ),
    ] {
        let response = http
            .get(format!("{base}/ui/api/conversation?{query}"))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status, "{query}");
    }

    let out = http
        .post(format!("{base}/ui/logout"))
        .header("cookie", &cookie)
        .header("x-csrf-token", &csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::OK);
    let gone = http
        .get(format!("{base}/ui/api/me"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(
        gone.status(),
        StatusCode::UNAUTHORIZED,
        "a logout ends the login"
    );
}

/// A long conversation of big lines is sent a page at a time, each bounded in bytes,
/// and the pages, followed by their `before`, hold every line once — where one request
/// used to answer the whole session (450 MB in one answer).
#[tokio::test]
async fn a_conversation_is_paged_and_each_page_is_bounded_in_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("json:{}", dir.path().display());
    let key = conversations(&store).await;
    let session = current_session(&store, &key).await;
    // 40 lines of 900 KB and 2,000 small ones, appended to the transcript.
    {
        use std::io::Write;
        let path = session.entry.session_file.clone().unwrap();
        let file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        let mut out = std::io::BufWriter::new(file);
        let big = "x".repeat(900 * 1024);
        for n in 0..2_040u32 {
            let text = if n % 51 == 0 {
                big.as_str()
            } else {
                "a small line"
            };
            writeln!(
                out,
                r#"{{"type":"message","id":"{n:08x}","timestamp":"2026-11-27T10:00:00.000Z","message":{{"role":"user","content":"{text}"}}}}"#
            )
            .unwrap();
        }
        out.flush().unwrap();
    }
    let (_server, base) = serve_ui(&store);
    let http = client();
    let (cookie, _) = log_in(&base).await;
    let mut before: Option<u64> = None;
    let mut offsets = Vec::new();
    let mut pages = 0;
    loop {
        let mut url = format!(
            "{base}/ui/api/conversation?key={}&session={}",
            key.as_str(),
            session.entry.session_id
        );
        if let Some(before) = before {
            url.push_str(&format!("&before={before}"));
        }
        let response = http
            .get(url)
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = response.bytes().await.unwrap();
        assert!(body.len() <= 5 << 20, "a page of {} bytes", body.len());
        let page: Value = serde_json::from_slice(&body).unwrap();
        let mut here: Vec<u64> = page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["offset"].as_u64().unwrap())
            .collect();
        assert!(!here.is_empty());
        assert!(here.windows(2).all(|w| w[0] < w[1]), "a page is in order");
        if let Some(before) = before {
            assert!(
                *here.last().unwrap() < before,
                "a page ends before its `before`"
            );
        }
        here.extend(offsets);
        offsets = here;
        pages += 1;
        match page["before"].as_u64() {
            Some(next) => {
                assert_eq!(page["truncated"], true);
                before = Some(next);
            }
            None => break,
        }
        assert!(pages < 100, "paging ends");
    }
    assert!(pages > 5, "{pages} pages");
    // Every line once, at the offset it starts at in the file.
    let file = std::fs::read(session.entry.session_file.as_ref().unwrap()).unwrap();
    let mut starts = vec![0u64];
    for (at, byte) in file.iter().enumerate() {
        if *byte == b'\n' && at + 1 < file.len() {
            starts.push(at as u64 + 1);
        }
    }
    // (The header line is not an event of the conversation.)
    assert!(
        offsets == starts[1..],
        "{pages} pages hold {} lines at their offsets; the file has {} after its header",
        offsets.len(),
        starts.len() - 1
    );
}

/// Guesses of the secret are checked at a rate for the whole service, not per request:
/// 200 at once on 200 connections got 200 answers in 0.72 s; now a handful are checked
/// and the rest are refused unchecked (429), and the right secret gets in once the
/// guessing stops.
/// The charts' figures, per day, from the transcripts: turns, tokens, failed turns,
/// refused deliveries and reply latency — and a request that asks too much is clamped
/// or refused.
#[tokio::test]
async fn the_activity_figures_count_each_day_from_the_transcripts() {
    use agent_sessions::exactly_once::TurnFailure;
    use agent_sessions::freshness::ManualClock;

    let dir = tempfile::tempdir().unwrap();
    let store = format!("json:{}", dir.path().display());
    let today = chrono::Utc::now();
    let yesterday = today - chrono::Duration::days(1);
    let clock = ManualClock::at_millis(yesterday.timestamp_millis() as u64);
    let writer = SessionManager::connect(&store)
        .await
        .unwrap()
        .clock(clock.clone())
        .build()
        .unwrap();
    let dm = |who: &str, text: &str| InboundMessage::direct("telegram", who, text);
    // Yesterday: two answered turns.
    for (who, text) in [("42", "when is my shift?"), ("43", "and mine?")] {
        let turn = writer.turn(&dm(who, text)).await.unwrap();
        let usage = TurnUsage::tokens(1200, 40, 300, 0);
        turn.complete(TurnReply::from("Thursday.").with_usage(usage))
            .await
            .unwrap();
    }
    // Today: a failed turn, then an answer the channel refused.
    clock.set(today);
    let failed = writer.turn(&dm("42", "book me in")).await.unwrap();
    failed.fail(TurnFailure::KeepInput).await.unwrap();
    let refused = writer.turn(&dm("42", "hello?")).await.unwrap();
    for payload in refused.complete("Booked.").await.unwrap() {
        writer
            .report_delivery(
                &payload,
                Delivery::Failed {
                    reason: "blocked".into(),
                },
            )
            .await
            .unwrap();
    }

    let (_server, base) = serve_ui(&store);
    let (cookie, _) = log_in(&base).await;
    let get = |query: &str| {
        let url = format!("{base}/ui/api/activity{query}");
        let cookie = cookie.clone();
        async move {
            let response = client()
                .get(url)
                .header("cookie", cookie)
                .send()
                .await
                .unwrap();
            (response.status(), response.json::<Value>().await.unwrap())
        }
    };
    let (status, figures) = get("?days=7").await;
    assert_eq!(status, StatusCode::OK, "{figures}");
    let days = figures["days"].as_array().unwrap();
    assert_eq!(days.len(), 7);
    assert_eq!(days[6]["day"], today.date_naive().to_string());
    let (before, now) = (&days[5], &days[6]);
    assert_eq!(before["turns"], 2);
    assert_eq!(
        before["tokensIn"],
        2 * (1200 + 300),
        "uncached input and cache reads"
    );
    assert_eq!(before["tokensOut"], 2 * 40);
    assert_eq!(before["replies"], 2);
    assert!(before["latencyMedianMs"].is_u64(), "{before}");
    assert_eq!(
        (
            before["failedTurns"].as_u64(),
            before["refusedDeliveries"].as_u64()
        ),
        (Some(0), Some(0))
    );
    assert_eq!(now["turns"], 2);
    assert_eq!(now["failedTurns"], 1);
    assert_eq!(now["refusedDeliveries"], 1);
    assert!(days[..5].iter().all(|d| d["turns"] == 0), "{days:?}");
    assert_eq!(
        figures["sessions"], 3,
        "42's of yesterday (closed by the daily reset), 43's, and 42's of today"
    );

    // Asking too much is clamped; nonsense is refused, and nobody else gets in.
    assert_eq!(
        get("?days=100000").await.1["days"]
            .as_array()
            .unwrap()
            .len(),
        90
    );
    assert_eq!(get("?days=0").await.1["days"].as_array().unwrap().len(), 1);
    assert_eq!(get("?days=many").await.0, StatusCode::BAD_REQUEST);
    assert_eq!(get("?agent=../etc").await.0, StatusCode::BAD_REQUEST);
    let stranger = client()
        .get(format!("{base}/ui/api/activity"))
        .send()
        .await
        .unwrap();
    assert_eq!(stranger.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn failed_logins_are_limited_across_the_service() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("json:{}", dir.path().display());
    conversations(&store).await;
    let (_server, base) = serve_ui(&store);
    let guesses: Vec<_> = (0..200)
        .map(|n| {
            let base = base.clone();
            tokio::spawn(async move {
                client()
                    .post(format!("{base}/ui/login"))
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body(format!("secret=guess{n}"))
                    .send()
                    .await
                    .unwrap()
                    .status()
            })
        })
        .collect();
    let mut checked = 0;
    let mut refused = 0;
    for guess in guesses {
        match guess.await.unwrap() {
            StatusCode::SEE_OTHER => checked += 1,
            StatusCode::TOO_MANY_REQUESTS => refused += 1,
            other => panic!("a guess answered {other}"),
        }
    }
    assert!(
        checked <= 15,
        "{checked} guesses were checked, {refused} refused"
    );
    assert_eq!(checked + refused, 200);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (cookie, _) = log_in(&base).await;
    assert!(!cookie.is_empty());
}

#[test]
fn serve_ui_needs_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_agent-sessions"))
        .env_remove("AGENT_SESSIONS_SECRET")
        .env_remove("AGENT_SESSIONS_STORE")
        .args(["--store", &format!("json:{}", dir.path().display())])
        .args(["serve", "--listen", "127.0.0.1:0", "--ui"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--ui needs --secret"), "{stderr}");
}

// ---- in the browser ----

/// chromedriver on a free port: the process and the address to connect to.
fn chromedriver() -> (Killed, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "chromedriver did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (Killed(child), format!("http://127.0.0.1:{port}"))
}

async fn browser(driver: &str, profile: &Path) -> Client {
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": CHROMIUM,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1280,860",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(driver)
        .await
        .expect("chromedriver starts a Chromium session")
}

/// Waits until `check` returns `Some`, at most 20 seconds.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The text of every element `css` selects.
async fn texts(browser: &Client, css: &str) -> Vec<String> {
    let mut texts = Vec::new();
    for element in browser
        .find_all(Locator::Css(css))
        .await
        .unwrap_or_default()
    {
        if let Ok(Some(text)) = element.prop("textContent").await {
            texts.push(text);
        }
    }
    texts
}

async fn screenshot(browser: &Client, name: &str) {
    let png = browser.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&target, &png).unwrap();
    if std::env::var_os("AGENT_SESSIONS_SCREENSHOTS").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/images");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::write(docs.join(name), &png).unwrap();
    }
}

/// An operator logs in, lists, opens a session, sees a line another process appends
/// arrive live, resets the session, and a message crafted to inject script shows as
/// the text it is.
#[tokio::test]
async fn an_operator_inspects_and_resets_a_session_in_a_real_browser() {
    if !Path::new(CHROMEDRIVER).exists() || !Path::new(CHROMIUM).exists() {
        if std::env::var_os("AGENT_SESSIONS_SKIP_BROWSER").is_some() {
            eprintln!("skipped: no Chromium (AGENT_SESSIONS_SKIP_BROWSER is set)");
            return;
        }
        panic!(
            "the browser test needs {CHROMIUM} and {CHROMEDRIVER}: `apt-get install chromium \
             chromium-driver` (or set AGENT_SESSIONS_SKIP_BROWSER=1 to skip it)"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let store = format!("json:{}", dir.path().display());
    let key = conversations(&store).await;
    let (_server, base) = serve_ui(&store);
    let (_driver, driver_url) = chromedriver();
    let profile = tempfile::tempdir().unwrap();
    let browser = browser(&driver_url, profile.path()).await;

    // The login form: a wrong secret is refused, the right one lists the sessions.
    browser.goto(&format!("{base}/ui")).await.unwrap();
    assert!(browser
        .current_url()
        .await
        .unwrap()
        .path()
        .ends_with("/ui/login"));
    let sign_in = |secret: &'static str| {
        let browser = browser.clone();
        async move {
            let field = browser.find(Locator::Id("secret")).await.unwrap();
            field.send_keys(secret).await.unwrap();
            browser
                .find(Locator::Id("sign-in"))
                .await
                .unwrap()
                .click()
                .await
                .unwrap();
        }
    };
    sign_in("not the secret").await;
    eventually("the failure to show", || async {
        let failed = browser.find(Locator::Id("failed")).await.ok()?;
        failed.is_displayed().await.ok()?.then_some(())
    })
    .await;
    sign_in(SECRET).await;
    let rows = eventually("the sessions listed", || async {
        let rows = texts(&browser, "#sessions tr td.key a").await;
        (rows.len() == 2).then_some(rows)
    })
    .await;
    assert!(rows.contains(&key.to_string()), "{rows:?}");
    assert!(
        rows.contains(&"agent:main:whatsapp:dm:+15550100".to_owned()),
        "{rows:?}"
    );
    // The login is a cookie the page's script cannot read.
    let visible = browser
        .execute("return document.cookie", vec![])
        .await
        .unwrap();
    assert_eq!(visible, json!(""));
    screenshot(&browser, "inspector-sessions.png").await;

    // One session: the conversation, with the crafted message as plain text.
    let link = browser
        .find(Locator::XPath(&format!("//a[text()='{key}']")))
        .await
        .unwrap();
    link.click().await.unwrap();
    eventually("the conversation", || async {
        let said = texts(&browser, "#conversation .text").await;
        said.iter().any(|t| t == "Thursday at 9.").then_some(())
    })
    .await;
    let said = texts(&browser, "#conversation .text").await;
    assert!(
        said.iter().any(|t| t == HOSTILE),
        "shown as its text: {said:?}"
    );
    let injected = browser
        .find_all(Locator::Css("#conversation img, #conversation script"))
        .await
        .unwrap();
    assert!(injected.is_empty(), "no element came from a message");
    assert_ne!(browser.title().await.unwrap(), "pwned");

    // A line another process appends arrives without a reload.
    let writer = manager(&store).await;
    let turn = writer
        .turn(&InboundMessage::direct(
            "telegram",
            "42",
            "appended while you watch",
        ))
        .await
        .unwrap();
    let usage = TurnUsage::tokens(2600, 30, 0, 0);
    let payloads = turn
        .complete(TurnReply::from("seen live").with_usage(usage))
        .await
        .unwrap();
    eventually("the appended line to arrive", || async {
        let said = texts(&browser, "#conversation .text").await;
        said.iter().any(|t| t == "seen live").then_some(())
    })
    .await;
    // The channel's report on that reply shows as a mark on it, not as a line of JSON;
    // a later report of the same part replaces it.
    let refused = Delivery::Failed {
        reason: "Forbidden: bot was blocked by the user".into(),
    };
    writer.report_delivery(&payloads[0], refused).await.unwrap();
    eventually("the delivery mark", || async {
        let marks = texts(&browser, "#conversation li[data-line] .mark").await;
        (marks == ["not delivered: Forbidden: bot was blocked by the user"]).then_some(())
    })
    .await;
    writer
        .report_delivery(&payloads[0], Delivery::Delivered)
        .await
        .unwrap();
    eventually("the delivery mark replaced", || async {
        let marks = texts(&browser, "#conversation li[data-line] .mark").await;
        (marks == ["delivered"]).then_some(())
    })
    .await;
    let said = texts(&browser, "#conversation .text").await;
    assert!(
        !said
            .iter()
            .any(|t| t.contains("\"line\"") || t.contains("status")),
        "no report shown as raw data: {said:?}"
    );
    let usage = texts(&browser, "#usage li .number").await;
    assert_eq!(
        usage,
        ["1240 tokens", "1940 tokens", "2630 tokens"],
        "usage per reply"
    );
    screenshot(&browser, "inspector-session.png").await;

    // A run in progress, and a message that waits for it, show on the page.
    let running = writer
        .turn(&InboundMessage::direct(
            "telegram",
            "42",
            "change my booking",
        ))
        .await
        .unwrap();
    let waiting = {
        let store = store.clone();
        tokio::spawn(async move {
            let other = manager(&store).await;
            let turn = other
                .turn(&InboundMessage::direct(
                    "telegram",
                    "42",
                    "make it Saturday",
                ))
                .await
                .unwrap();
            turn.complete("Saturday it is.").await.unwrap();
        })
    };
    let lane = eventually("the run and its queue", || async {
        let lane = texts(&browser, "#lane").await.pop()?;
        (lane.contains("a model run holds it")
            && lane.contains("1 message waits: make it Saturday"))
        .then_some(lane)
    })
    .await;
    assert!(lane.contains("since"), "{lane}");
    running.complete("Which day?").await.unwrap();
    waiting.await.unwrap();
    eventually("the queue emptied", || async {
        let lane = texts(&browser, "#lane").await.pop()?;
        (lane == "no run; nothing queued").then_some(())
    })
    .await;
    // An undo of the last exchange marks each line it took back.
    let undone = writer.session(&key).undo_last_turn().await.unwrap();
    let undone: Vec<&str> = undone.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(undone.last(), Some(&"Saturday it is."), "{undone:?}");
    eventually("the undo marks", || async {
        let marks = texts(&browser, "#conversation li[data-line] .mark").await;
        let marked = marks.iter().filter(|m| m.starts_with("undone")).count();
        (marked == undone.len()).then_some(())
    })
    .await;

    // What the model is given, on the other tab.
    browser
        .find(Locator::Id("show-context"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    eventually("the model's context", || async {
        let said = texts(&browser, "#context .text").await;
        said.iter()
            .any(|t| t == "appended while you watch")
            .then_some(())
    })
    .await;

    // An action from the page without its token is refused, even from the page itself.
    let forged = browser
        .execute_async(
            "const done = arguments[arguments.length - 1];
             fetch('/ui/api/reset', {method: 'POST', headers: {'content-type': 'application/json'},
               body: JSON.stringify({key: arguments[0]})}).then(r => done(r.status));",
            vec![json!(key.as_str())],
        )
        .await
        .unwrap();
    assert_eq!(forged, json!(403));

    // Reset, confirmed in the dialog: the key moves to a new session.
    let before = writer
        .session(&key)
        .get()
        .await
        .unwrap()
        .unwrap()
        .entry
        .session_id;
    browser
        .find(Locator::Id("reset"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser.accept_alert().await.unwrap();
    let after = eventually("the reset", || async {
        let now = writer.session(&key).get().await.ok()??.entry.session_id;
        (now != before).then_some(now)
    })
    .await;
    eventually(
        "the page to show the new session and the old one as earlier",
        || async {
            let summary = texts(&browser, "#summary").await.join("");
            let earlier = texts(&browser, "#predecessors").await.join("");
            (summary.contains(&after) && earlier.contains(&before)).then_some(())
        },
    )
    .await;

    // The charts: each bar is the day's figure the service counted.
    browser
        .find(Locator::LinkText("Activity"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let bars = eventually("the turns chart", || async {
        let bars = browser
            .execute(
                "return [...document.querySelectorAll('#chart-turns rect')]
                   .map(r => [r.dataset.day, Number(r.dataset.value)])",
                vec![],
            )
            .await
            .ok()?;
        (bars.as_array()?.len() == 14).then_some(bars)
    })
    .await;
    let (cookie, _) = log_in(&base).await;
    let figures: Value = client()
        .get(format!("{base}/ui/api/activity?days=14"))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let counted: Vec<Value> = figures["days"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| json!([d["day"], d["turns"]]))
        .collect();
    assert_eq!(bars, json!(counted));
    assert!(
        counted.last().unwrap()[1].as_u64().unwrap() >= 5,
        "today's turns: {counted:?}"
    );
    for chart in ["tokens", "failed", "refused", "latency"] {
        let drawn = browser
            .find_all(Locator::Css(&format!("#chart-{chart} svg.bars")))
            .await
            .unwrap();
        assert_eq!(drawn.len(), 1, "the {chart} chart");
    }
    screenshot(&browser, "inspector-activity.png").await;
    browser.close().await.unwrap();
}
