//! Fills a collector store with history for bench/collector's query timings: VMS VMs labelled
//! `service:bench`, each with one record chunk a second (BATCH samples over a pool of 400 stacks
//! 20 frames deep, 30 threads, made by an agent's `RecordWriter` from a growing profile) for the
//! HOURS before now, written through the store's own API (the path agents' chunks take), then
//! maintained once as the collector would (redb rolls old chunks into minutes). Prints one JSON
//! line: samples written, the chunk bytes (what came on the wire, less a few bytes of framing per
//! chunk), seconds, samples per second.
//!
//! Usage: fillday STORE VMS HOURS [BATCH=50]   (STORE: a directory, or clickhouse://HOST:PORT/DB)

use jvmprof_collector::clickhouse::Location;
use jvmprof_collector::store::{Retention, Store, VmRecord};
use jvmprof_profile::records::RecordWriter;
use jvmprof_profile::{Frame, Meta, Metric, ProfileBuilder, Thread, ThreadState};
use std::collections::HashSet;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    anyhow::ensure!(args.len() >= 4, "usage: fillday STORE VMS HOURS [BATCH=50]");
    let store = if args[1].starts_with("clickhouse://") {
        Store::open_clickhouse(&Location::parse(&args[1]).map_err(anyhow::Error::msg)?)?
    } else {
        Store::open(std::path::Path::new(&args[1]))?
    };
    let vms: u32 = args[2].parse()?;
    let hours: u64 = args[3].parse()?;
    let batch: u32 = args.get(4).map_or(Ok(50), |b| b.parse())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let now = jvmprof_collector::now_ms();
    let start = now - hours * 3_600_000;
    let mut records = Vec::new();
    for i in 0..vms {
        let (pid, start_unix_ms) = (10_000 + i, start - 1000);
        let id = store
            .vm_id_for("bench", pid, start_unix_ms)
            .unwrap_or(i as u64 + 1);
        let vm = VmRecord {
            id,
            pid,
            command: format!("java Bench{i}"),
            host: "bench".into(),
            start_unix_ms,
            connected_at: start_unix_ms,
            last_seen: now,
            labels: vec![("service".into(), "bench".into())],
            ..VmRecord::default()
        };
        store.put_vm(vm.clone());
        records.push(vm);
    }
    let stacks: Vec<Vec<Frame>> = (0..400)
        .map(|s| {
            (0..20)
                .map(|d| {
                    Frame::java(
                        &format!("bench.C{}", (s * 7 + d) % 97),
                        &format!("m{d}"),
                        "()V",
                        d,
                    )
                })
                .collect()
        })
        .collect();
    // Every VM runs the same application: one profile, one stream, its chunks stored for each.
    let mut b = ProfileBuilder::new(Meta {
        modes: vec!["cpu".into()],
        metrics: vec![Metric::Samples, Metric::Ns],
        interval_ns: 10_000_000,
        ..Meta::default()
    });
    let mut writer = RecordWriter::new();
    let began = Instant::now();
    let mut samples = 0u64;
    let mut chunk_bytes = 0u64;
    let mut seq = 0u64;
    for second in 0..hours * 3600 {
        let phase = (second % 400) as u32;
        let mut gained = std::collections::BTreeMap::<u32, Vec<u64>>::new();
        for k in 0..batch {
            let s = (phase * 7 + k * 13) % 400;
            let frames: Vec<u32> = stacks[s as usize]
                .iter()
                .map(|f| b.frame(f.clone()))
                .collect();
            let stack = b.stack(&frames);
            let t = b.thread(Thread {
                tid: (k % 30) as u64 + 1,
                name: format!("worker-{}", k % 30),
            });
            let i = b.add(t, stack, ThreadState::Running, &[1, 10_000_000]) as u32;
            let g = gained.entry(i).or_insert_with(|| vec![0, 0]);
            g[0] += 1;
            g[1] += 10_000_000;
        }
        let gained: Vec<(u32, Vec<u64>)> = gained.into_iter().collect();
        let chunk: std::sync::Arc<[u8]> = writer.update(b.profile(), &gained, &[], false)?.into();
        seq += 1;
        for vm in &records {
            samples += u64::from(batch);
            chunk_bytes += chunk.len() as u64;
            store.put_chunk(vm.id, seq, start + second * 1000, chunk.clone());
        }
        // Keeps the store's queue (and this process) small.
        if second % 200 == 199 {
            rt.block_on(store.barrier());
        }
    }
    rt.block_on(store.barrier());
    let seconds = began.elapsed().as_secs_f64();
    // FILLDAY_NO_MAINTAIN=1: leave the store as ingest wrote it (to measure the two apart).
    while std::env::var_os("FILLDAY_NO_MAINTAIN").is_none() {
        let done = rt.block_on(store.maintain(now, Retention::default(), HashSet::new()))?;
        if !done.more {
            break;
        }
    }
    let maintained = began.elapsed().as_secs_f64() - seconds;
    println!(
        "{{\"samples\": {samples}, \"chunk_bytes\": {chunk_bytes}, \"seconds\": {seconds:.1}, \"samples_per_s\": {:.0}, \"maintain_s\": {maintained:.1}}}",
        samples as f64 / seconds
    );
    Ok(())
}
