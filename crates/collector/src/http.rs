//! The HTTP side: the JSON API the UI and the tests use, and the embedded web UI at `/`.
//!
//! - `GET /api/vms`: `[{id, pid, command, host, jvm, os, connected, connected_at, last_seen, ...}]`
//! - `GET /api/vms/{id}/threads`: the latest snapshot, `[{id, name, group, state, order, frames}]`,
//!   frames as `package.Class.method` strings, top of stack first (`lines` beside them).
//! - `GET /api/vms/{id}/profile?format=collapsed|pprof|html|speedscope|dot|jvmprof&from=&to=`:
//!   the VM's samples received in `[from, to]` (Unix ms; default everything) merged into one
//!   profile, written by jvmprof_profile's exporters; `download=1` makes it an attachment.
//! - `GET /api/stats`: ingest counters since start (connections, bytes, snapshots, samples, ...).

use crate::Hub;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Json, Response};
use axum::routing::get;
use jvmprof_profile::{ExportOptions, Format};
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
        .route("/api/stats", get(stats))
        .route("/api/vms/{id}/threads", get(threads))
        .route("/api/vms/{id}/profile", get(profile))
        .with_state(hub)
}

fn error(status: StatusCode, msg: String) -> Response {
    (status, Json(serde_json::json!({ "error": msg }))).into_response()
}

async fn stats(State(hub): State<Arc<Hub>>) -> Response {
    Json(serde_json::to_value(&hub.stats).unwrap_or_default()).into_response()
}

async fn vms(State(hub): State<Arc<Hub>>) -> Response {
    Json(hub.vms.list()).into_response()
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
}

async fn threads(State(hub): State<Arc<Hub>>, Path(id): Path<u64>) -> Response {
    if hub.vms.record(id).is_none() {
        return error(StatusCode::NOT_FOUND, format!("no VM {id}"));
    }
    let mut out: Vec<ThreadView> = hub
        .live
        .latest(id)
        .map(|s| {
            s.threads
                .into_iter()
                .map(|t| ThreadView {
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
    let name = q.format.unwrap_or_else(|| "collapsed".into());
    let format = if name == "dot" {
        None
    } else {
        match Format::parse(&name) {
            Ok(f) => Some(f),
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("{e}; or dot for a call graph"),
                );
            }
        }
    };
    let (from, to) = (q.from.unwrap_or(0), q.to.unwrap_or(u64::MAX));
    let store = hub.store.clone();
    let result = tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<u8>> {
        let p = store.profile(&vm, from, to)?;
        let mut bytes = Vec::new();
        match format {
            Some(f) => jvmprof_profile::write(&p, f, &ExportOptions::default(), &mut bytes)?,
            None => jvmprof_profile::dot::write(&p, &Default::default(), &mut bytes)?,
        }
        Ok(bytes)
    })
    .await;
    let bytes = match result {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let (ctype, ext) = match format {
        None => ("text/vnd.graphviz; charset=utf-8", "dot"),
        Some(Format::Collapsed) => ("text/plain; charset=utf-8", "collapsed"),
        Some(Format::Html) => ("text/html; charset=utf-8", "html"),
        Some(Format::Speedscope) => ("application/json", "speedscope.json"),
        Some(f) => ("application/octet-stream", f.extension()),
    };
    let mut resp = ([(header::CONTENT_TYPE, ctype.to_string())], bytes).into_response();
    if q.download.is_some()
        && let Ok(v) = format!("attachment; filename=\"vm-{id}.{ext}\"").parse()
    {
        resp.headers_mut().insert(header::CONTENT_DISPOSITION, v);
    }
    resp
}
