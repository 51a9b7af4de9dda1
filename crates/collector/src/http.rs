//! The HTTP side: the JSON API the UI and the tests use, and the embedded web UI at `/`.
//!
//! - `GET /api/vms`: `[{id, pid, command, host, jvm, os, connected, connected_at, last_seen, ...}]`
//! - `GET /api/vms/{id}/threads`: the latest snapshot, `[{id, name, group, state, order, frames}]`,
//!   frames as `package.Class.method` strings, top of stack first (`lines` beside them).
//! - `GET /api/vms/{id}/profile?format=collapsed|pprof|html|speedscope|dot|jvmprof&from=&to=`:
//!   the VM's samples received in `[from, to]` (Unix ms; default everything) merged into one
//!   profile, written by jvmprof_profile's exporters; `download=1` makes it an attachment.
//! - `GET /api/vms?labels=service:checkout;env:prod`: only the VMs with all those labels.
//! - `GET /api/labels`: `{key: [values]}` over all VMs.
//! - `GET /api/profile?labels=...&format=&from=&to=`: the samples of every VM with those labels
//!   merged into one profile (a service's profile over a time range); 404 when none has any.
//! - `DELETE /api/vms/{id}`: deletes a VM that is not connected with all its data (204; 409
//!   while it is connected, 404 for an unknown id). Ids are never reused.
//! - `GET /api/stats`: ingest counters since start (connections, bytes, snapshots, samples, ...).
//! - `GET /metrics`: the same counters and gauges (VMs, connected VMs, drops, store backlog,
//!   bytes held) in Prometheus' text format, under the same token rule.
//! - `POST /api/vms/{id}/heap`: an HPROF heap dump of the VM as the body (with `Authorization:
//!   Bearer TOKEN` when the collector has a token); 202 once stored, analysed in the background.
//!   `GET /api/vms/{id}/heap?format=html|json`: its report (202 while analysing).
//! - `POST /ingest?name=APP{k=v,...}&from=S&until=S&format=pprof`: Pyroscope's ingest API, a
//!   pprof profile (gzipped or not) as the body, stored as a batch of the VM its labels name
//!   (see [`crate::ingest`]); 200 `{"vm": ID}`, 400 with the reason for bad input, 413 for a
//!   body over 64 MiB, 429 when the client made too many new VMs this minute.

use crate::heaps::HeapState;
use crate::hub::Hub;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Json, Response};
use axum::routing::get;
use jvmprof_profile::{ExportOptions, Format, ThreadState};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

const INDEX: &str = include_str!("ui/index.html");

/// Hands axum the connections the sniffer found to be HTTP.
pub struct ChannelListener {
    pub rx: mpsc::Receiver<(TcpStream, SocketAddr)>,
    pub local: SocketAddr,
}

impl axum::serve::Listener for ChannelListener {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        match self.rx.recv().await {
            Some(x) => x,
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}

pub fn router(hub: Arc<Hub>) -> Router {
    Router::new()
        .route("/", get(|| async { Html(INDEX) }))
        .route("/api/vms", get(vms))
        .route("/api/labels", get(labels))
        .route("/api/profile", get(merged_profile))
        .route("/api/stats", get(stats))
        .route("/metrics", get(metrics))
        .route("/api/vms/{id}", axum::routing::delete(delete_vm))
        .route("/api/vms/{id}/threads", get(threads))
        .route("/api/vms/{id}/profile", get(profile))
        .route("/api/vms/{id}/series", get(series))
        .route("/api/diff", get(diff))
        .route("/api/trace", get(joined_trace))
        .route(
            "/api/vms/{id}/heap",
            get(heap_report)
                .post(heap_upload)
                .layer(axum::extract::DefaultBodyLimit::disable()),
        )
        .route(
            "/ingest",
            axum::routing::post(ingest)
                .layer(axum::extract::DefaultBodyLimit::max(
                    crate::ingest::MAX_BODY,
                ))
                .layer(axum::middleware::from_fn_with_state(
                    Arc::new(tokio::sync::Semaphore::new(INGESTS_AT_ONCE)),
                    take_turn,
                )),
        )
        .layer(axum::middleware::from_fn_with_state(hub.clone(), auth))
        .with_state(hub)
}

/// The client address, for handlers that need it (see `into_make_service_with_connect_info`).
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub SocketAddr);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, ChannelListener>>
    for Peer
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, ChannelListener>) -> Peer {
        Peer(*stream.remote_addr())
    }
}

