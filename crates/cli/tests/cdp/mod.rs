//! A small Chrome DevTools Protocol client, so tests drive headless Chromium as a user would:
//! open a page, read it with JavaScript, and press, drag and release the real mouse
//! (`Input.dispatchMouseEvent` goes through the browser's input pipeline, like a user's mouse,
//! not `element.click()`).

use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

pub struct Browser {
    child: Child,
    ws: WebSocket<MaybeTlsStream<TcpStream>>,
    next_id: u64,
}

/// The Chromium executable, if installed. Under CI (`CI` set) a missing one fails the test
/// instead of skipping it: CI installs it (.ci/run).
pub fn chromium() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser"].into_iter().find(|c| {
        Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium is missing: CI must have it (apt-get install chromium)"
        );
        eprintln!(
            "SKIPPED the browser check: chromium is not installed (apt-get install chromium)"
        );
    }
    found
}

impl Browser {
    /// Starts headless Chromium with its profile in `dir` and connects to its first page.
    pub fn start(chromium: &str, dir: &Path) -> Browser {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap();
        let child = Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--remote-debugging-port=0",
                "--window-size=1400,1000",
            ])
            .arg(format!("--user-data-dir={}", dir.display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Chromium writes the port it picked to DevToolsActivePort in its profile directory.
        let port_file = dir.join("DevToolsActivePort");
        let port: u16 = poll("Chromium's DevTools port", || {
            std::fs::read_to_string(&port_file)
                .ok()?
                .lines()
                .next()?
                .parse()
                .ok()
        });
        let ws_url = poll("Chromium's page target", || {
            let body = http_get(&format!("127.0.0.1:{port}"), "/json/list")?;
            let list: Value = serde_json::from_slice(&body).ok()?;
            list.as_array()?.iter().find(|t| t["type"] == "page")?["webSocketDebuggerUrl"]
                .as_str()
                .map(str::to_string)
        });
        let (mut ws, _) = tungstenite::connect(ws_url.as_str()).unwrap();
        if let MaybeTlsStream::Plain(s) = ws.get_mut() {
            s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        }
        Browser {
            child,
            ws,
            next_id: 1,
        }
    }

    /// Sends a command and returns its result (events in between are skipped).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let msg = json!({ "id": id, "method": method, "params": params });
        self.ws.send(Message::text(msg.to_string())).unwrap();
        loop {
            let reply = match self.ws.read().unwrap() {
                Message::Text(t) => serde_json::from_str::<Value>(t.as_str()).unwrap(),
                _ => continue,
            };
            if reply["id"] == json!(id) {
                assert!(reply.get("error").is_none(), "{method}: {reply}");
                return reply["result"].clone();
            }
        }
    }

    pub fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", json!({ "url": url }));
    }

    /// The value of a JavaScript expression in the page (awaited if it is a promise).
    pub fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
        );
        assert!(
            r.get("exceptionDetails").is_none(),
            "{expression}: {}",
            r["exceptionDetails"]
        );
        r["result"]["value"].clone()
    }

    /// Evaluates `expression` until it gives something other than null, false or "" (an
    /// exception, e.g. while the page is still loading, counts as not yet).
    pub fn wait(&mut self, what: &str, expression: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        let guarded = format!(
            "(() => {{ try {{ return ({expression}); }} catch (e) {{ return null; }} }})()"
        );
        loop {
            let v = self.eval(&guarded);
            if !(v.is_null() || v == json!(false) || v == json!("")) {
                return v;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The centre of the element `selector` and its box: (x, y, width, height).
    pub fn rect(&mut self, selector: &str) -> (f64, f64, f64, f64) {
        let r = self.eval(&format!(
            "(() => {{ const r = document.querySelector({}).getBoundingClientRect(); \
             return [r.left, r.top, r.width, r.height]; }})()",
            json!(selector)
        ));
        let n = |i: usize| r[i].as_f64().unwrap();
        (n(0), n(1), n(2), n(3))
    }

    fn mouse(&mut self, kind: &str, x: f64, y: f64, buttons: u8) {
        self.call(
            "Input.dispatchMouseEvent",
            json!({ "type": kind, "x": x, "y": y, "button": "left", "buttons": buttons,
                    "clickCount": 1 }),
        );
    }

    /// A left click in the middle of `selector`.
    pub fn click(&mut self, selector: &str) {
        let (l, t, w, h) = self.rect(selector);
        let (x, y) = (l + w / 2.0, t + h / 2.0);
        self.mouse("mouseMoved", x, y, 0);
        self.mouse("mousePressed", x, y, 1);
        self.mouse("mouseReleased", x, y, 0);
    }

    /// Presses the left button at `from`, moves to `to` in steps, and releases it there
    /// (page coordinates).
    pub fn drag(&mut self, from: (f64, f64), to: (f64, f64)) {
        self.mouse("mouseMoved", from.0, from.1, 0);
        self.mouse("mousePressed", from.0, from.1, 1);
        for i in 1..=5 {
            let f = f64::from(i) / 5.0;
            let (x, y) = (from.0 + (to.0 - from.0) * f, from.1 + (to.1 - from.1) * f);
            self.mouse("mouseMoved", x, y, 1);
        }
        self.mouse("mouseReleased", to.0, to.1, 0);
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // `chromium` is a wrapper script whose browser is its child: killing the script would
        // leave the browser running, so ask the browser itself to close first.
        let close = json!({ "id": 0, "method": "Browser.close" });
        let _ = self.ws.send(Message::text(close.to_string()));
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn poll<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// GET over HTTP/1.1, reading the body by its Content-Length (Chromium's DevTools server keeps
/// the connection open).
fn http_get(addr: &str, path: &str) -> Option<Vec<u8>> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut resp = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        resp.extend_from_slice(&buf[..n]);
        let Some(split) = resp.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&resp[..split]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))?
            .trim()
            .parse()
            .ok()?;
        if resp.len() >= split + 4 + len {
            return Some(resp[split + 4..split + 4 + len].to_vec());
        }
    }
}
