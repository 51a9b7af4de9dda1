//! Writes a large synthetic profile in every format, to try the flame graph and the exporters
//! at scale by hand: `cargo run --release -p jvmprof-profile --example big_profile -- DIR [STACKS]`.

use jvmprof_profile::*;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().ok_or("usage: big_profile DIR [STACKS]")?);
    let stacks: u64 = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(100_000);
    std::fs::create_dir_all(&dir)?;
    let mut b = ProfileBuilder::new(Meta {
        modes: vec!["cpu".into()],
        metrics: vec![Metric::Samples, Metric::Ns],
        interval_ns: 10_000_000,
        engine: "asgct".into(),
        ..Meta::default()
    });
    let threads: Vec<u32> = (0..8)
        .map(|i| {
            b.thread(Thread {
                tid: 100 + i,
                name: format!("worker-{i}"),
            })
        })
        .collect();
    // A deterministic pseudo-random walk over 2000 methods in 50 packages, stacks 5 to 60 deep.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..stacks {
        let depth = 5 + next() % 56;
        let mut frames = Vec::new();
        for d in 0..depth {
            // Shallow frames come from few methods, so the tree shares its top.
            let choices = 2 + d * d;
            let m = next() % choices.min(2000);
            let frame = if d + 1 == depth && m % 7 == 0 {
                Frame::synthetic(FrameKind::Native, &format!("native_fn_{m}"))
            } else {
                let class = format!("com.example.pkg{}.Class{}", m % 50, m % 97);
                Frame::java(&class, &format!("method{m}"), "()V", (d % 40) as u32)
            };
            frames.push(b.frame(frame));
        }
        let stack = b.stack(&frames);
        let thread = threads[(next() % 8) as usize];
        let n = 1 + next() % 20;
        b.add(thread, stack, ThreadState::Running, &[n, n * 10_000_000]);
    }
    let profile = b.finish();
    for format in Format::ALL {
        let path = dir.join(format!("big.{}", format.extension()));
        let file = std::io::BufWriter::new(std::fs::File::create(&path)?);
        let options = ExportOptions::default();
        write(&profile, format, &options, file)?;
        println!(
            "{}: {} bytes",
            path.display(),
            std::fs::metadata(&path)?.len()
        );
    }
    let path = dir.join("big.dot");
    let file = std::io::BufWriter::new(std::fs::File::create(&path)?);
    dot::write(&profile, &dot::DotOptions::default(), file)?;
    println!(
        "{}: {} bytes",
        path.display(),
        std::fs::metadata(&path)?.len()
    );
    let start = std::time::Instant::now();
    let back = read_any(dir.join("big.jvmprof"))?;
    println!("read back big.jvmprof in {:?}", start.elapsed());
    assert_eq!(back, profile);
    Ok(())
}
