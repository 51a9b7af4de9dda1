use super::*;
use crate::trace::layout::Kind;
use crate::trace::log::{Chunk, VmHeader};
use crate::trace::render::OutputFormat;
use crate::trace::testkit::*;

fn check_chain(protocol: Protocol) {
    let calls = 300;
    let chain = Chain::run(protocol, calls);
    if protocol == Protocol::Rmi {
        // Connections really were shared by threads and reused.
        assert!(
            chain.pools[1].len() >= 2 && chain.pools[1].len() < 10,
            "{:?}",
            chain.pools[1]
        );
        assert!(chain.servers[1].len() >= 2, "{:?}", chain.servers[1]);
    }
    if protocol == Protocol::Rmi {
        // Some connection carried calls of several client threads, and some server thread
        // served several connections.
        let mut by_conn: HashMap<(usize, String), std::collections::HashSet<String>> =
            HashMap::new();
        for (i, vm) in chain.vms.iter().enumerate() {
            for t in &vm.trace.threads {
                for e in &t.events {
                    if let Event::Connection { local, remote, .. } = e {
                        let end = if i == 0 { local } else { remote };
                        by_conn
                            .entry((i, end.clone()))
                            .or_default()
                            .insert(t.name.clone());
                    }
                }
            }
        }
        assert!(
            by_conn
                .iter()
                .any(|((vm, _), threads)| *vm == 0 && threads.len() > 1)
        );
        let mut conns_of: HashMap<&str, usize> = HashMap::new();
        for ((vm, _), threads) in &by_conn {
            if *vm == 1 {
                for t in threads {
                    *conns_of.entry(t).or_default() += 1;
                }
            }
        }
        assert!(conns_of.values().any(|&n| n > 1), "{conns_of:?}");
    }
    let expected = recorded(&chain.vms.iter().collect::<Vec<_>>());
    let j = join(chain.vms.into_iter().map(Vm::recording));
    assert!(j.notes().is_empty(), "{:?}", j.notes());
    assert_eq!(j.groups().len(), 1);
    let nodes = flatten(&j);
    // Only the client's top-level calls are roots.
    let roots: Vec<&Flat> = nodes.iter().filter(|n| n.parent.is_none()).collect();
    assert_eq!(roots.len(), calls as usize);
    assert!(
        roots
            .iter()
            .all(|r| r.vm == "client" && r.method.starts_with("Client.work_"))
    );
    // Every method activation exactly once, on its VM.
    let mut seen: HashMap<(String, String), usize> = HashMap::new();
    for n in nodes.iter().filter(|n| n.kind != Some(Kind::Client)) {
        *seen.entry((n.vm.clone(), n.method.clone())).or_default() += 1;
    }
    assert_eq!(seen, expected);
    let clients: Vec<&Flat> = nodes
        .iter()
        .filter(|n| n.kind == Some(Kind::Client))
        .collect();
    assert_eq!(clients.len(), 3 * calls as usize);
    for c in &clients {
        assert!(!c.unmatched, "{c:?}");
        let caller = &nodes[c.parent.unwrap()];
        let level: usize = c.method[1..2].parse().unwrap();
        assert_eq!(c.children.len(), 1, "{c:?}");
        let s = &nodes[c.children[0]];
        assert_eq!(s.kind, Some(Kind::Server));
        assert!(!s.unmatched);
        // The right server call: same construction id, the next VM down the chain.
        assert_eq!(s.vm, format!("s{level}"));
        assert_eq!(
            s.method,
            format!("S{level}Impl.serve_{}", id_of(&caller.method))
        );
        assert!(s.thread.starts_with(&format!("s{level}-worker-")));
        assert!(s.dur <= c.dur, "server {s:?} longer than its client {c:?}");
        // Times stay on the server's own clock; placement centres it in the client.
        let clock = [0, 5_000, HOUR, -777][level];
        assert!(s.start > clock);
        assert!(
            s.placed >= c.placed && s.placed + s.dur <= c.placed + c.dur,
            "{c:?} {s:?}"
        );
        let (left, right) = (s.placed - c.placed, c.placed + c.dur - s.placed - s.dur);
        assert!((left - right).abs() <= 1, "centred: {left} {right}");
    }
    let servers = nodes
        .iter()
        .filter(|n| n.kind == Some(Kind::Server))
        .count();
    assert_eq!(servers, 3 * calls as usize);
    assert!(nodes.iter().all(|n| !n.unmatched && !n.incomplete));
    // Statistics: counts by method agree with the recordings, and the client spans.
    for (vm, rows) in j.stats() {
        for r in rows {
            let want = expected
                .get(&(vm.to_string(), r.method.clone()))
                .copied()
                .unwrap_or_else(|| {
                    assert!(r.method.ends_with(".serve"), "{vm} {r:?}");
                    calls as usize
                });
            assert_eq!(r.count as usize, want, "{vm} {r:?}");
            assert!(r.min_ns <= r.mean_ns && r.mean_ns <= r.max_ns);
        }
    }
    // The JSON form of the same tree (shallow enough for serde_json).
    let mut json = Vec::new();
    j.write(OutputFormat::Json, &mut json).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let r0 = &v["roots"][0];
    assert_eq!(r0["vm"], "client");
    assert!(r0.get("kind").is_none() && r0.get("unmatched").is_none());
    let c0 = &r0["children"][0];
    assert_eq!(c0["kind"], "client");
    assert_eq!(c0["method"], "I1.serve");
    let s0 = &c0["children"][0];
    assert_eq!(s0["kind"], "server");
    assert_eq!(s0["vm"], "s1");
    assert_eq!(
        s0["method"],
        format!("S1Impl.serve_{}", id_of(r0["method"].as_str().unwrap()))
    );
    assert!(
        v["stats"]["s2"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["count"] == calls)
    );
}

