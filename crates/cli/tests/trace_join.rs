//! `jvmprof trace`: synthetic per-JVM recordings (native files whose records carry the traces,
//! as the agent writes them) joined by the binary into every output format and read back. No
//! JVM needed.

use jvmprof_profile::records::RecordWriter;
use jvmprof_profile::trace::log::{Chunk, Event, Protocol, Side, VmHeader};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn jvmprof() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_jvmprof"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("jvmprof-tests-{}", std::process::id()))
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One VM's recording under construction: events per thread on the VM's own clock.
struct Vm {
    header: VmHeader,
    methods: Vec<String>,
    threads: Vec<(u64, String, Vec<Event>)>,
    clock: i64,
}

impl Vm {
    fn new(name: &str, clock: i64) -> Vm {
        Vm {
            header: VmHeader {
                vm: name.into(),
                session: 0xabc,
                host: "host".into(),
                pid: 4242,
            },
            methods: Vec::new(),
            threads: Vec::new(),
            clock,
        }
    }

    fn ev(&mut self, thread: &str, e: Event) {
        let at = match self.threads.iter().position(|t| t.1 == thread) {
            Some(i) => i,
            None => {
                self.threads
                    .push((10 + self.threads.len() as u64, thread.into(), Vec::new()));
                self.threads.len() - 1
            }
        };
        self.threads[at].2.push(e);
    }

    fn enter(&mut self, thread: &str, method: &str, t: i64) {
        let method = match self.methods.iter().position(|m| m == method) {
            Some(i) => i,
            None => {
                self.methods.push(method.into());
                self.methods.len() - 1
            }
        } as u32;
        let ns = t + self.clock;
        self.ev(thread, Event::Enter { method, ns });
    }

    fn exit(&mut self, thread: &str, t: i64) {
        let ns = t + self.clock;
        self.ev(thread, Event::Exit { ns });
    }

    fn remote(
        &mut self,
        thread: &str,
        side: Side,
        protocol: Protocol,
        key: &str,
        label: &str,
        t: i64,
    ) {
        let ns = t + self.clock;
        let (key, label) = (key.into(), label.into());
        self.ev(
            thread,
            Event::Remote {
                side,
                protocol,
                key,
                label,
                ns,
            },
        );
    }

    fn conn(&mut self, thread: &str, local: &str, remote: &str, t: i64) {
        let ns = t + self.clock;
        let (local, remote) = (local.into(), remote.into());
        self.ev(thread, Event::Connection { local, remote, ns });
    }

    /// Writes the native file: an empty profile, then the events in two record chunks (names
    /// first seen in the first); returns where the first chunk ends.
    fn write(&self, path: &Path) -> usize {
        let profile = jvmprof_profile::Profile::default();
        let mut records = RecordWriter::new();
        let mut bytes = jvmprof_profile::native::records_header().to_vec();
        let halves = |second: bool| -> Vec<(u64, Vec<Event>)> {
            self.threads
                .iter()
                .map(|(id, _, events)| {
                    let mid = events.len() / 2;
                    let part = if second {
                        &events[mid..]
                    } else {
                        &events[..mid]
                    };
                    (*id, part.to_vec())
                })
                .collect()
        };
        let first = Chunk {
            vm: Some(self.header.clone()),
            methods: self
                .methods
                .iter()
                .cloned()
                .enumerate()
                .map(|(i, m)| (i as u32, m))
                .collect(),
            threads: self
                .threads
                .iter()
                .map(|(id, name, _)| (*id, name.clone()))
                .collect(),
            events: halves(false),
            dropped_calls: 0,
        };
        bytes.extend(records.update(&profile, &[], &[first], false).unwrap());
        let first_end = bytes.len();
        let second = Chunk {
            events: halves(true),
            ..Chunk::default()
        };
        bytes.extend(records.update(&profile, &[], &[second], true).unwrap());
        std::fs::write(path, bytes).unwrap();
        first_end
    }
}

