//! A headless Chromium the test drives: conformance/console/drive.mjs
//! (Playwright with Debian's Chromium) in a child process, one JSON command
//! a line each way. The scenario and every assertion stay here; the script
//! only does what a person at a browser does and says what the page shows.
//!
//! Where things are: Chromium at `ABSTORE_TEST_CHROMIUM`, else `chromium` on
//! PATH (Debian's package; .ci/run installs it); the driver at
//! `ABSTORE_TEST_CONSOLE_DRIVER`, else `target/console-browser/drive.mjs`
//! with its pinned `playwright-core` beside it, where scripts/test installs
//! it from conformance/console/package.json.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// How long one browser step may take before the test calls it stuck (a
/// navigation of a debug build on a shared machine, a 1 MB page).
const STEP: Duration = Duration::from_secs(60);

/// The check's name when the browser cannot run, and why.
pub fn unavailable() -> Option<String> {
    if chromium().is_none() {
        return Some("chromium is not installed (Debian's chromium)".to_owned());
    }
    if crate::support::installed("node").is_none() {
        return Some("node is not installed".to_owned());
    }
    let driver = driver();
    let playwright = driver
        .parent()
        .map(|dir| dir.join("node_modules/playwright-core"));
    if !driver.is_file() || !playwright.is_some_and(|p| p.is_dir()) {
        return Some(format!(
            "the browser driver is not installed at {} (scripts/test installs \
             conformance/console/package.json there)",
            driver.display()
        ));
    }
    None
}

fn chromium() -> Option<PathBuf> {
    std::env::var_os("ABSTORE_TEST_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| crate::support::installed("chromium"))
}

/// The workspace's target directory (where scripts/test keeps the driver and
/// the tests leave their screenshots).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"))
}

fn driver() -> PathBuf {
    std::env::var_os("ABSTORE_TEST_CONSOLE_DRIVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/console-browser/drive.mjs")
        })
}

/// One running browser; its pages are separate people (cookie jars).
pub struct Browser {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Browser {
    /// Launch it (after [`unavailable`] found everything it needs).
    pub async fn launch() -> Browser {
        let chromium = chromium().expect("chromium (checked by unavailable())");
        let mut child = Command::new("node")
            .arg(driver())
            .arg(chromium)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn node with the console driver");
        let stdin = child.stdin.take().expect("driver stdin");
        let stdout = BufReader::new(child.stdout.take().expect("driver stdout")).lines();
        Browser {
            child,
            stdin,
            stdout,
        }
    }

    /// Send one command; its value, or the driver's error.
    pub async fn try_call(&mut self, command: Value) -> Result<Value, String> {
        let mut line = command.to_string();
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .await
            .map_err(|e| format!("writing to the driver: {e}"))?;
        let reply = tokio::time::timeout(STEP, self.stdout.next_line())
            .await
            .map_err(|_| format!("the browser did not answer within {STEP:?}: {command}"))?
            .map_err(|e| format!("reading the driver: {e}"))?
            .ok_or_else(|| format!("the driver exited: {:?}", self.child.try_wait()))?;
        let reply: Value =
            serde_json::from_str(&reply).map_err(|e| format!("driver said {reply:?}: {e}"))?;
        if reply["ok"] == json!(true) {
            Ok(reply["value"].clone())
        } else {
            Err(reply["error"].as_str().unwrap_or("?").to_owned())
        }
    }

    /// The same, panicking with the command when it fails.
    pub async fn call(&mut self, command: Value) -> Value {
        match self.try_call(command.clone()).await {
            Ok(value) => value,
            Err(error) => panic!("browser step {command} failed: {error}"),
        }
    }

    /// A new person at a window `width` px wide.
    pub async fn open(&mut self, id: &str, width: u32) -> Page<'_> {
        self.call(json!({"op": "open", "id": id, "width": width, "height": 900}))
            .await;
        Page {
            browser: self,
            id: id.to_owned(),
        }
    }

    /// The same with the page's Content-Security-Policy switched off, so
    /// that only the server's escaping stands between a payload and the page.
    pub async fn open_without_csp(&mut self, id: &str) -> Page<'_> {
        self.call(json!({"op": "open", "id": id, "width": 1280, "height": 900, "bypassCSP": true}))
            .await;
        Page {
            browser: self,
            id: id.to_owned(),
        }
    }

    /// A page opened before, by its id.
    pub fn page(&mut self, id: &str) -> Page<'_> {
        Page {
            browser: self,
            id: id.to_owned(),
        }
    }
}

/// One person's window.
pub struct Page<'b> {
    browser: &'b mut Browser,
    id: String,
}

/// Where a navigation ended: the main response's status and the page's URL.
#[derive(Debug)]
pub struct Landed {
    pub status: Option<u16>,
    pub at: String,
}

fn landed(v: &Value) -> Landed {
    Landed {
        status: v["status"].as_u64().and_then(|s| u16::try_from(s).ok()),
        at: v["at"].as_str().unwrap_or_default().to_owned(),
    }
}