#[test]
fn rmi_chain_over_shared_connections_matches_every_call_to_its_server() {
    check_chain(Protocol::Rmi);
}

#[test]
fn http_chain_matches_every_call_by_its_id() {
    check_chain(Protocol::Http);
}

#[test]
fn untraced_server_and_untraced_client_leave_unmatched_sides() {
    for protocol in [Protocol::Rmi, Protocol::Http] {
        // s3 not traced: s2's calls to it are unmatched leaves.
        let chain = Chain::run(protocol, 40);
        let mut vms = chain.vms;
        vms.pop();
        let j = join(vms.into_iter().map(Vm::recording));
        let nodes = flatten(&j);
        assert!(nodes.iter().all(|n| n.vm != "s3"));
        let to_s3: Vec<&Flat> = nodes
            .iter()
            .filter(|n| n.kind == Some(Kind::Client) && n.method == "I3.serve")
            .collect();
        assert_eq!(to_s3.len(), 40);
        assert!(
            to_s3
                .iter()
                .all(|n| n.unmatched && n.children.is_empty() && n.vm == "s2")
        );
        assert_eq!(nodes.iter().filter(|n| n.unmatched).count(), 40);
        assert!(
            j.notes()
                .iter()
                .any(|n| n.starts_with("s2: 40 remote calls it made have no served call")),
            "{:?}",
            j.notes()
        );
        // The client not traced: s1's served calls are unmatched roots.
        let chain = Chain::run(protocol, 40);
        let j = join(chain.vms.into_iter().skip(1).map(Vm::recording));
        let nodes = flatten(&j);
        let roots: Vec<&Flat> = nodes.iter().filter(|n| n.parent.is_none()).collect();
        assert_eq!(roots.len(), 40);
        for r in roots {
            assert_eq!(r.vm, "s1");
            assert!(r.method.starts_with("S1Impl.serve_"));
            assert_eq!(r.kind, Some(Kind::Server));
            assert!(r.unmatched);
        }
        assert_eq!(nodes.iter().filter(|n| n.unmatched).count(), 40);
        assert!(
            j.notes()
                .iter()
                .any(|n| n.starts_with("s1: 40 calls it served have no caller"))
        );
    }
}

