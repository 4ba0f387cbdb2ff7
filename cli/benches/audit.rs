//! `mcpc audit` on a large audit log: wall time and peak memory of each
//! format, against the log's size (`docs/performance.md`, "Audit report").
//!
//! Writes a log of `AUDIT_BENCH_MIB` MiB (default 100) of decision lines
//! (a quarter trims of `maxTokens` and `model`, a quarter denials with
//! re-presentations, half allows, over 50 servers) into a temporary
//! directory, then runs the release `mcpc audit --format F` on it for each
//! format. The peak resident set (`VmHWM`) is read while the report is
//! being written: stdout is a pipe the bench stops reading after the first
//! byte (a pipe shrunk to one page), so the process is held with its whole
//! report built.
//!
//! `cargo bench -p mcpc --bench audit`

use std::io::{BufWriter, Read, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A small deterministic generator (xorshift), so every run writes the same log.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn write_log(path: &std::path::Path, bytes: u64) -> std::io::Result<u64> {
    let mut out = BufWriter::new(std::fs::File::create(path)?);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut written, mut n) = (0u64, 0u64);
    while written < bytes {
        let time = format!(
            "2026-03-10T{:02}:{:02}:{:02}.{:03}Z",
            (n / 3_600_000) % 24,
            (n / 60_000) % 60,
            (n / 1000) % 60,
            n % 1000
        );
        let server = format!("srv-{}", n % 50);
        let identity = format!("srv:{:016x}{:016x}", rng.next(), rng.next());
        let line = match n % 4 {
            0 => format!(
                r#"{{"time":"{time}","event":"decision","via":"request","server":"{server}","id":{n},"identity":"{identity}","outcome":"trim","reason":null,"reasons":["policy.max_tokens"],"replayed":false,"represented":0,"trims":{{"maxTokens":{{"requested":{},"applied":500,"reason":"policy.max_tokens"}},"model":{{"requested":["gpt-{}","claude-3"],"applied":["claude-3"],"allowed":["claude-*"],"reason":"policy.model"}}}}}}"#,
                1000 + n % 5000,
                n % 1000
            ),
            1 => format!(
                r#"{{"time":"{time}","event":"decision","via":"request","server":"{server}","id":{n},"identity":"{identity}","outcome":"deny","reason":"policy.rate_limit","replayed":{},"represented":{}}}"#,
                n % 3 == 0,
                n % 7
            ),
            _ => format!(
                r#"{{"time":"{time}","event":"decision","via":"request","server":"{server}","id":{n},"identity":"{identity}","outcome":"allow","reason":null,"replayed":false,"represented":0}}"#
            ),
        };
        writeln!(out, "{line}")?;
        written += line.len() as u64 + 1;
        n += 1;
    }
    out.flush()?;
    Ok(n)
}

fn main() -> std::io::Result<()> {
    // `cargo test --benches` runs this with `--bench`; only `cargo bench` measures.
    if !std::env::args().any(|a| a == "--bench") {
        return Ok(());
    }
    let mib: u64 = std::env::var("AUDIT_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("audit.jsonl");
    let lines = write_log(&log, mib << 20)?;
    let size = std::fs::metadata(&log)?.len();
    println!(
        "audit log: {:.1} MiB, {lines} lines",
        size as f64 / f64::from(1 << 20)
    );
    println!("| format | wall | peak RSS | peak RSS / log size | report size |");
    println!("|---|---:|---:|---:|---:|");
    for format in ["human", "json", "html"] {
        let start = Instant::now();
        let mut child = Command::new(env!("CARGO_BIN_EXE_mcpc"))
            .args(["audit", "--format", format])
            .arg(&log)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let mut stdout = child.stdout.take().ok_or(std::io::ErrorKind::BrokenPipe)?;
        // One page of pipe: a report larger than that holds the child in its
        // write, its whole report built, until the bench reads on.
        rustix::pipe::fcntl_setpipe_size(&stdout, 4096)?;
        let mut first = [0u8; 1];
        stdout.read_exact(&mut first)?;
        let peak = status_kib(child.id(), "VmHWM:").unwrap_or(0);
        let mut rest = Vec::new();
        stdout.read_to_end(&mut rest)?;
        child.wait()?;
        let wall = start.elapsed();
        println!(
            "| {format} | {:.2} s | {:.1} MiB | {:.2} | {:.1} MiB |",
            wall.as_secs_f64(),
            peak as f64 / 1024.0,
            (peak * 1024) as f64 / size as f64,
            (rest.len() + 1) as f64 / f64::from(1 << 20)
        );
    }
    Ok(())
}
