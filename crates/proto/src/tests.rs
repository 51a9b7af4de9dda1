use super::*;
use crate::legacy::{Encoder, SampleBatch, SampleDelta, Tables};
use crate::wire::put_frame;
use jvmprof_profile::FrameKind;
use proptest::prelude::*;

fn hello() -> Hello {
    Hello {
        version: VERSION,
        token: Some("t".into()),
        pid: 42,
        command: "java Service 10".into(),
        jvm: "OpenJDK 64-Bit Server VM 17".into(),
        os: "Linux 6.1".into(),
        host: "box".into(),
        agent_version: "0.1.0".into(),
        start_unix_ms: 1_700_000_000_000,
    }
}

fn tables() -> Tables {
    Tables {
        frames: vec![
            Frame::java("Service", "main", "([Ljava/lang/String;)V", 20),
            Frame::java("Service", "work", "(J)J", 11),
            Frame::synthetic(FrameKind::Synthetic, "[GC]"),
        ],
        stacks: vec![vec![0, 1], vec![2]],
        threads: vec![
            Thread {
                tid: 7,
                name: "main".into(),
            },
            Thread {
                tid: 9,
                name: "GC Thread#0".into(),
            },
        ],
        modes: vec!["cpu".into()],
        metrics: vec![Metric::Samples, Metric::Ns],
        interval_ns: 10_000_000,
    }
}

/// A whole valid connection: hello, samples, snapshot, dropped, bye.
fn connection() -> Vec<u8> {
    let t = tables();
    let mut e = Encoder::new();
    let mut out = Vec::new();
    e.hello(&hello(), &mut out);
    e.samples(
        &t,
        &SampleBatch {
            seq: 7,
            time_unix_ms: 1000,
            samples: vec![
                SampleDelta {
                    thread: 0,
                    stack: 0,
                    state: ThreadState::Running,
                    values: vec![3, 30_000_000],
                },
                SampleDelta {
                    thread: 1,
                    stack: 1,
                    state: ThreadState::Running,
                    values: vec![1, 10_000_000],
                },
            ],
        },
        &mut out,
    );
    e.snapshot(
        &t,
        &Snapshot {
            time_unix_ms: 1001,
            threads: vec![ThreadDump {
                id: 1,
                name: "main".into(),
                group: "main".into(),
                daemon: false,
                state: ThreadState::Running,
                order: 0,
                frames: vec![1, 0],
            }],
        },
        &mut out,
    );
    e.message(
        &Message::Dropped {
            snapshots: 2,
            sample_batches: 1,
            samples: 5,
        },
        &mut out,
    );
    e.message(&Message::Bye, &mut out);
    out
}

fn decode_all(bytes: &[u8], chunk: usize) -> Result<Vec<Event>, ProtoError> {
    let mut d = Decoder::new();
    let mut events = Vec::new();
    for c in bytes.chunks(chunk.max(1)) {
        d.push(c);
        while let Some(e) = d.next_event()? {
            events.push(e);
        }
    }
    d.finish()?;
    Ok(events)
}

#[test]
fn round_trip_resolves_every_id() {
    let bytes = connection();
    for chunk in [1, 3, 7, bytes.len()] {
        let events = decode_all(&bytes, chunk).unwrap();
        assert_eq!(events.len(), 5, "chunk {chunk}");
        assert_eq!(events[0], Event::Hello(hello()));
        let Event::Samples {
            seq,
            time_unix_ms,
            profile,
        } = &events[1]
        else {
            panic!("{:?}", events[1])
        };
        assert_eq!(*time_unix_ms, 1000);
        assert_eq!(*seq, 7);
        assert_eq!(profile.meta.metrics, vec![Metric::Samples, Metric::Ns]);
        assert_eq!(profile.meta.interval_ns, 10_000_000);
        let collapsed =
            jvmprof_profile::collapsed::to_string(profile, &Default::default()).unwrap();
        assert_eq!(collapsed, "Service.main;Service.work 3\n[GC] 1\n");
        assert_eq!(profile.threads[0].name, "main");
        let Event::Snapshot(s) = &events[2] else {
            panic!()
        };
        assert_eq!(s.time_unix_ms, 1001);
        assert_eq!(
            s.threads[0].frames[0],
            Frame::java("Service", "work", "(J)J", 11)
        );
        assert_eq!(s.threads[0].frames[1].line, 20);
        assert_eq!(
            events[3],
            Event::Dropped {
                snapshots: 2,
                sample_batches: 1,
                samples: 5
            }
        );
        assert_eq!(events[4], Event::Bye);
    }
}