#[test]
fn server_spans_show_their_one_method_or_themselves_and_leave_their_thread() {
    let mut c = Vm::new("c", 0);
    let mut s = Vm::new("s", 1_000_000);
    // Three HTTP calls: served by one method, by two, and by none.
    for (k, t) in [(0, 0), (1, 1000), (2, 2000)] {
        c.enter("main", &format!("C.call_{k}"), t);
        c.remote(
            "main",
            Side::Client,
            Protocol::Http,
            &format!("id-{k}"),
            "GET /x",
            t + 1,
        );
        c.exit("main", t + 900);
        c.exit("main", t + 901);
    }
    // The server's worker has a traced run() around everything: matched spans move out
    // of it, its own work stays.
    s.enter("worker", "Worker.run", 0);
    s.remote("worker", Side::Server, Protocol::Http, "id-0", "GET /x", 10);
    s.enter("worker", "H.one", 11);
    s.exit("worker", 20);
    s.exit("worker", 21);
    s.enter("worker", "Worker.idle", 30);
    s.exit("worker", 40);
    s.remote(
        "worker",
        Side::Server,
        Protocol::Http,
        "id-1",
        "GET /x",
        1010,
    );
    s.enter("worker", "H.a", 1011);
    s.exit("worker", 1020);
    s.enter("worker", "H.b", 1021);
    s.exit("worker", 1030);
    s.exit("worker", 1031);
    s.remote(
        "worker",
        Side::Server,
        Protocol::Http,
        "id-2",
        "GET /x",
        2010,
    );
    s.exit("worker", 2011);
    s.exit("worker", 3000);
    // A surplus exit, and a call left open at the thread's end.
    s.exit("worker", 3001);
    s.enter("worker", "Worker.last", 3002);
    s.enter("worker", "H.open", 3003);
    s.exit("worker", 3010);
    let j = join([c.recording(), s.recording()]);
    let nodes = flatten(&j);
    let by_method = |m: &str| nodes.iter().find(|n| n.method == m).unwrap();
    let client_child = |k: usize| {
        let call = by_method(&format!("C.call_{k}"));
        let client = &nodes[call.children[0]];
        assert_eq!(client.kind, Some(Kind::Client));
        assert_eq!(client.children.len(), 1);
        &nodes[client.children[0]]
    };
    let one = client_child(0);
    assert_eq!(
        (one.method.as_str(), one.kind, one.dur),
        ("H.one", Some(Kind::Server), 9)
    );
    let two = client_child(1);
    assert_eq!(
        (two.method.as_str(), two.kind),
        ("GET /x", Some(Kind::Server))
    );
    assert_eq!(
        two.children
            .iter()
            .map(|&i| nodes[i].method.as_str())
            .collect::<Vec<_>>(),
        ["H.a", "H.b"]
    );
    let none = client_child(2);
    assert_eq!((none.method.as_str(), none.children.len()), ("GET /x", 0));
    let run = by_method("Worker.run");
    assert_eq!(run.parent, None);
    assert_eq!(
        run.children
            .iter()
            .map(|&i| nodes[i].method.as_str())
            .collect::<Vec<_>>(),
        ["Worker.idle"]
    );
    let last = by_method("Worker.last");
    assert!(last.incomplete && last.dur == 8);
    assert!(!by_method("H.open").incomplete);
    assert!(
        j.notes()
            .contains(&"s: 1 exits without an open call were ignored".to_string()),
        "{:?}",
        j.notes()
    );
    assert!(
        j.notes()
            .iter()
            .any(|n| n.starts_with("s: 1 calls were still open"))
    );
    // Every activation once: 3 client methods + 3 client spans, 7 server methods + the
    // two spans that are not collapsed.
    assert_eq!(nodes.len(), 3 + 3 + 7 + 2);
}

#[test]
fn endpoints_compare_by_port_and_address_in_every_written_form() {
    let e = Endpoint::parse;
    for (a, b) in [
        ("localhost/127.0.0.1:1099", "127.0.0.1:1099"),
        ("/127.0.0.1:1099", "localhost:1099"),
        ("/[0:0:0:0:0:0:0:1]:1099", "127.0.0.1:1099"),
        ("::1:1099", "/127.0.0.1:1099"),
        ("host/10.1.2.3:80", "/10.1.2.3:80"),
        ("[::ffff:10.1.2.3]:80", "10.1.2.3:80"),
    ] {
        assert_eq!(e(a).agreement(&e(b)), 2, "{a} {b}");
    }
    assert_eq!(e("myhost:80").agreement(&e("10.1.2.3:80")), 1);
    assert_eq!(e("0.0.0.0:80").agreement(&e("10.1.2.3:80")), 1);
    assert_eq!(e("10.1.2.4:80").agreement(&e("10.1.2.3:80")), 0);
    assert_eq!(e("10.1.2.3:81").agreement(&e("10.1.2.3:80")), 0);
    assert_eq!(e("10.1.2.3").agreement(&e("10.1.2.3")), 0);
    assert_eq!(rmi_method("pkg.Api.get"), "get");
    assert_eq!(rmi_method("get"), "get");
    assert_eq!(rmi_method("pkg.Api.get(I)V"), "get");
}

