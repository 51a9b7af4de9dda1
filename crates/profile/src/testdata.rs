//! Profiles with known stacks and values, shared by the unit tests of every format.

use crate::model::*;

/// A cpu profile with two threads and two metrics (samples, ns at a 10 ms interval):
///
/// | thread   | stack (root first)                                         | samples |
/// |----------|------------------------------------------------------------|---------|
/// | main     | App.main; App.work (line 10); HashMap.put                   | 3       |
/// | main     | App.main; App.work (line 12); HashMap.put                   | 2       |
/// | main     | App.main; App.work (line 10)                                | 1       |
/// | worker-1 | Thread.run; Outer$Inner.run; write (native)                 | 4       |
/// | worker-1 | App.main; App.work (line 10)                                | 1       |
pub fn sample_profile() -> Profile {
    let mut meta = Meta {
        modes: vec!["cpu".into()],
        metrics: vec![Metric::Samples, Metric::Ns],
        interval_ns: 10_000_000,
        engine: "asgct".into(),
        jvm_name: "OpenJDK 64-Bit Server VM".into(),
        jvm_version: "21.0.5+11".into(),
        pid: 4242,
        command: "java -cp app.jar com.example.App".into(),
        start_unix_ms: 1_700_000_000_000,
        duration_ms: 2_000,
        dropped_samples: 3,
        ..Meta::default()
    };
    meta.walk_failures.insert("not_walkable_java".into(), 5);
    meta.walk_failures.insert("gc_active".into(), 2);
    meta.extra.insert("agent_version".into(), "0.1.0".into());
    let mut b = ProfileBuilder::new(meta);
    let main_ = b.frame(Frame::java(
        "com.example.App",
        "main",
        "([Ljava/lang/String;)V",
        5,
    ));
    let work10 = b.frame(Frame::java("com.example.App", "work", "()V", 10));
    let work12 = b.frame(Frame::java("com.example.App", "work", "()V", 12));
    let put = b.frame(Frame::java(
        "java.util.HashMap",
        "put",
        "(Ljava/lang/Object;Ljava/lang/Object;)Ljava/lang/Object;",
        611,
    ));
    let run = b.frame(Frame::java("java.lang.Thread", "run", "()V", 840));
    let inner = b.frame(Frame::java("Outer$Inner", "run", "()V", 0));
    let write = b.frame(Frame::synthetic(FrameKind::Native, "write"));
    let t_main = b.thread(Thread {
        tid: 101,
        name: "main".into(),
    });
    let t_worker = b.thread(Thread {
        tid: 102,
        name: "worker-1".into(),
    });
    let s0 = b.stack(&[main_, work10, put]);
    let s1 = b.stack(&[main_, work12, put]);
    let s2 = b.stack(&[main_, work10]);
    let s3 = b.stack(&[run, inner, write]);
    let ms = 10_000_000;
    b.add(t_main, s0, ThreadState::Running, &[3, 3 * ms]);
    b.add(t_main, s1, ThreadState::Running, &[2, 2 * ms]);
    b.add(t_main, s2, ThreadState::Running, &[1, ms]);
    b.add(t_worker, s3, ThreadState::Running, &[4, 4 * ms]);
    b.add(t_worker, s2, ThreadState::Running, &[1, ms]);
    b.finish()
}

/// [`sample_profile`] with a timeline (offsets in ms; sample indices in the order added):
///
/// | thread   | at (ms)            | stack              |
/// |----------|--------------------|--------------------|
/// | main     | 0, 10, 20          | …work (10); put    |
/// | main     | 30, 40             | …work (12); put    |
/// | main     | 50                 | …work (10)         |
/// | worker-1 | 5, 15, 25 (×2)     | …Inner.run; write  |
/// | worker-1 | 105                | …work (10)         |
///
/// The worker's sample at 25 ms stands for two periods (a timer overrun).
pub fn timed_profile() -> Profile {
    let mut p = sample_profile();
    let ms = 1_000_000;
    for (at, sample, weight, trace) in [
        (0, 0, 1, 0),
        (5, 3, 1, 7),
        (10, 0, 1, 7),
        (15, 3, 1, 9),
        (20, 0, 1, 0),
        (25, 3, 2, 7),
        (30, 1, 1, 0),
        (40, 1, 1, 9),
        (50, 2, 1, 0),
        (105, 4, 1, 0),
    ] {
        p.timeline.push(TimedSample {
            offset_ns: at * ms,
            sample,
            weight,
            trace,
        });
    }
    p
}

/// An alloc profile whose leaves are allocated types.
#[allow(dead_code)] // used by the report and flame graph tests
pub fn alloc_profile() -> Profile {
    let meta = Meta {
        modes: vec!["alloc".into()],
        metrics: vec![Metric::Bytes, Metric::Objects],
        engine: "asgct".into(),
        ..Meta::default()
    };
    let mut b = ProfileBuilder::new(meta);
    let main_ = b.frame(Frame::java("com.example.App", "main", "", 0));
    let bytes = b.frame(Frame::synthetic(FrameKind::AllocatedType, "byte[]"));
    let string = b.frame(Frame::synthetic(
        FrameKind::AllocatedType,
        "java.lang.String",
    ));
    let t = b.thread(Thread {
        tid: 1,
        name: "main".into(),
    });
    let s0 = b.stack(&[main_, bytes]);
    let s1 = b.stack(&[main_, string]);
    b.add(t, s0, ThreadState::Running, &[1_048_576, 2]);
    b.add(t, s1, ThreadState::Running, &[4_800, 200]);
    b.finish()
}

/// The sample profile after a change: HashMap.put got cheaper, a new method appeared.
pub fn changed_profile() -> Profile {
    let mut b = ProfileBuilder::new(sample_profile().meta);
    let main_ = b.frame(Frame::java("com.example.App", "main", "", 7));
    let work = b.frame(Frame::java("com.example.App", "work", "", 99));
    let put = b.frame(Frame::java("java.util.HashMap", "put", "", 1));
    let sort = b.frame(Frame::java("java.util.Arrays", "sort", "", 1));
    let t = b.thread(Thread {
        tid: 5,
        name: "main".into(),
    });
    let s0 = b.stack(&[main_, work, put]);
    let s1 = b.stack(&[main_, work, sort]);
    b.add(t, s0, ThreadState::Running, &[1, 10]);
    b.add(t, s1, ThreadState::Running, &[9, 90]);
    b.finish()
}
