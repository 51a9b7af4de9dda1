//! The collector (`jvmprof serve`): one job, to take in what many agents stream, keep it, and show
//! it. One TCP port serves both: a connection that starts with the protocol magic `JVMP` is an
//! agent, anything else is HTTP (the JSON API of [`http`] and the embedded web UI).
//!
//! Each agent connection (the `conn` module) is decoded by `jvmprof_proto::Decoder`; its traces
//! go to every [`analysis::Analysis`] (xdProf's `add_connection` / `add_trace` /
//! `remove_connection`). A malformed or truncated stream closes that connection with a logged
//! reason; everything it sent before stays. Data lives in redb under `--data` ([`store`]), so
//! VMs, their profiles and last snapshots survive a restart; a VM that disconnects stays listed
//! as disconnected.
//!
//! This file only declares the modules, re-exports the names other crates use from the crate
//! root, and wires the modules together ([`run_blocking`], [`serve`]); no module uses anything
//! defined here.

#![forbid(unsafe_code)]

pub mod analysis;
mod config;
mod conn;
pub mod heaps;
pub mod http;
mod hub;
pub mod ingest;
pub mod mask;
mod metrics;
pub mod private;
pub mod push;
mod push_config;
mod registry;
mod stats;
pub mod store;
mod streams;
pub mod traces;

pub use config::Config;
pub use conn::{MAX_ALL_CONNECTIONS_BYTES, MAX_CONNECTION_BYTES, MAX_HANDSHAKE};
pub use hub::{Hub, MAX_NEW_VMS_PER_MINUTE};
pub use mask::{Mask, mask_tokens};
pub use registry::{DeleteError, Registry, VmView};
pub use stats::Stats;
pub use store::{clickhouse, now_ms};

use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// Most connections open at once (agents and browsers); more are closed at once, so idle or
/// slow clients cannot make the collector hold a buffer each without bound.
pub const MAX_CONNECTIONS: usize = 1024;

/// Binds `config.listen`, prints where, and serves until SIGTERM or SIGINT; then stops taking
/// connections, waits until everything received is stored, and says so.
pub fn run_blocking(config: Config) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(async move {
        let hub = Arc::new(Hub::open(config)?);
        let listener = TcpListener::bind(&hub.config.listen)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", hub.config.listen))?;
        let addr = listener.local_addr()?;
        eprintln!(
            "jvmprof serve: listening on {addr} (web UI http://{addr}/, agents server={addr}), data in {}",
            hub.config.data.display()
        );
        if hub.config.token.is_none() && !addr.ip().is_loopback() {
            eprintln!(
                "jvmprof serve: warning: listening on {} without a token: anyone who can reach \
                 it may read every profile and command line, and send data; give a token \
                 (--token-file FILE or JVMPROF_TOKEN)",
                addr.ip()
            );
        }
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let signal = tokio::select! {
            r = serve(hub.clone(), listener) => return r,
            _ = term.recv() => "SIGTERM",
            _ = tokio::signal::ctrl_c() => "SIGINT",
        };
        let queued = hub.store.backlog();
        eprintln!(
            "jvmprof serve: {signal}: no new connections; storing the {queued} writes still queued"
        );
        hub.store.barrier().await;
        eprintln!("jvmprof serve: stopped; everything received is stored");
        Ok(())
    });
    // Connection tasks end with the runtime; agents re-send what was not acknowledged to the
    // next collector. A heap analysis still running is not waited for.
    rt.shutdown_timeout(Duration::from_secs(2));
    result
}

/// Accepts connections and routes each to the agent protocol or to HTTP by its first bytes.
pub async fn serve(hub: Arc<Hub>, listener: TcpListener) -> anyhow::Result<()> {
    let local = listener.local_addr()?;
    let (http_tx, http_rx) = tokio::sync::mpsc::channel(256);
    let router = http::router(hub.clone());
    tokio::spawn(async move {
        let router = router.into_make_service_with_connect_info::<http::Peer>();
        let _ = axum::serve(http::ChannelListener { rx: http_rx, local }, router).await;
    });
    tokio::spawn(hub.clone().maintain());
    if let Some(p) = hub.config.push.clone() {
        tokio::spawn(push::run(hub.clone(), p));
    }
    let open = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut refused_said = false;
    loop {
        let (sock, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                eprintln!("jvmprof serve: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            if !refused_said {
                refused_said = true;
                eprintln!(
                    "jvmprof serve: {MAX_CONNECTIONS} connections are open; closing new ones until some end"
                );
            }
            drop(sock);
            continue;
        };
        refused_said = false;
        let hub = hub.clone();
        let http_tx = http_tx.clone();
        tokio::spawn(async move {
            // Held for the connection's life (an HTTP one keeps it until handed to axum).
            let _permit = permit;
            match conn::sniff(&sock).await {
                Some(true) => conn::agent(hub, sock, peer).await,
                Some(false) => {
                    let _ = http_tx.send((sock, peer)).await;
                }
                None => {}
            }
        });
    }
}