#[test]
fn rmi_calls_whose_method_names_disagree_stay_unmatched() {
    let mut c = Vm::new("c", 0);
    let mut s = Vm::new("s", 0);
    c.remote(
        "main",
        Side::Client,
        Protocol::Rmi,
        "pkg.Api.get",
        "Api.get",
        0,
    );
    c.conn("main", "10.0.0.1:5000", "10.0.0.2:1099", 1);
    c.exit("main", 100);
    c.remote(
        "main",
        Side::Client,
        Protocol::Rmi,
        "pkg.Api.put",
        "Api.put",
        200,
    );
    c.exit("main", 300);
    s.conn("rmi", "10.0.0.2:1099", "10.0.0.1:5000", 9);
    s.remote(
        "rmi",
        Side::Server,
        Protocol::Rmi,
        "pkg.ApiImpl.get",
        "ApiImpl",
        10,
    );
    s.exit("rmi", 90);
    s.remote("rmi", Side::Server, Protocol::Rmi, "remove", "ApiImpl", 210);
    s.exit("rmi", 290);
    let j = join([c.recording(), s.recording()]);
    let nodes = flatten(&j);
    let get = nodes.iter().find(|n| n.method == "Api.get").unwrap();
    assert!(!get.unmatched && nodes[get.children[0]].vm == "s");
    let put = nodes.iter().find(|n| n.method == "Api.put").unwrap();
    assert!(put.unmatched && put.children.is_empty());
    assert!(
        j.notes()
            .iter()
            .any(|n| n.starts_with("1 RMI calls were left unmatched")),
        "{:?}",
        j.notes()
    );
    assert_eq!(nodes.iter().filter(|n| n.parent.is_none()).count(), 3);
}

#[test]
fn a_match_that_would_make_a_loop_is_undone() {
    // A VM calling itself over loopback, with a recording that pairs a call with the
    // server span around it: joined as is, the span would be its own ancestor.
    let mut a = Vm::new("a", 0);
    a.conn("rmi", "127.0.0.1:1099", "127.0.0.1:5000", 0);
    a.remote("rmi", Side::Server, Protocol::Rmi, "Api.get", "Impl", 1);
    a.enter("rmi", "Impl.get", 2);
    a.remote(
        "rmi",
        Side::Client,
        Protocol::Rmi,
        "pkg.Api.get",
        "Api.get",
        3,
    );
    a.conn("rmi", "localhost/127.0.0.1:5000", "/127.0.0.1:1099", 4);
    a.exit("rmi", 8);
    a.exit("rmi", 9);
    a.exit("rmi", 10);
    let j = join([a.recording()]);
    let nodes = flatten(&j);
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    assert!(nodes[0].unmatched && nodes[0].method == "Impl.get" && nodes[0].parent.is_none());
    assert!(nodes[1].unmatched && nodes[1].kind == Some(Kind::Client));
    assert!(
        j.notes()
            .iter()
            .any(|n| n.contains("would have made a loop")),
        "{:?}",
        j.notes()
    );
}

#[test]
fn a_recording_without_calls_is_noted() {
    let mut a = Vm::new("a", 0);
    a.enter("main", "A.run", 0);
    a.exit("main", 5);
    let j = join([a.recording(), Vm::new("idle", 0).recording()]);
    assert!(
        j.notes()
            .iter()
            .any(|n| n.starts_with("idle: its recording holds no calls"))
    );
    assert!(!j.notes().iter().any(|n| n.starts_with("a: its recording")));
    assert_eq!(flatten(&j).len(), 1);
}

