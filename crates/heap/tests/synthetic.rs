//! A small HPROF file written by hand (the record layout of the JDK's heapDumper.cpp): exact
//! sizes, roots and paths for a known graph, and no panic on any truncation or corruption of it.

use jvmprof_heap::{Error, Options, analyze_file, graph};
use proptest::prelude::*;
use std::path::PathBuf;

struct Dump(Vec<u8>);

impl Dump {
    fn new() -> Dump {
        let mut d = Dump(b"JAVA PROFILE 1.0.2\0".to_vec());
        d.u4(8);
        d.0.extend_from_slice(&0u64.to_be_bytes());
        d
    }
    fn u1(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u2(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u4(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn id(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn record(&mut self, tag: u8, body: Dump) {
        self.u1(tag);
        self.u4(0);
        self.u4(body.0.len() as u32);
        self.0.extend_from_slice(&body.0);
    }
    fn body() -> Dump {
        Dump(Vec::new())
    }
}

/// Classes java.lang.Object (0x100), java.lang.Class (0x108), Holder (0x110, fields `next`,
/// `data` and `n` int, static `ROOT`) and byte[]; objects: Holder a (0x1000) -> b (0x1010) ->
/// byte[16] (0x1020); b.next = a (a cycle); static ROOT = a; a Java-frame root on c (0x1030,
/// a Holder with data = the same byte[]).
fn sample() -> Vec<u8> {
    let mut d = Dump::new();
    let strings = [
        (1, "java/lang/Object"),
        (2, "java/lang/Class"),
        (3, "Holder"),
        (4, "next"),
        (5, "data"),
        (6, "n"),
        (7, "ROOT"),
        (8, "main"),
        (9, "run"),
        (10, "()V"),
    ];
    for (id, s) in strings {
        let mut b = Dump::body();
        b.id(id);
        b.0.extend_from_slice(s.as_bytes());
        d.record(0x01, b);
    }
    for (serial, class, name) in [(1, 0x100, 1), (2, 0x108, 2), (3, 0x110, 3)] {
        let mut b = Dump::body();
        b.u4(serial);
        b.id(class);
        b.u4(0);
        b.id(name);
        d.record(0x02, b);
    }
    // A frame Holder.run and a trace of thread 1.
    let mut b = Dump::body();
    b.id(0x77);
    b.id(9);
    b.id(10);
    b.id(0);
    b.u4(3);
    b.u4(12);
    d.record(0x04, b);
    let mut b = Dump::body();
    b.u4(5);
    b.u4(1);
    b.u4(1);
    b.id(0x77);
    d.record(0x05, b);

    let mut h = Dump::body();
    let class = |h: &mut Dump, id: u64, sup: u64, statics: &[(u64, u64)], fields: &[(u64, u8)]| {
        h.u1(0x20);
        h.id(id);
        h.u4(0);
        h.id(sup);
        for _ in 0..5 {
            h.id(0);
        }
        h.u4(0);
        h.u2(0);
        h.u2(statics.len() as u16);
        for &(name, v) in statics {
            h.id(name);
            h.u1(2);
            h.id(v);
        }
        h.u2(fields.len() as u16);
        for &(name, t) in fields {
            h.id(name);
            h.u1(t);
        }
    };
    class(&mut h, 0x100, 0, &[], &[]);
    class(&mut h, 0x108, 0x100, &[], &[]);
    class(
        &mut h,
        0x110,
        0x100,
        &[(7, 0x1000)],
        &[(4, 2), (5, 2), (6, 10)],
    );
    let holder = |h: &mut Dump, id: u64, next: u64, data: u64| {
        h.u1(0x21);
        h.id(id);
        h.u4(0);
        h.id(0x110);
        h.u4(20);
        h.id(next);
        h.id(data);
        h.u4(42);
    };
    holder(&mut h, 0x1000, 0x1010, 0);
    holder(&mut h, 0x1010, 0x1000, 0x1020);
    h.u1(0x23);
    h.id(0x1020);
    h.u4(0);
    h.u4(16);
    h.u1(8);
    h.0.extend_from_slice(&[7u8; 16]);
    holder(&mut h, 0x1030, 0, 0x1020);
    // Thread object 0x1040 (a plain Object here) with serial 1 and trace 5; c is a local.
    h.u1(0x21);
    h.id(0x1040);
    h.u4(0);
    h.id(0x100);
    h.u4(0);
    h.u1(0x08);
    h.id(0x1040);
    h.u4(1);
    h.u4(5);
    h.u1(0x03);
    h.id(0x1030);
    h.u4(1);
    h.u4(0);
    d.record(0x1c, h);
    d.record(0x2c, Dump::body());
    d.0
}

fn write(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("jvmprof-heap-synthetic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join(name);
    std::fs::write(&f, bytes).unwrap();
    f
}

#[test]
fn sizes_roots_and_paths_of_a_known_graph() {
    let f = write("sample.hprof", &sample());
    let report = analyze_file(
        &f,
        &Options {
            top: 50,
            suspect_percent: 10.0,
        },
        &mut |_, _, _| {},
    )
    .unwrap();
    // Holder: 12-byte header + two 4-byte references + an int = 24; byte[16]: 16 + 16 = 32.
    let holder = report.classes.iter().find(|c| c.name == "Holder").unwrap();
    assert_eq!((holder.instances, holder.shallow_bytes), (3, 72));
    let bytes = report.classes.iter().find(|c| c.name == "byte[]").unwrap();
    assert_eq!((bytes.instances, bytes.shallow_bytes), (1, 32));
    // a and b form a cycle held by the static; the array is shared with c: retained by neither.
    let a = report.dominators.iter().find(|d| d.id == "0x1000").unwrap();
    assert_eq!(a.retained_bytes, 48);
    assert_eq!(a.root, "static Holder.ROOT");
    let c = report.dominators.iter().find(|d| d.id == "0x1030").unwrap();
    assert_eq!(c.retained_bytes, 24);
    assert_eq!(c.root, "thread #1 local in Holder.run");
    let arr = report.dominators.iter().find(|d| d.id == "0x1020").unwrap();
    assert_eq!(arr.retained_bytes, 32);
    // The shortest path: from the local through c.data (b.data is one step further).
    assert_eq!(
        arr.path,
        vec!["thread #1 local in Holder.run", "Holder.data"]
    );
}

#[test]
fn every_truncation_is_an_error_naming_an_offset() {
    let bytes = sample();
    let f = write("cut.hprof", &bytes);
    for cut in 0..bytes.len() - 9 {
        std::fs::write(&f, &bytes[..cut]).unwrap();
        match graph::load(&f, &mut |_, _, _| {}) {
            Err(Error::Truncated { .. } | Error::NotHprof(_) | Error::NoHeap) => {}
            Err(Error::Corrupt { .. }) => {}
            Err(e) => panic!("cut at {cut}: {e}"),
            Ok(_) => panic!("cut at {cut} was accepted"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn corrupted_dumps_never_panic(flips in proptest::collection::vec((0usize..4000, any::<u8>()), 1..6)) {
        let mut bytes = sample();
        for (at, v) in flips {
            let at = at % bytes.len();
            bytes[at] = v;
        }
        let f = write("fuzz.hprof", &bytes);
        let _ = analyze_file(&f, &Options::default(), &mut |_, _, _| {});
    }
}