const CALLS: i64 = 3;

/// `web` (two request threads) calls `store` over RMI on one shared connection and `auth`
/// over HTTP; `store` is 5 s ahead, `auth` an hour behind. Method names carry the call's id.
fn recordings(dir: &Path) -> Vec<PathBuf> {
    let mut web = Vm::new("web", 0);
    let mut store = Vm::new("store", 5_000_000_000);
    let mut auth = Vm::new("auth", -3_600_000_000_000);
    for k in 0..2 * CALLS {
        let th = format!("req-{}", k % 2);
        let t = 1_000 + k * 100_000;
        web.enter(&th, &format!("Web.handle_{k}"), t);
        web.remote(
            &th,
            Side::Client,
            Protocol::Rmi,
            "com.acme.Store.get",
            "Store.get",
            t + 10,
        );
        web.conn(&th, "10.0.0.5:50001", "store.local/10.0.0.6:1099", t + 11);
        let srv = format!("RMI TCP Connection({})-10.0.0.5", k % 3);
        store.conn(&srv, "/10.0.0.6:1099", "/10.0.0.5:50001", t + 100);
        store.remote(
            &srv,
            Side::Server,
            Protocol::Rmi,
            "com.acme.StoreImpl.get",
            "StoreImpl",
            t + 101,
        );
        store.enter(&srv, &format!("StoreImpl.get_{k}"), t + 102);
        store.exit(&srv, t + 1_000 + k * 700);
        store.exit(&srv, t + 1_001 + k * 700);
        web.exit(&th, t + 1_100 + k * 700);
        let id = format!("abc-{k}");
        web.remote(
            &th,
            Side::Client,
            Protocol::Http,
            &id,
            "GET http://auth/check",
            t + 20_000,
        );
        auth.remote(
            "http-worker",
            Side::Server,
            Protocol::Http,
            &id,
            "GET /check",
            t + 20_100,
        );
        auth.enter("http-worker", &format!("Auth.check_{k}"), t + 20_101);
        auth.exit("http-worker", t + 25_000);
        auth.exit("http-worker", t + 25_001);
        web.exit(&th, t + 25_100);
        web.exit(&th, t + 30_000);
    }
    let mut paths = Vec::new();
    for vm in [web, store, auth] {
        let p = dir.join(format!("{}.jvmprof", vm.header.vm));
        vm.write(&p);
        paths.push(p);
    }
    paths
}

fn trace(inputs: &[PathBuf], out: &Path) -> Output {
    Command::new(jvmprof())
        .arg("trace")
        .args(inputs)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap()
}

fn trace_ok(inputs: &[PathBuf], out: &Path) -> String {
    let o = trace(inputs, out);
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "jvmprof trace failed: {stderr}");
    stderr
}