/// A native file (records) holding `chunks` as its traces, a record chunk each, and where each
/// ends.
fn native_file(chunks: &[Chunk]) -> (Vec<u8>, Vec<usize>) {
    let profile = crate::model::Profile::default();
    let mut records = crate::records::RecordWriter::new();
    let mut bytes = crate::native::records_header().to_vec();
    let mut ends = Vec::new();
    for (i, c) in chunks.iter().enumerate() {
        let last = i + 1 == chunks.len();
        bytes.extend(
            records
                .update(&profile, &[], std::slice::from_ref(c), last)
                .unwrap(),
        );
        ends.push(bytes.len());
    }
    (bytes, ends)
}

#[test]
fn a_damaged_file_is_joined_up_to_the_damage_and_says_so() {
    let first = Chunk {
        vm: Some(VmHeader {
            vm: "a".into(),
            session: 1,
            host: "h".into(),
            pid: 7,
        }),
        methods: vec![(0, "A.run".into()), (1, "A.step".into())],
        threads: vec![(1, "main".into())],
        events: vec![(
            1,
            vec![
                Event::Enter { method: 0, ns: 10 },
                Event::Enter { method: 1, ns: 11 },
                Event::Exit { ns: 20 },
                Event::Enter { method: 1, ns: 21 },
            ],
        )],
        dropped_calls: 0,
    };
    let second = Chunk {
        events: vec![(1, vec![Event::Exit { ns: 30 }, Event::Exit { ns: 40 }])],
        dropped_calls: 3,
        ..Chunk::default()
    };
    let (bytes, ends) = native_file(&[first, second]);
    let whole = read_recording(&bytes, "a.jvmprof").unwrap();
    assert!(whole.damage.is_none());
    let cut = read_recording(&bytes[..ends[1] - 3], "a.jvmprof").unwrap();
    let damage = cut.damage.clone().unwrap();
    assert!(
        damage.starts_with("a.jvmprof: the trace is damaged"),
        "{damage}"
    );
    let j = join([cut]);
    assert_eq!(j.notes()[0], damage);
    let nodes = flatten(&j);
    assert_eq!(nodes.len(), 3);
    assert_eq!(nodes[0].method, "A.run");
    assert!(nodes[0].incomplete && nodes[0].dur == 11);
    assert!(!nodes[1].incomplete && nodes[1].dur == 9);
    assert!(nodes[2].incomplete && nodes[2].dur == 0);
    assert!(j.notes().iter().any(|n| n == "a: 2 calls were still open at their thread's last event (closed there, marked incomplete)"));
    // No trace section, or not ours at all.
    let mut plain = Vec::new();
    crate::native::write(&crate::model::Profile::default(), &mut plain).unwrap();
    assert_eq!(
        read_recording(&plain, "p.jvmprof").unwrap_err(),
        "p.jvmprof has no method traces; record with --mode trace"
    );
    assert!(
        read_recording(b"hello", "x.txt")
            .unwrap_err()
            .starts_with("x.txt is not a jvmprof file")
    );
}

#[test]
fn unrelated_runs_join_into_separate_trees_with_a_note() {
    let a = Chain::run(Protocol::Http, 5);
    let b = Chain::run(Protocol::Rmi, 5);
    let mut recs = Vec::new();
    for (run, vms) in [("a", a.vms), ("b", b.vms)] {
        for mut vm in vms.into_iter().take(2) {
            vm.trace.vm = format!("{run}-{}", vm.trace.vm);
            recs.push(vm.recording());
        }
    }
    let j = join(recs);
    assert_eq!(j.groups(), &[vec![0, 1], vec![2, 3]]);
    assert!(
        j.notes()
            .iter()
            .any(|n| n.ends_with("[a-client, a-s1]; [b-client, b-s1]")),
        "{:?}",
        j.notes()
    );
    let nodes = flatten(&j);
    let roots: Vec<&Flat> = nodes.iter().filter(|n| n.parent.is_none()).collect();
    assert_eq!(roots.len(), 10);
    assert!(roots[..5].iter().all(|r| r.vm == "a-client"));
    assert!(roots[5..].iter().all(|r| r.vm == "b-client"));
    // Each tree stays within its run.
    for n in &nodes {
        let mut r = n;
        while let Some(p) = r.parent {
            r = &nodes[p];
        }
        assert_eq!(n.vm[..2], r.vm[..2]);
    }
}