impl Page<'_> {
    async fn call(&mut self, mut command: Value) -> Value {
        command["id"] = json!(self.id);
        self.browser.call(command).await
    }

    pub async fn try_call(&mut self, mut command: Value) -> Result<Value, String> {
        command["id"] = json!(self.id);
        self.browser.try_call(command).await
    }

    pub async fn goto(&mut self, url: &str) -> Landed {
        landed(&self.call(json!({"op": "goto", "url": url})).await)
    }

    /// Click the first match of `selector` (a link or button) and wait for
    /// the navigation it starts.
    pub async fn follow(&mut self, selector: &str) -> Landed {
        landed(
            &self
                .call(json!({"op": "follow", "selector": selector}))
                .await,
        )
    }

    /// Fill `form`'s fields by name and press its submit button.
    pub async fn submit(&mut self, form: &str, fields: Value) -> Landed {
        landed(
            &self
                .call(json!({"op": "submit", "form": form, "fields": fields}))
                .await,
        )
    }

    /// The first match's rendered text, `None` when nothing matches.
    pub async fn text(&mut self, selector: &str) -> Option<String> {
        self.call(json!({"op": "text", "selector": selector}))
            .await
            .as_str()
            .map(str::to_owned)
    }

    pub async fn texts(&mut self, selector: &str) -> Vec<String> {
        strings(
            &self
                .call(json!({"op": "texts", "selector": selector}))
                .await,
        )
    }

    /// Attribute `name` of every match.
    pub async fn attrs(&mut self, selector: &str, name: &str) -> Vec<String> {
        strings(
            &self
                .call(json!({"op": "attrs", "selector": selector, "name": name}))
                .await,
        )
    }

    pub async fn count(&mut self, selector: &str) -> u64 {
        self.call(json!({"op": "count", "selector": selector}))
            .await
            .as_u64()
            .unwrap_or(0)
    }

    /// Wait until `selector` matches: how long it took, or the driver's
    /// timeout error.
    pub async fn wait(&mut self, selector: &str, within: Duration) -> Result<Duration, String> {
        let ms = u64::try_from(within.as_millis()).unwrap_or(u64::MAX);
        self.try_call(json!({"op": "wait", "selector": selector, "timeout": ms}))
            .await
            .map(|v| Duration::from_millis(v.as_u64().unwrap_or(0)))
    }

    pub async fn eval(&mut self, expression: &str) -> Value {
        self.call(json!({"op": "eval", "expression": expression}))
            .await
    }

    pub async fn screenshot(&mut self, path: &std::path::Path, full_page: bool) {
        self.call(json!({"op": "screenshot", "path": path, "fullPage": full_page}))
            .await;
    }

    pub async fn cookies(&mut self) -> Vec<Value> {
        self.call(json!({"op": "cookies"}))
            .await
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Dialogs opened, uncaught page errors and console lines so far.
    pub async fn reports(&mut self) -> Value {
        self.call(json!({"op": "reports"})).await
    }

    /// A request carrying this page's cookies, with `headers` (no redirect
    /// followed): `(status, body)`.
    pub async fn request(
        &mut self,
        method: &str,
        url: &str,
        form: Value,
        headers: Value,
    ) -> (u16, String) {
        let v = self
            .call(json!({"op": "request", "method": method, "url": url, "form": form, "headers": headers}))
            .await;
        (
            v["status"]
                .as_u64()
                .and_then(|s| u16::try_from(s).ok())
                .unwrap_or(0),
            v["body"].as_str().unwrap_or_default().to_owned(),
        )
    }

    /// A hostile site at `origin` whose form posts `fields` to `action`, as
    /// the browser sends it (its Origin, its cookie rules).
    pub async fn cross_site_post(&mut self, origin: &str, action: &str, fields: Value) -> Landed {
        landed(
            &self
                .call(json!({"op": "crossSitePost", "origin": origin, "action": action, "fields": fields}))
                .await,
        )
    }

    /// The value of the hidden `csrf` field of the page's first form that
    /// has one.
    pub async fn csrf(&mut self) -> String {
        self.attrs("input[name=\"csrf\"]", "value")
            .await
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("page {} has no csrf field", self.id))
    }

    /// `data-page` of the page's `<main>`, and the `data-error` on it or
    /// inside it, if any.
    pub async fn kind(&mut self) -> (Option<String>, Option<String>) {
        let v = self
            .eval(
                "(() => { const m = document.querySelector('main[data-page]'); \
                 if (!m) return [null, null]; \
                 const e = m.dataset.error ? m : m.querySelector('[data-error]'); \
                 return [m.dataset.page, e ? e.dataset.error : null]; })()",
            )
            .await;
        (
            v[0].as_str().map(str::to_owned),
            v[1].as_str().map(str::to_owned),
        )
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}