#[test]
fn tables_are_sent_once_per_connection() {
    let t = tables();
    let mut e = Encoder::new();
    let mut first = Vec::new();
    e.sync(&t, &mut first);
    let mut again = Vec::new();
    e.sync(&t, &mut again);
    assert!(!first.is_empty());
    assert!(
        again.is_empty(),
        "a second sync with nothing new sends nothing"
    );
    // A new connection sends everything again.
    let mut e2 = Encoder::new();
    let mut fresh = Vec::new();
    e2.sync(&t, &mut fresh);
    assert_eq!(fresh, first);
}

#[test]
fn errors_name_what_is_wrong() {
    let err = |bytes: &[u8]| decode_all(bytes, 1000).unwrap_err().to_string();
    assert_eq!(
        err(b"GET / HTTP/1.1\r\n"),
        "not a jvmprof agent connection (starts with [47, 45, 54, 20], expected \"JVMP\")"
    );
    let whole = connection();
    // Truncated in the middle of the second message.
    let e = err(&whole[..whole.len() - 3]);
    assert!(
        e.starts_with("connection closed in the middle of message"),
        "{e}"
    );
    // A frame claiming 4 GB.
    let mut big = MAGIC.to_vec();
    big.extend_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        err(&big),
        "message 1: frame length 4294967295 exceeds the limit of 16777216 bytes"
    );
    // Samples first.
    let mut out = MAGIC.to_vec();
    put_frame(&Message::Bye, &mut out);
    assert_eq!(
        err(&out),
        "message 1 (Bye): the connection must start with Hello"
    );
    // Wrong version.
    let mut out = MAGIC.to_vec();
    put_frame(
        &Message::Hello(Hello {
            version: 99,
            ..hello()
        }),
        &mut out,
    );
    assert_eq!(
        err(&out),
        "message 1 (Hello): protocol version 99 not supported (this collector speaks versions 1 to 4)"
    );
    // A stack that refers to a frame never defined.
    let mut e = Encoder::new();
    let mut out = Vec::new();
    e.hello(&hello(), &mut out);
    put_frame(
        &Message::Stacks {
            first: 0,
            stacks: vec![vec![0, 5]],
        },
        &mut out,
    );
    assert_eq!(
        err(&out),
        "message 2 (Stacks): stack 0 refers to frame 0 but 0 frames are defined"
    );
    // A payload that is not a message.
    let mut out = Vec::new();
    e.hello(&hello(), &mut out);
    out.extend_from_slice(&[2, 0, 0, 0, 0xff, 0xff]);
    let e = err(&out);
    assert!(
        e.starts_with("message 2 (2 bytes): undecodable payload"),
        "{e}"
    );
}

#[test]
fn decoder_stays_failed() {
    let mut d = Decoder::new();
    d.push(b"XXXX");
    let e1 = d.next_event().unwrap_err();
    d.push(&connection());
    assert_eq!(d.next_event().unwrap_err(), e1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512), chunk in 1usize..64) {
        match decode_all(&bytes, chunk) {
            // Random bytes almost never start with the magic; an empty input is an empty connection.
            Ok(events) => prop_assert!(bytes.is_empty() && events.is_empty()),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn random_frames_after_magic_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut input = Vec::new();
        Encoder::new().hello(&hello(), &mut input);
        input.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        input.extend_from_slice(&bytes);
        if let Err(e) = decode_all(&input, 4096) {
            prop_assert!(e.to_string().starts_with("message 2"), "{}", e);
        }
    }

    #[test]
    fn mutated_connections_never_panic(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = connection();
        for (i, b) in &edits {
            let i = i.index(bytes.len());
            bytes[i] = *b;
        }
        let cut = cut.index(bytes.len() + 1);
        // Either it decodes (a mutation can be harmless) or the error says what is wrong.
        if let Err(e) = decode_all(&bytes[..cut], 5) {
            let s = e.to_string();
            prop_assert!(
                s.starts_with("message ") || s.starts_with("not a jvmprof") || s.starts_with("connection closed"),
                "{}", s
            );
        }
    }
}