/// Pushes received and decoded at once: each may hold its body, the un-gzipped message and
/// what it decodes to (see [`crate::ingest`]'s limits); more wait their turn.
const INGESTS_AT_ONCE: usize = 2;

/// Lets a request through once one of the turns is free (held until it is answered).
async fn take_turn(
    State(turns): State<Arc<tokio::sync::Semaphore>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let _turn = turns.acquire().await;
    next.run(req).await
}

/// `POST /ingest`: a profile pushed by another collector or a Pyroscope client.
async fn ingest(
    State(hub): State<Arc<Hub>>,
    axum::extract::ConnectInfo(Peer(peer)): axum::extract::ConnectInfo<Peer>,
    Query(query): Query<std::collections::HashMap<String, String>>,
    headers: axum::http::HeaderMap,
    body: axum::body::Body,
) -> Response {
    use crate::ingest::Refused;
    let body = match read_body(body, crate::ingest::MAX_BODY).await {
        Ok(b) => b,
        Err((status, e)) => return error(status, e),
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let push = match crate::ingest::check_request(&query, content_type) {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let profile = match tokio::task::spawn_blocking(move || crate::ingest::decode(&body)).await {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => return error(StatusCode::BAD_REQUEST, e),
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    match crate::ingest::store(&hub, peer.ip(), push, profile).await {
        Ok(id) => Json(serde_json::json!({ "vm": id })).into_response(),
        Err(Refused::TooMany(e)) => error(StatusCode::TOO_MANY_REQUESTS, e),
        Err(Refused::Internal(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// With `--token`, every request but the page itself (which holds no data and asks for the
/// token) must carry `Authorization: Bearer TOKEN`.
async fn auth(
    State(hub): State<Arc<Hub>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Some(token) = &hub.config.token
        && req.uri().path() != "/"
    {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|g| same(g.as_bytes(), token.as_bytes())) {
            let mut resp = error(
                StatusCode::UNAUTHORIZED,
                "this collector needs its token: Authorization: Bearer TOKEN".into(),
            );
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            return resp;
        }
    }
    next.run(req).await
}

/// Equal, in a time that depends on the lengths only (a token is not guessed byte by byte).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn error(status: StatusCode, msg: String) -> Response {
    (status, Json(serde_json::json!({ "error": msg }))).into_response()
}

async fn stats(State(hub): State<Arc<Hub>>) -> Response {
    Json(serde_json::to_value(&hub.stats).unwrap_or_default()).into_response()
}

/// Prometheus' text format (the token rule of [`auth`] applies, as to the API).
async fn metrics(State(hub): State<Arc<Hub>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        crate::metrics::render(&hub),
    )
        .into_response()
}

#[derive(Deserialize)]
struct LabelQuery {
    labels: Option<String>,
}

/// `service:checkout;env:prod` as (key, value) pairs.
fn parse_labels(text: &str) -> Result<Vec<(String, String)>, String> {
    text.split(';')
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .map(|item| {
            item.split_once(':')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| format!("label '{item}' is not KEY:VALUE"))
        })
        .collect()
}

async fn vms(State(hub): State<Arc<Hub>>, Query(q): Query<LabelQuery>) -> Response {
    let wanted = match parse_labels(q.labels.as_deref().unwrap_or("")) {
        Ok(l) => l,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let list: Vec<serde_json::Value> = hub
        .vms
        .list()
        .into_iter()
        .filter(|v| v.record.has_labels(&wanted))
        .map(|v| {
            let id = v.record.id;
            let mut j = serde_json::to_value(v).unwrap_or_default();
            if let (Some(o), Some(state)) = (j.as_object_mut(), hub.heaps.state(id)) {
                o.insert("heap".into(), state.label().into());
            }
            j
        })
        .collect();
    Json(list).into_response()
}

async fn labels(State(hub): State<Arc<Hub>>) -> Response {
    let mut all: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for v in hub.vms.list() {
        for (k, val) in v.record.labels {
            all.entry(k).or_default().insert(val);
        }
    }
    Json(all).into_response()
}

#[derive(Deserialize)]
struct MergedQuery {
    labels: Option<String>,
    format: Option<String>,
    from: Option<u64>,
    to: Option<u64>,
    download: Option<String>,
}

async fn merged_profile(State(hub): State<Arc<Hub>>, Query(q): Query<MergedQuery>) -> Response {
    let text = q.labels.unwrap_or_default();
    let wanted = match parse_labels(&text) {
        Ok(l) => l,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let vms: Vec<_> = hub
        .vms
        .list()
        .into_iter()
        .map(|v| v.record)
        .filter(|r| r.has_labels(&wanted))
        .collect();
    let format = match output_format(q.format) {
        Ok(f) => f,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let (from, to) = (q.from.unwrap_or(0), q.to.unwrap_or(u64::MAX));
    let store = hub.store.clone();
    let result = tokio::task::spawn_blocking(move || -> anyhow::Result<Option<Vec<u8>>> {
        let Some(p) = store.merged_profile(&vms, from, to)? else {
            return Ok(None);
        };
        Ok(Some(render(&p, format)?))
    })
    .await;
    match result {
        Ok(Ok(Some(bytes))) => {
            let name = if text.is_empty() {
                "all".to_string()
            } else {
                text.replace([':', ';', '/', '"', ' '], "_")
            };
            respond(bytes, format, q.download.is_some(), &name)
        }
        Ok(Ok(None)) => error(
            StatusCode::NOT_FOUND,
            format!("no VM with labels '{text}' has samples in that range"),
        ),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// The format a profile request names (`None` for dot), or why it is refused.
fn output_format(name: Option<String>) -> Result<Option<Format>, String> {
    let name = name.unwrap_or_else(|| "collapsed".into());
    if name == "dot" {
        return Ok(None);
    }
    Format::parse(&name)
        .map(Some)
        .map_err(|e| format!("{e}; or dot for a call graph"))
}

fn render(p: &jvmprof_profile::Profile, format: Option<Format>) -> anyhow::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    match format {
        Some(f) => jvmprof_profile::write(p, f, &ExportOptions::default(), &mut bytes)?,
        None => jvmprof_profile::dot::write(p, &Default::default(), &mut bytes)?,
    }
    Ok(bytes)
}

/// A rendered profile with its content type (an attachment named `NAME.EXT` if `download`).
fn respond(bytes: Vec<u8>, format: Option<Format>, download: bool, name: &str) -> Response {
    let (ctype, ext) = match format {
        None => ("text/vnd.graphviz; charset=utf-8", "dot"),
        Some(Format::Collapsed) => ("text/plain; charset=utf-8", "collapsed"),
        Some(Format::Html) => ("text/html; charset=utf-8", "html"),
        Some(Format::Speedscope) => ("application/json", "speedscope.json"),
        Some(f) => ("application/octet-stream", f.extension()),
    };
    let mut resp = ([(header::CONTENT_TYPE, ctype.to_string())], bytes).into_response();
    if download && let Ok(v) = format!("attachment; filename=\"{name}.{ext}\"").parse() {
        resp.headers_mut().insert(header::CONTENT_DISPOSITION, v);
    }
    resp
}

/// Largest heap dump accepted by upload.
const MAX_HEAP_DUMP: u64 = 64 << 30;

#[derive(Deserialize)]
struct TraceQuery {
    /// VM ids, comma-separated (default: every VM with traces).
    vms: Option<String>,
    /// json (default), html, txt or trace.json.
    format: Option<String>,
}

/// `GET /api/trace?vms=1,2&format=html`: the method traces of these VMs joined into one tree
/// across their remote calls (trace mode), as they stand now.
async fn joined_trace(State(hub): State<Arc<Hub>>, Query(q): Query<TraceQuery>) -> Response {
    use jvmprof_profile::trace::OutputFormat;
    let (format, ctype) = match q.format.as_deref().unwrap_or("json") {
        "json" => (OutputFormat::Json, "application/json"),
        "html" => (OutputFormat::Html, "text/html; charset=utf-8"),
        "txt" | "text" => (OutputFormat::Text, "text/plain; charset=utf-8"),
        "trace.json" | "chrome" => (OutputFormat::ChromeTrace, "application/json"),
        f => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("unknown format '{f}' (json, html, txt, trace.json)"),
            );
        }
    };
    let ids: Vec<u64> = match q.vms.as_deref().filter(|v| !v.trim().is_empty()) {
        None => hub.traces.vms(),
        Some(list) => match list.split(',').map(|i| i.trim().parse::<u64>()).collect() {
            Ok(v) => v,
            Err(_) => return error(StatusCode::BAD_REQUEST, format!("bad VM list '{list}'")),
        },
    };
    let mut vms = Vec::new();
    for id in ids {
        let Some(r) = hub.vms.record(id) else {
            return error(StatusCode::NOT_FOUND, format!("no VM {id}"));
        };
        vms.push((id, format!("pid {} on {}", r.pid, r.host)));
    }
    let traces = hub.traces.clone();
    match tokio::task::spawn_blocking(move || traces.joined(&vms, format)).await {
        Ok(Ok(bytes)) => ([(header::CONTENT_TYPE, ctype.to_string())], bytes).into_response(),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn delete_vm(State(hub): State<Arc<Hub>>, Path(id): Path<u64>) -> Response {
    match hub.delete_vm(id).await {
        Ok(Ok(())) => {
            eprintln!("jvmprof serve: VM {id} deleted");
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(Err(crate::registry::DeleteError::Unknown)) => {
            error(StatusCode::NOT_FOUND, format!("no VM {id}"))
        }
        Ok(Err(crate::registry::DeleteError::Connected)) => error(
            StatusCode::CONFLICT,
            format!("VM {id} is connected; it can be deleted once it disconnects"),
        ),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn heap_upload(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<u64>,
    body: axum::body::Body,
) -> Response {
    // The token, when there is one, was checked by [`auth`].
    if hub.vms.record(id).is_none() {
        return error(StatusCode::NOT_FOUND, format!("no VM {id}"));
    }
    if !hub.heaps.begin(id) {
        return error(
            StatusCode::CONFLICT,
            format!("a heap dump of VM {id} is being analysed"),
        );
    }
    let part = hub.heaps.incoming(id);
    if let Err(e) = receive(body, &part).await {
        let _ = std::fs::remove_file(&part);
        hub.heaps.fail(id, e.clone());
        return error(StatusCode::BAD_REQUEST, e);
    }
    let heaps = hub.heaps.clone();
    tokio::task::spawn_blocking(move || heaps.analyse(id));
    (
        StatusCode::ACCEPTED,
        Json(serde_json::json!({ "state": "analysing" })),
    )
        .into_response()
}

/// Streams the body to `path`, at most [`MAX_HEAP_DUMP`] bytes.
/// How long a request body may pause before the request is dropped (a client trickling bytes
/// would otherwise hold an upload slot and its buffers for ever).
const BODY_STALL: std::time::Duration = std::time::Duration::from_secs(60);

/// The next frame of a request body; an error when the upload broke off or stalled.
async fn next_frame(body: &mut axum::body::Body) -> Result<Option<axum::body::Bytes>, String> {
    use http_body_util::BodyExt;
    loop {
        match tokio::time::timeout(BODY_STALL, body.frame()).await {
            Err(_) => {
                return Err(format!("the upload stalled for {} s", BODY_STALL.as_secs()));
            }
            Ok(None) => return Ok(None),
            Ok(Some(Err(e))) => return Err(format!("the upload broke off: {e}")),
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    return Ok(Some(data));
                }
            }
        }
    }
}

/// A whole request body of at most `limit` bytes (413 beyond it, 400 if it stalls or breaks).
async fn read_body(
    mut body: axum::body::Body,
    limit: usize,
) -> Result<Vec<u8>, (StatusCode, String)> {
    let mut out = Vec::new();
    while let Some(data) = next_frame(&mut body)
        .await
        .map_err(|e| (StatusCode::BAD_REQUEST, e))?
    {
        if out.len() + data.len() > limit {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is larger than {limit} bytes"),
            ));
        }
        out.extend_from_slice(&data);
    }
    Ok(out)
}

async fn receive(body: axum::body::Body, path: &std::path::Path) -> Result<u64, String> {
    use std::io::Write;
    let mut file = std::io::BufWriter::new(
        crate::private::open_private(path, false)
            .map_err(|e| format!("cannot store the dump: {e}"))?,
    );
    let mut body = body;
    let mut total = 0u64;
    while let Some(data) = next_frame(&mut body).await? {
        total += data.len() as u64;
        if total > MAX_HEAP_DUMP {
            return Err(format!("the dump is larger than {MAX_HEAP_DUMP} bytes"));
        }
        file.write_all(&data)
            .map_err(|e| format!("cannot store the dump: {e}"))?;
    }
    file.flush()
        .map_err(|e| format!("cannot store the dump: {e}"))?;
    Ok(total)
}

#[derive(Deserialize)]
struct HeapQuery {
    format: Option<String>,
}

async fn heap_report(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<u64>,
    Query(q): Query<HeapQuery>,
) -> Response {
    let format = q.format.unwrap_or_else(|| "html".into());
    if format != "html" && format != "json" {
        return error(
            StatusCode::BAD_REQUEST,
            format!("format must be html or json, not {format}"),
        );
    }
    match hub.heaps.state(id) {
        None => error(StatusCode::NOT_FOUND, format!("no heap dump of VM {id}")),
        Some(HeapState::Analysing) => (
            StatusCode::ACCEPTED,
            Json(serde_json::json!({ "state": "analysing" })),
        )
            .into_response(),
        Some(HeapState::Failed(e)) => error(StatusCode::UNPROCESSABLE_ENTITY, e),
        Some(HeapState::Ready) => match std::fs::read(hub.heaps.report(id, &format)) {
            Ok(bytes) => (
                [(
                    header::CONTENT_TYPE,
                    if format == "html" {
                        "text/html; charset=utf-8"
                    } else {
                        "application/json"
                    },
                )],
                bytes,
            )
                .into_response(),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        },
    }
}

#[derive(Serialize)]
struct ThreadView {
    id: i64,
    name: String,
    group: String,
    daemon: bool,
    state: &'static str,
    order: u64,
    frames: Vec<String>,
    lines: Vec<u32>,
    /// The thread's state in each of the VM's recent snapshots, oldest first, one letter each
    /// (see [`state_letter`]; `.` where the thread was not there).
    history: String,
}

/// The letter of a state in a thread's [`ThreadView::history`].
fn state_letter(s: ThreadState) -> char {
    match s {
        ThreadState::Running => 'R',
        ThreadState::Sleeping => 'S',
        ThreadState::Blocked => 'B',
        ThreadState::Waiting => 'W',
        ThreadState::TimedWaiting => 'T',
        ThreadState::Parked => 'P',
        ThreadState::Native => 'N',
        ThreadState::Unknown => '?',
    }
}

async fn threads(State(hub): State<Arc<Hub>>, Path(id): Path<u64>) -> Response {
    if hub.vms.record(id).is_none() {
        return error(StatusCode::NOT_FOUND, format!("no VM {id}"));
    }
    let history = hub.live.history(id);
    let history_of = |thread: i64| -> String {
        history
            .iter()
            .map(|(_, row)| {
                row.iter()
                    .find(|(t, _)| *t == thread)
                    .map_or('.', |(_, s)| state_letter(*s))
            })
            .collect()
    };
    let mut out: Vec<ThreadView> = hub
        .live
        .latest(id)
        .map(|s| {
            s.threads
                .into_iter()
                .map(|t| ThreadView {
                    history: history_of(t.id),
                    id: t.id,
                    name: t.name,
                    group: t.group,
                    daemon: t.daemon,
                    state: t.state.as_str(),
                    order: t.order,
                    lines: t.frames.iter().map(|f| f.line).collect(),
                    frames: t.frames.iter().map(|f| f.name()).collect(),
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort_by_key(|t| t.order);
    Json(out).into_response()
}

#[derive(Deserialize)]
struct SeriesQuery {
    from: Option<u64>,
    to: Option<u64>,
    /// At most this many points (default 300): batches are summed into equal time buckets.
    points: Option<usize>,
}

/// The VM's samples over time, for the UI's chart: `{"step_ms": S, "points": [[t, samples,
/// ns], ...]}`, each point the sum of the batches in `[t, t + S)` (S = 0: one point a batch).
async fn series(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<u64>,
    Query(q): Query<SeriesQuery>,
) -> Response {
    if hub.vms.record(id).is_none() {
        return error(StatusCode::NOT_FOUND, format!("no VM {id}"));
    }
    let (from, to) = (q.from.unwrap_or(0), q.to.unwrap_or(u64::MAX));
    let max = q.points.unwrap_or(300).clamp(1, 5000);
    let store = hub.store.clone();
    let raw = match tokio::task::spawn_blocking(move || store.series(id, from, to)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let (step, points) = bucket(&raw, max);
    Json(serde_json::json!({ "step_ms": step, "points": points })).into_response()
}

/// Sums `(time, samples, ns)` points into at most `max` buckets of equal length, each named by
/// its start; the step is 0 when every point fits as it is.
fn bucket(raw: &[(u64, u64, u64)], max: usize) -> (u64, Vec<(u64, u64, u64)>) {
    let (Some(first), Some(last)) = (raw.first(), raw.last()) else {
        return (0, Vec::new());
    };
    if raw.len() <= max {
        return (0, raw.to_vec());
    }
    let step = ((last.0 - first.0) / max as u64 + 1).max(1);
    let mut out: Vec<(u64, u64, u64)> = Vec::new();
    for &(t, n, ns) in raw {
        let start = first.0 + (t - first.0) / step * step;
        match out.last_mut() {
            Some(b) if b.0 == start => {
                b.1 += n;
                b.2 += ns;
            }
            _ => out.push((start, n, ns)),
        }
    }
    (step, out)
}

#[derive(Deserialize)]
struct DiffQuery {
    vm: u64,
    from: Option<u64>,
    to: Option<u64>,
    /// The baseline: another VM (default: the same one) and range.
    base_vm: Option<u64>,
    base_from: Option<u64>,
    base_to: Option<u64>,
}

/// A differential flame graph (HTML) of a VM's range against a baseline: the same VM at other
/// times, or another VM.
async fn diff(State(hub): State<Arc<Hub>>, Query(q): Query<DiffQuery>) -> Response {
    let base_id = q.base_vm.unwrap_or(q.vm);
    let (Some(vm), Some(base_vm)) = (hub.vms.record(q.vm), hub.vms.record(base_id)) else {
        return error(
            StatusCode::NOT_FOUND,
            format!("no VM {} or {base_id}", q.vm),
        );
    };
    let store = hub.store.clone();
    let result = tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<u8>> {
        let new = store.profile(&vm, q.from.unwrap_or(0), q.to.unwrap_or(u64::MAX))?;
        let base = store.profile(
            &base_vm,
            q.base_from.unwrap_or(0),
            q.base_to.unwrap_or(u64::MAX),
        )?;
        let mut bytes = Vec::new();
        jvmprof_profile::flamegraph::write_diff(
            &base,
            &new,
            &ExportOptions::default(),
            &mut bytes,
        )?;
        Ok(bytes)
    })
    .await;
    match result {
        Ok(Ok(bytes)) => {
            ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], bytes).into_response()
        }
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

#[derive(Deserialize)]
struct ProfileQuery {
    format: Option<String>,
    from: Option<u64>,
    to: Option<u64>,
    download: Option<String>,
}

async fn profile(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<u64>,
    Query(q): Query<ProfileQuery>,
) -> Response {
    let Some(vm) = hub.vms.record(id) else {
        return error(StatusCode::NOT_FOUND, format!("no VM {id}"));
    };
    let format = match output_format(q.format) {
        Ok(f) => f,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let (from, to) = (q.from.unwrap_or(0), q.to.unwrap_or(u64::MAX));
    let store = hub.store.clone();
    let result = tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<u8>> {
        render(&store.profile(&vm, from, to)?, format)
    })
    .await;
    match result {
        Ok(Ok(bytes)) => respond(bytes, format, q.download.is_some(), &format!("vm-{id}")),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_sum_points_into_equal_steps() {
        let raw = [(1000, 1, 10), (1500, 2, 20), (2000, 3, 30), (3100, 4, 40)];
        assert_eq!(bucket(&raw, 10), (0, raw.to_vec()));
        // 2100 ms over 2 buckets: steps of 1051 ms from 1000.
        assert_eq!(bucket(&raw, 2), (1051, vec![(1000, 6, 60), (2051, 4, 40)]));
        assert_eq!(bucket(&[], 5), (0, vec![]));
    }
}
