//! The options parser against every key, every bad value and every combination the agent and
//! the CLI rely on.

use super::*;
use crate::process::utc_stamp;

fn start(s: &str) -> Options {
    match parse(s).unwrap() {
        Command::Start(o) => *o,
        other => panic!("{other:?}"),
    }
}

#[test]
fn root_sessions() {
    let o = start("mode=exact,root=a.B.run,root=a.B.go(ILjava/lang/String;)V,min_latency=5ms");
    let x = o.exact.clone().unwrap();
    assert_eq!(x.roots.len(), 2);
    assert_eq!(
        x.roots[1].descriptor.as_deref(),
        Some("(ILjava/lang/String;)V")
    );
    assert_eq!(x.min_latency, Some(Duration::from_millis(5)));
    assert!(!x.bytecodes);
    assert_eq!(o.metrics(), vec![Metric::Calls, Metric::Ns]);
    let cpu = start("mode=exact,root=a.B.run,timer=cpu,bba=precise");
    assert_eq!(
        cpu.metrics(),
        vec![Metric::Calls, Metric::CpuNs, Metric::Bytecodes]
    );
    // Whole-program exact mode keeps its metrics.
    assert_eq!(
        start("mode=exact").metrics(),
        vec![Metric::Calls, Metric::Bytecodes]
    );
    let e = parse("mode=exact,root=a.B.run(Lfoo").unwrap_err();
    assert!(
        e.contains("bad root 'a.B.run(Lfoo'") && e.contains("no closing ';'"),
        "{e}"
    );
    assert!(
        parse("mode=exact,root=run")
            .unwrap_err()
            .contains("bad root 'run'")
    );
    assert!(
        parse("mode=cpu,root=a.B.run")
            .unwrap_err()
            .contains("need mode exact")
    );
    assert!(
        parse("mode=exact,timer=cpu")
            .unwrap_err()
            .contains("need a root")
    );
    assert!(
        parse("mode=exact,root=a.B.c,timer=x")
            .unwrap_err()
            .contains("unknown timer")
    );
}

