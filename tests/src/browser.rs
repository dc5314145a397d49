//! The status page in a real headless browser: Debian's `chromium` driven through
//! `chromedriver` over WebDriver (fantoccini), and the steps a person takes there (signing in
//! with the link `/console` gives them in Discord, waiting for the live page to show
//! something).
//!
//! A browser test starts with [`binaries`]: without chromium and chromedriver it says so and
//! passes, unless `SANDPIPER_REQUIRE_BROWSER=1` (CI installs them and sets it).

use std::ops::Deref;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::discord_harness::response_text;
use crate::fake_discord::{CHANNEL_ID, FakeDiscord, FakeUser};

/// How long a page or the fake Discord is waited for.
pub const WAIT: Duration = Duration::from_secs(30);
/// How often a condition is asked of the page while waiting.
const POLL_EVERY: Duration = Duration::from_millis(50);

/// Where chromium and chromedriver are.
#[derive(Debug, Clone)]
pub struct Binaries {
    chromium: PathBuf,
    chromedriver: PathBuf,
}

/// Chromium and chromedriver, or `None`: test `test` is then skipped (and says so), unless
/// `SANDPIPER_REQUIRE_BROWSER=1`, where their absence fails it.
pub fn binaries(test: &str) -> Option<Binaries> {
    let chromium = find("chromium", &["/usr/lib/chromium/chromium"]);
    let chromedriver = find("chromedriver", &["/usr/lib/chromium/chromedriver"]);
    if let (Some(chromium), Some(chromedriver)) = (chromium, chromedriver) {
        return Some(Binaries {
            chromium,
            chromedriver,
        });
    }
    assert!(
        std::env::var("SANDPIPER_REQUIRE_BROWSER").as_deref() != Ok("1"),
        "SANDPIPER_REQUIRE_BROWSER=1 but chromium or chromedriver is missing \
         (apt-get install chromium chromium-driver)"
    );
    eprintln!(
        "{test}: skipped: chromium and chromedriver are not installed \
         (apt-get install chromium chromium-driver)"
    );
    None
}

/// `name` on PATH, or at one of Debian's places.
fn find(name: &str, also: &[&str]) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name));
    on_path
        .chain(also.iter().map(PathBuf::from))
        .find(|p| p.is_file())
}

/// A chromedriver on a free local port, killed on drop.
struct Driver {
    child: tokio::process::Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

impl Driver {
    async fn start(chromedriver: &std::path::Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = tokio::process::Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver starts");
        let deadline = Instant::now() + WAIT;
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }
}

/// One headless chromium with a profile of its own, driven by its own chromedriver; both go
/// when it is dropped. Derefs to the WebDriver [`Client`].
pub struct Browser {
    client: Client,
    _driver: Driver,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a browser session in a fresh profile.
    pub async fn open(binaries: &Binaries) -> Self {
        let driver = Driver::start(&binaries.chromedriver).await;
        let profile = tempfile::tempdir().expect("a browser profile");
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": binaries.chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                    "--window-size=1280,1400",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&driver.url)
            .await
            .expect("a WebDriver session");
        Self {
            client,
            _driver: driver,
            _profile: profile,
        }
    }

    /// Ends the browser session.
    pub async fn close(self) {
        let Self { client, .. } = self;
        client.close().await.expect("the browser closes");
    }
}

impl Deref for Browser {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

/// Waits until `script` (a JS function body) returns true in the page; the page's source is
/// in the panic when it does not within [`WAIT`].
pub async fn until(client: &Client, what: &str, script: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let ok = client.execute(script, vec![]).await.expect("script runs");
        if ok == Value::Bool(true) {
            return;
        }
        if Instant::now() > deadline {
            let page = client.source().await.unwrap_or_default();
            panic!("timed out waiting for {what}; page:\n{page}");
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// The rendered text of the element `css` names, read in one script (the live part is
/// replaced as updates arrive, so a found element can go stale before it is read).
pub async fn text_of(client: &Client, css: &str) -> String {
    let got = client
        .execute(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : null;",
            vec![json!(css)],
        )
        .await
        .expect("script runs");
    match got {
        Value::String(s) => s.trim().to_owned(),
        _ => panic!("no element {css}"),
    }
}

/// `user` types `/console` in the channel; the private answer's link, made relative.
pub async fn console_link(fake: &FakeDiscord, user: &FakeUser) -> String {
    let id = fake.slash(CHANNEL_ID, user, "console", json!([])).await;
    let reply = fake
        .wait_until(WAIT, "the /console answer", |f| {
            f.interaction_responses(id).pop()
        })
        .await;
    assert_eq!(reply["data"]["flags"], json!(64), "only the person sees it");
    let answer = response_text(&[reply]);
    let at = answer.find("/sign-in/").expect("a sign-in link");
    answer[at..].trim().to_owned()
}

/// Opens the sign-in link `link`: opening it signs nobody in (the session cookie is what it
/// was), its button does.
pub async fn sign_in_with(client: &Client, base: &str, link: &str) {
    let session = async || {
        client
            .get_named_cookie("sandpiper_session")
            .await
            .ok()
            .map(|c| c.value().to_owned())
    };
    let before = session().await;
    client
        .goto(&format!("{base}{link}"))
        .await
        .expect("the link");
    until(
        client,
        "the link's page",
        "return !!document.getElementById('sign-in')",
    )
    .await;
    assert_eq!(session().await, before, "opening the link signed nobody in");
    client
        .find(Locator::Id("sign-in"))
        .await
        .expect("the button")
        .click()
        .await
        .expect("signs in");
}

/// Signs the browser out (when signed in) and in again as `user`, with the link `/console`
/// gave them; waits for their page.
pub async fn sign_in_as(client: &Client, fake: &FakeDiscord, base: &str, user: &FakeUser) {
    client.goto(&format!("{base}/")).await.expect("the page");
    if let Ok(out) = client.find(Locator::Css("form.signout button")).await {
        out.click().await.expect("signs out");
        until(
            client,
            "the sign-in page",
            "return !!document.getElementById('token')",
        )
        .await;
    }
    let link = console_link(fake, user).await;
    sign_in_with(client, base, &link).await;
    until(
        client,
        "the page",
        "return !!document.getElementById('workstreams')",
    )
    .await;
}
