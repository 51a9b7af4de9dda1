//! A private ClickHouse server for a test: its own data directory and ports on loopback,
//! started from Debian's `clickhouse-server` and killed when dropped.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    child: Child,
    /// The HTTP port's address, `127.0.0.1:PORT`.
    pub http: String,
}

/// A port nobody listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The server binary, if installed. Under CI (`CI` set) a missing one fails the test instead
/// of skipping it: CI installs it (.ci/run).
pub fn installed() -> bool {
    // 18.16 knows no --version (it exits 78 saying so): that it ran is enough.
    let found = Command::new("clickhouse-server")
        .arg("--version")
        .output()
        .is_ok();
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "clickhouse-server is missing: CI must have it (apt-get install clickhouse-server)"
        );
        eprintln!(
            "SKIPPED: clickhouse-server is not installed (apt-get install clickhouse-server)"
        );
    }
    found
}

impl Server {
    pub fn start(dir: &Path) -> Server {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap();
        let d = dir.display();
        let (http, tcp) = (free_port(), free_port());
        std::fs::write(
            dir.join("users.xml"),
            "<?xml version=\"1.0\"?><yandex><profiles><default></default></profiles>\
             <users><default><password></password><networks><ip>127.0.0.1</ip></networks>\
             <profile>default</profile><quota>default</quota></default></users>\
             <quotas><default></default></quotas></yandex>",
        )
        .unwrap();
        std::fs::write(
            dir.join("config.xml"),
            format!(
                "<?xml version=\"1.0\"?><yandex>\
                 <logger><level>warning</level><console>1</console></logger>\
                 <http_port>{http}</http_port><tcp_port>{tcp}</tcp_port>\
                 <listen_host>127.0.0.1</listen_host>\
                 <path>{d}/data/</path><tmp_path>{d}/tmp/</tmp_path>\
                 <user_files_path>{d}/user_files/</user_files_path>\
                 <format_schema_path>{d}/format_schemas/</format_schema_path>\
                 <users_config>{d}/users.xml</users_config>\
                 <default_profile>default</default_profile>\
                 <default_database>default</default_database>\
                 <mark_cache_size>67108864</mark_cache_size>\
                 <uncompressed_cache_size>67108864</uncompressed_cache_size>\
                 </yandex>"
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("server.log")).unwrap();
        let child = Command::new("clickhouse-server")
            .arg(format!("--config-file={d}/config.xml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("cannot start clickhouse-server");
        let server = Server {
            child,
            http: format!("127.0.0.1:{http}"),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while server.query("SELECT 1").as_deref() != Some("1\n") {
            assert!(
                Instant::now() < deadline,
                "clickhouse-server did not start: {}",
                std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        server
    }

    /// Runs `sql` over the HTTP interface; the answer, or `None` if the server did not
    /// answer 200.
    pub fn query(&self, sql: &str) -> Option<String> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&self.http).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
        write!(
            s,
            "POST / HTTP/1.0\r\nHost: {}\r\nContent-Length: {}\r\n\r\n{sql}",
            self.http,
            sql.len()
        )
        .ok()?;
        let mut resp = String::new();
        s.read_to_string(&mut resp).ok()?;
        let (head, body) = resp.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.0 200")
            .then(|| body.to_string())
            .or_else(|| head.starts_with("HTTP/1.1 200").then(|| body.to_string()))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