#[test]
fn labels_follow_the_hello_and_version_1_agents_are_still_accepted() {
    let labels = vec![
        ("service".to_string(), "checkout".to_string()),
        ("env".to_string(), "prod".to_string()),
    ];
    let mut e = Encoder::new();
    let mut out = Vec::new();
    e.hello(&hello(), &mut out);
    e.labels(&labels, &mut out);
    put_frame(&Message::Bye, &mut out);
    let events = decode_all(&out, 3).unwrap();
    assert_eq!(
        events,
        vec![Event::Hello(hello()), Event::Labels(labels), Event::Bye]
    );
    // No labels, no message.
    let mut out = Vec::new();
    Encoder::new().labels(&[], &mut out);
    assert!(out.is_empty());
    // An agent of version 1 (no labels) is accepted.
    let mut out = MAGIC.to_vec();
    let v1 = Hello {
        version: 1,
        ..hello()
    };
    put_frame(&Message::Hello(v1.clone()), &mut out);
    assert_eq!(decode_all(&out, 5).unwrap(), vec![Event::Hello(v1)]);
    // Too many labels, or too long, are refused by name.
    for (bad, why) in [
        (
            (0..33)
                .map(|i| (format!("k{i}"), "v".to_string()))
                .collect::<Vec<_>>(),
            "33 labels (at most 32)",
        ),
        (
            vec![("k".to_string(), "v".repeat(257))],
            "label 'k': keys are 1 to 64 bytes, values at most 256",
        ),
        (
            vec![(String::new(), "v".to_string())],
            "label '': keys are 1 to 64 bytes, values at most 256",
        ),
    ] {
        let mut out = Vec::new();
        Encoder::new().hello(&hello(), &mut out);
        put_frame(&Message::Labels(bad), &mut out);
        let e = decode_all(&out, 64).unwrap_err().to_string();
        assert_eq!(e, format!("message 2 (Labels): {why}"));
    }
}

#[test]
fn trace_chunks_pass_whole_and_damaged_ones_are_refused() {
    use jvmprof_profile::trace::log::{Chunk, Event as TraceEvent, write_chunk};
    let chunk = Chunk {
        threads: vec![(1, "main".into())],
        methods: vec![(2, "A.run".into())],
        events: vec![(
            1,
            vec![
                TraceEvent::Enter { method: 2, ns: 10 },
                TraceEvent::Exit { ns: 20 },
            ],
        )],
        ..Chunk::default()
    };
    let mut bytes = Vec::new();
    write_chunk(&chunk, &mut bytes).unwrap();
    let mut e = Encoder::new();
    let mut out = Vec::new();
    e.hello(&hello(), &mut out);
    e.message(
        &Message::Trace {
            seq: 1,
            chunk: bytes.clone(),
        },
        &mut out,
    );
    let events = decode_all(&out, 7).unwrap();
    assert!(
        events.iter().any(|ev| *ev
            == Event::Trace {
                seq: 1,
                chunk: bytes.clone()
            }),
        "{events:?}"
    );
    // A flipped byte: the chunk's checksum fails and the message says so.
    let mut bad = bytes.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    let mut out = Vec::new();
    Encoder::new().hello(&hello(), &mut out);
    put_frame(&Message::Trace { seq: 2, chunk: bad }, &mut out);
    let e = decode_all(&out, 1 << 20).unwrap_err().to_string();
    assert!(e.contains("(Trace)") && e.contains("checksum"), "{e}");
}

#[test]
fn version_4_carries_record_chunks_and_refuses_damaged_chunks() {
    let mut b = ProfileBuilder::new(Meta {
        modes: vec!["cpu".into()],
        metrics: vec![Metric::Samples, Metric::Ns],
        interval_ns: 10,
        ..Meta::default()
    });
    let t = b.thread(Thread {
        tid: 3,
        name: "main".into(),
    });
    let f = b.frame(Frame::java("a.B", "c", "()V", 3));
    let s = b.stack(&[f]);
    b.add(t, s, ThreadState::Running, &[2, 20]);
    let profile = b.finish();
    let chunk = jvmprof_profile::records::RecordWriter::whole(&profile, &[]).unwrap();
    let mut input = Vec::new();
    Encoder::new().hello(&hello(), &mut input);
    let records = Message::Records {
        seq: 1,
        time_unix_ms: 5,
        chunk: chunk.clone(),
    };
    put_frame(&records, &mut input);
    let events = decode_all(&input, 7).unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(
        events[1],
        Event::Records {
            seq: 1,
            time_unix_ms: 5,
            chunk: chunk.clone()
        }
    );
    // The chunks replay to the profile the agent had.
    let mut r = jvmprof_profile::records::Replay::new();
    jvmprof_profile::records::replay::apply_all(&mut r, &chunk).unwrap();
    assert_eq!(r.finish().unwrap().0, profile);

    for (bytes, says) in [
        (
            {
                let mut c = chunk.clone();
                let last = c.len() - 1;
                c[last] ^= 1;
                c
            },
            "fails its checksum",
        ),
        (chunk[..chunk.len() - 1].to_vec(), "cut short"),
        (Vec::new(), "no record chunk"),
    ] {
        let mut input = Vec::new();
        Encoder::new().hello(&hello(), &mut input);
        put_frame(
            &Message::Records {
                seq: 2,
                time_unix_ms: 5,
                chunk: bytes,
            },
            &mut input,
        );
        let e = decode_all(&input, 4096).unwrap_err().to_string();
        assert!(e.contains("message 2 (Records)") && e.contains(says), "{e}");
    }
}