#[test]
fn joins_recordings_into_every_format() {
    let dir = scratch("trace-join");
    let inputs = recordings(&dir);

    let json = dir.join("joined.json");
    let stderr = trace_ok(&inputs, &json);
    assert_eq!(stderr, "", "no notes for complete, matching recordings");
    let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let roots = v["roots"].as_array().unwrap();
    assert_eq!(roots.len(), 2 * CALLS as usize);
    for root in roots {
        let k = root["method"]
            .as_str()
            .unwrap()
            .strip_prefix("Web.handle_")
            .unwrap();
        assert_eq!(root["vm"], "web");
        assert!(root.get("kind").is_none());
        let calls = root["children"].as_array().unwrap();
        assert_eq!(calls.len(), 2);
        let (rmi, http) = (&calls[0], &calls[1]);
        assert_eq!(
            (&rmi["kind"], &rmi["method"]),
            (&Value::from("client"), &Value::from("Store.get"))
        );
        let served = &rmi["children"].as_array().unwrap()[0];
        assert_eq!(served["kind"], "server");
        assert_eq!(served["vm"], "store");
        assert_eq!(served["method"], format!("StoreImpl.get_{k}"));
        assert!(
            served["thread"]
                .as_str()
                .unwrap()
                .starts_with("RMI TCP Connection(")
        );
        assert!(
            served["start_ns"].as_i64().unwrap() > 5_000_000_000,
            "the server's own clock"
        );
        assert!(served["duration_ns"].as_i64().unwrap() <= rmi["duration_ns"].as_i64().unwrap());
        assert_eq!(http["method"], "GET http://auth/check");
        let served = &http["children"].as_array().unwrap()[0];
        assert_eq!(
            (&served["vm"], &served["method"]),
            (
                &Value::from("auth"),
                &Value::from(format!("Auth.check_{k}"))
            )
        );
        assert!(
            served["start_ns"].as_i64().unwrap() < 0,
            "the server's own clock"
        );
        assert!(served.get("unmatched").is_none() && served.get("incomplete").is_none());
    }
    assert_eq!(v["notes"], serde_json::json!([]));
    let stats = v["stats"].as_object().unwrap();
    assert_eq!(stats.keys().collect::<Vec<_>>(), ["auth", "store", "web"]);
    let store_get = stats["store"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["method"] == "StoreImpl.get_5")
        .unwrap();
    assert_eq!(store_get["count"], 1);
    assert_eq!(store_get["total_ns"], 1_000 + 5 * 700 - 102);
    let handles: Vec<&Value> = stats["web"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["method"] == "Store.get")
        .collect();
    assert_eq!(handles[0]["count"], 2 * CALLS);

    let txt = dir.join("joined.txt");
    trace_ok(&inputs, &txt);
    let text = std::fs::read_to_string(&txt).unwrap();
    assert!(
        text.contains("\nWeb.handle_0  [web/req-0]  0.030 ms\n"),
        "{text}"
    );
    assert!(
        text.contains("\n  Store.get  [web/req-0]  0.001 ms  (client)\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "\n    StoreImpl.get_0  [store/RMI TCP Connection(0)-10.0.0.5]  0.001 ms  (server)\n"
        ),
        "{text}"
    );
    assert!(text.contains("## auth: per-method inclusive times"));

    let html = dir.join("joined.html");
    trace_ok(&inputs, &html);
    let page = std::fs::read_to_string(&html).unwrap();
    for attr in [
        "src=\"http",
        "src='http",
        "href=\"http",
        "href='http",
        "<link",
        "@import",
        "url(",
    ] {
        assert!(!page.contains(attr), "the page loads {attr}...");
    }
    assert!(!page.contains("<script src"));
    for data in [
        "Web.handle_0",
        "StoreImpl.get_5",
        "Auth.check_3",
        "RMI TCP Connection(2)-10.0.0.5",
        "\"vms\":[\"web\",\"store\",\"auth\"]",
    ] {
        assert!(page.contains(data), "{data}");
    }

    let chrome = dir.join("joined.trace.json");
    trace_ok(&inputs, &chrome);
    let v: Value = serde_json::from_slice(&std::fs::read(&chrome).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let named = |what: &str| -> Vec<(u64, u64, String)> {
        events
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == what)
            .map(|e| {
                (
                    e["pid"].as_u64().unwrap(),
                    e["tid"].as_u64().unwrap(),
                    e["args"]["name"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let procs: Vec<String> = named("process_name").into_iter().map(|p| p.2).collect();
    assert_eq!(procs, ["web", "store", "auth"]);
    assert_eq!(named("thread_name").len(), 2 + 3 + 1);
    let xs: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    // Per call: the handler, two client spans, two served methods.
    assert_eq!(xs.len(), 5 * 2 * CALLS as usize);
    let by_name = |n: String| {
        xs.iter()
            .find(|e| e["name"] == n.as_str())
            .copied()
            .unwrap()
    };
    for k in 0..2 * CALLS {
        let handler = by_name(format!("Web.handle_{k}"));
        let served = by_name(format!("StoreImpl.get_{k}"));
        let (hs, hd) = (
            handler["ts"].as_f64().unwrap(),
            handler["dur"].as_f64().unwrap(),
        );
        let (ss, sd) = (
            served["ts"].as_f64().unwrap(),
            served["dur"].as_f64().unwrap(),
        );
        assert!(
            ss >= hs && ss + sd <= hs + hd,
            "the served call is placed inside its caller"
        );
        assert_eq!(served["pid"], 2);
    }
    let flows = |ph: &str| events.iter().filter(|e| e["ph"] == ph).count();
    assert_eq!(
        (flows("s"), flows("f")),
        (4 * CALLS as usize, 4 * CALLS as usize)
    );
    assert!(
        events
            .iter()
            .filter(|e| e["ph"] == "f")
            .all(|e| e["bp"] == "e")
    );
    let notes = v["otherData"]["notes"].as_array().unwrap();
    assert!(notes[0].as_str().unwrap().starts_with(
        "server times are placed inside their client calls (centred), not synchronised"
    ));
}

#[test]
fn damaged_missing_and_unrelated_recordings_and_bad_outputs() {
    let dir = scratch("trace-join-bad");
    let inputs = recordings(&dir);
    // The store's file cut inside its second chunk: read up to the damage, said on stderr.
    let bytes = std::fs::read(&inputs[1]).unwrap();
    let cut = dir.join("store-cut.jvmprof");
    std::fs::write(&cut, &bytes[..bytes.len() - 5]).unwrap();
    let out = dir.join("cut.json");
    let stderr = trace_ok(&[inputs[0].clone(), cut.clone(), inputs[2].clone()], &out);
    let damage = format!("{}: the trace is damaged", cut.display());
    assert!(stderr.contains(&damage), "{stderr}");
    let v: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let notes: Vec<&str> = v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(notes.iter().any(|n| n.starts_with(&damage)), "{notes:?}");
    // What was read still joins: the first calls are served, the later ones not.
    let served: Vec<bool> = v["roots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["children"][0]["unmatched"] != true)
        .collect();
    assert!(served[0] && !served[served.len() - 1], "{served:?}");

    // A profile without traces.
    let plain = dir.join("cpu.jvmprof");
    let mut bytes = Vec::new();
    jvmprof_profile::native::write(&jvmprof_profile::Profile::default(), &mut bytes).unwrap();
    std::fs::write(&plain, bytes).unwrap();
    let o = trace(&[inputs[0].clone(), plain.clone()], &dir.join("x.json"));
    assert!(!o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(&format!(
            "{} has no method traces; record with --mode trace",
            plain.display()
        )),
        "{stderr}"
    );

    // An output format it cannot write.
    let o = trace(&inputs, &dir.join("x.svg"));
    assert!(!o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(".json, .txt, .html, .trace.json"),
        "{stderr}"
    );

    // A missing file.
    let o = trace(&[dir.join("nope.jvmprof")], &dir.join("x.json"));
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("nope.jvmprof"));

    // Recordings of two unrelated runs: separate trees, and a note naming the groups.
    let other = scratch("trace-join-other");
    let mut lone = Vm::new("batch", 0);
    lone.enter("main", "Batch.run", 0);
    lone.exit("main", 10);
    let lone_path = other.join("batch.jvmprof");
    lone.write(&lone_path);
    let out = dir.join("apart.json");
    let stderr = trace_ok(&[inputs[0].clone(), inputs[1].clone(), lone_path], &out);
    assert!(
        stderr.contains("no remote call connects these groups of VMs")
            && stderr.contains("[web, store]; [batch]"),
        "{stderr}"
    );
    let v: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let roots = v["roots"].as_array().unwrap();
    assert_eq!(roots.last().unwrap()["method"], "Batch.run");
    assert_eq!(roots.len(), 2 * CALLS as usize + 1);
}