#[test]
fn parses_all_keys() {
    let o = start(
        "mode=wall+alloc+lock,alloc_interval=1m,live,lock_threshold=1ms,interval=1ms,file=/tmp/x.collapsed,threads,depth=64,engine=safepoint,duration=30s,value=ns",
    );
    assert_eq!(o.sampling, Some(Mode::Wall));
    assert_eq!(
        o.alloc,
        Some(AllocOptions {
            interval_bytes: 1 << 20,
            live: true
        })
    );
    assert_eq!(
        o.lock,
        Some(LockOptions {
            threshold: Duration::from_millis(1)
        })
    );
    assert_eq!(o.modes(), vec!["wall", "alloc", "lock"]);
    let a = start("mode=alloc");
    assert_eq!(a.sampling, None);
    assert_eq!(a.alloc.unwrap().interval_bytes, 512 * 1024);
    assert_eq!(start("").sampling, Some(Mode::Cpu));
    assert_eq!(
        parse("dump=/tmp/d.json").unwrap(),
        Command::Dump(PathBuf::from("/tmp/d.json"))
    );
    assert_eq!(o.interval, Duration::from_millis(1));
    assert_eq!(o.file, Some(PathBuf::from("/tmp/x.collapsed")));
    assert!(o.threads);
    assert_eq!(o.depth, 64);
    assert_eq!(o.engine, Engine::Safepoint);
    assert_eq!(o.duration, Some(Duration::from_secs(30)));
    assert_eq!(o.value.as_deref(), Some("ns"));
    assert_eq!(start("").interval, Duration::from_millis(10));
    assert_eq!(parse("stop").unwrap(), Command::Stop(None));
    assert_eq!(
        parse("stop,reply=/tmp/r").unwrap(),
        Command::Stop(Some(PathBuf::from("/tmp/r")))
    );
    assert_eq!(
        parse("query=/tmp/q").unwrap(),
        Command::Status(PathBuf::from("/tmp/q"))
    );
    let owned = start("owner=123:456,owner_file=/tmp/p.html,log=/tmp/log");
    assert_eq!(owned.owner, Some((123, 456)));
    assert_eq!(owned.owner_file, Some(PathBuf::from("/tmp/p.html")));
    assert!(parse("owner=abc").is_err());
    assert!(parse("duration=0s").unwrap_err().contains("more than 0"));
    let s = start("server=127.0.0.1:7878,refresh=500ms,token=abc");
    assert_eq!(s.server.as_deref(), Some("127.0.0.1:7878"));
    assert_eq!(s.refresh, Duration::from_millis(500));
    assert_eq!(start("flush=10s").flush, Some(Duration::from_secs(10)));
    assert!(parse("flush=100ms").unwrap_err().contains("at least 1s"));
    for bad in ["refresh=5ms", "refresh=61s"] {
        let e = parse(&format!("server=127.0.0.1:7878,{bad}")).unwrap_err();
        assert!(e.contains("between 10ms and 60s"), "{bad}: {e}");
    }
    assert_eq!(s.token.as_deref(), Some("abc"));
    let l = start("server=h:1,labels=service:checkout; env:prod ;");
    let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
    assert_eq!(
        l.labels,
        vec![pair("service", "checkout"), pair("env", "prod")]
    );
    assert_eq!(
        start("server=h:1,labels=url:http://x:8080/a").labels,
        vec![pair("url", "http://x:8080/a")]
    );
    for (bad, why) in [
        ("labels=service", "not KEY:VALUE"),
        ("labels=a b:c", "label key 'a b'"),
        ("labels=a:1;a:2", "given twice"),
        ("labels=:x", "not KEY:VALUE"),
    ] {
        let e = parse(&format!("server=h:1,{bad}")).unwrap_err();
        assert!(e.contains(why), "{bad}: {e}");
    }
    let dir = std::env::temp_dir().join(format!("jvmprof-opt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tf = dir.join("t");
    std::fs::write(&tf, " s3cret \nignored\n").unwrap();
    let t = start(&format!("server=h:1,token_file={}", tf.display()));
    assert_eq!(t.token.as_deref(), Some("s3cret"));
    std::fs::write(&tf, "\n").unwrap();
    let e = parse(&format!("server=h:1,token_file={}", tf.display())).unwrap_err();
    assert!(e.contains("is empty"), "{e}");
    let e = parse(&format!("server=h:1,token_file={}/none", dir.display())).unwrap_err();
    assert!(e.contains("cannot read"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(s.file, None, "streaming alone writes no file");
    assert!(
        start("").file.is_some(),
        "without a server the agent writes a file"
    );
}

#[test]
fn rejects_bad_options_by_name() {
    assert!(
        parse("colour=red")
            .unwrap_err()
            .contains("unknown option 'colour'")
    );
    assert!(
        parse("mode=gpu")
            .unwrap_err()
            .contains("unknown mode 'gpu'")
    );
    assert!(
        parse("interval=10 parsecs")
            .unwrap_err()
            .contains("unknown unit")
    );
    assert!(parse("interval=5us").unwrap_err().contains("minimum"));
    assert!(parse("depth=0").unwrap_err().contains("depth"));
    assert!(parse("file").unwrap_err().contains("needs a value"));
    assert!(
        parse("threads=maybe")
            .unwrap_err()
            .contains("true or false")
    );
}

#[test]
fn owners() {
    let me = this_process_as_owner().unwrap();
    assert_eq!(me.0, std::process::id());
    assert!(!owner_gone(me));
    assert!(
        owner_gone((me.0, me.1 + 1)),
        "same pid, other start: another process"
    );
    assert!(owner_gone((u32::MAX / 2, 1)), "no such process");
}

#[test]
fn outputs_are_checked_against_the_modes() {
    let dir = std::env::temp_dir();
    let cpu = start("mode=cpu");
    let html = dir.join("x.html");
    assert_eq!(cpu.check_output(&html, None, None).unwrap(), Format::Html);
    let e = cpu.check_output(&html, None, Some("bytes")).unwrap_err();
    assert!(e.contains("no such metric"), "{e}");
    assert!(
        cpu.check_output(&html, None, Some("fuel"))
            .unwrap_err()
            .contains("unknown value")
    );
    let alloc = start("mode=cpu+alloc");
    assert!(alloc.check_output(&html, None, Some("bytes")).is_ok());
    let lock = start("mode=lock");
    assert!(
        lock.check_output(&html, None, Some("ns")).is_ok(),
        "ns means lock_ns there"
    );
    assert!(cpu.check_output(&dir.join("x.bogus"), None, None).is_err());
    let missing = Path::new("/no/such/dir/x.html");
    assert!(
        cpu.check_output(missing, None, None)
            .unwrap_err()
            .contains("does not exist")
    );
    assert!(cpu.check_output(&dir, None, None).is_err(), "a directory");
    let jfr = dir.join("x.jfr");
    assert_eq!(cpu.check_output(&jfr, None, None).unwrap(), Format::Jfr);
    assert!(lock.check_output(&jfr, None, None).is_ok());
    let exact = start("mode=exact");
    let e = exact.check_output(&jfr, None, None).unwrap_err();
    assert!(e.contains("not exact mode's calls and bytecodes"), "{e}");
    let trace = dir.join("x.trace.json");
    assert_eq!(cpu.check_output(&trace, None, None).unwrap(), Format::Trace);
    let e = lock.check_output(&trace, None, None).unwrap_err();
    assert!(e.contains("which cpu and wall sampling record"), "{e}");
}

#[test]
fn file_names_expand_pid_and_time() {
    // 2026-11-24 23:41:11 UTC.
    let t = 1_795_563_671;
    assert_eq!(utc_stamp(t), "20261124-234111");
    assert_eq!(utc_stamp(0), "19700101-000000");
    assert_eq!(utc_stamp(951_782_400), "20000229-000000");
    let p = expand_file_name(Path::new("/tmp/%p/cpu-%p-%t.jfr"), 42, t);
    assert_eq!(p, Path::new("/tmp/42/cpu-42-20261124-234111.jfr"));
    let p = expand_file_name(Path::new("100%%-%x-%"), 1, t);
    assert_eq!(p, Path::new("100%-%x-%"));
    let Command::Start(o) = parse("file=/tmp/p-%p.html").unwrap() else {
        panic!()
    };
    let want = format!("/tmp/p-{}.html", std::process::id());
    assert_eq!(o.file.unwrap(), Path::new(&want));
}

#[test]
fn byte_counts() {
    assert_eq!(parse_bytes("512k").unwrap(), 524_288);
    assert_eq!(parse_bytes("2m").unwrap(), 2_097_152);
    assert_eq!(parse_bytes("4096").unwrap(), 4096);
    assert_eq!(parse_bytes("1KB").unwrap(), 1024);
    assert!(parse_bytes("3g").is_err());
}

#[test]
fn durations() {
    assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
    assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
    assert_eq!(
        parse_duration("7d").unwrap(),
        Duration::from_secs(7 * 86_400)
    );
    assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
    assert_eq!(
        parse_duration("1000ns").unwrap(),
        Duration::from_nanos(1000)
    );
    assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
    assert_eq!(
        parse_duration("10").unwrap_err(),
        "'10' needs a unit (ns, us, ms, s, m, h, d), e.g. 10s or 10ms"
    );
    assert!(parse_duration("ms").is_err());
}
