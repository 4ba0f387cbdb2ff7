//! The front end on generated policies of 100, 1,000 and 10,000 servers
//! (`examples/gen_policy.rs`, seed 1, 5% globs):
//!
//! - `parse`: text → syntax tree (pest, then the tree builder).
//! - `check_tree`: the checker alone, on an already parsed tree.
//! - `diagnostics`: what `mcpc check` computes, `db::diagnostics` on a fresh
//!   salsa `Database` each iteration (parse + check + storage).
//! - `lower`: `db::lower_file` on a fresh `Database` (parse + check + model +
//!   lowering to the decision table).
//!
//! - `findings_one_line`: 4k, 16k and 50k duplicate statements on one line
//!   (`docs/threat-model.md`: reported in linear time): `db::diagnostics` alone, then with each renderer
//!   (`json`, `sarif`, `github`, `human`). Every finding has a column on the
//!   same long line; the time must grow linearly with the number of findings.
//!
//! - `keystroke`: an editor's database (`Database::incremental`) on the
//!   1,000-server policy (about 10,000 lines); each iteration types or
//!   deletes a digit in a `server` block in the middle of the file, sets the
//!   text and takes `db::diagnostics`: what the language server's check
//!   costs per keystroke on one thread.
//!
//! Run: `CARGO_TARGET_DIR=target-perf cargo bench -p mcpolicy-compiler --bench check`
//! (figures in `docs/performance.md`, "Compiler"; method in `compiler/PERF.md`). Criterion measures wall time, which on a
//! shared machine counts other processes' turns too; with `MCPC_BENCH_CPU=1`
//! the same benchmarks run as group `front_end_cpu`, timed by this thread's
//! on-CPU nanoseconds (`/proc/thread-self/schedstat`).

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{BatchSize, BenchmarkId, Criterion};
use mcpolicy_compiler::check;
use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_compiler::parse;
use mcpolicy_compiler::render::{self, FileReport};

#[path = "../examples/gen_policy.rs"]
#[allow(dead_code)]
mod gen_policy;

const SIZES: &[usize] = &[100, 1_000, 10_000];

fn policy(servers: usize) -> String {
    gen_policy::generate(gen_policy::Options {
        servers,
        seed: 1,
        globs_percent: 5,
    })
}

fn front_end<M: Measurement>(c: &mut Criterion<M>, name: &str) {
    let mut group = c.benchmark_group(name);
    group.warm_up_time(Duration::from_secs(1));
    for &servers in SIZES {
        let text = policy(servers);
        // Guard: the generated policy is clean, so every phase does full work.
        {
            let db = Database::default();
            let source = SourceText::new(&db, "bench.mcpolicy".into(), text.clone());
            assert!(
                db::diagnostics(&db, source).is_empty(),
                "generated policy has findings"
            );
        }
        group.sample_size(if servers >= 10_000 { 10 } else { 30 });
        group.throughput(criterion::Throughput::Bytes(text.len() as u64));

        group.bench_with_input(BenchmarkId::new("parse", servers), &text, |b, text| {
            b.iter(|| parse::parse(black_box(text)));
        });

        let parsed = parse::parse(&text);
        group.bench_with_input(
            BenchmarkId::new("check_tree", servers),
            &parsed.file,
            |b, file| b.iter(|| check::check(black_box(file))),
        );

        group.bench_with_input(
            BenchmarkId::new("diagnostics", servers),
            &text,
            |b, text| {
                b.iter_batched(
                    || text.clone(),
                    |text| {
                        let db = Database::default();
                        let source = SourceText::new(&db, "bench.mcpolicy".into(), text);
                        black_box(db::diagnostics(&db, source).len())
                    },
                    BatchSize::LargeInput,
                );
            },
        );

        group.bench_with_input(BenchmarkId::new("lower", servers), &text, |b, text| {
            b.iter_batched(
                || text.clone(),
                |text| {
                    let db = Database::default();
                    let source = SourceText::new(&db, "bench.mcpolicy".into(), text);
                    black_box(db::lower_file(&db, source).is_some())
                },
                BatchSize::LargeInput,
            );
        });
    }
    group.finish();
}

fn keystroke<M: Measurement>(c: &mut Criterion<M>, name: &str) {
    let mut group = c.benchmark_group(name);
    group.warm_up_time(Duration::from_secs(1));
    let text = policy(1_000);
    let middle = text.len() / 2;
    let Some(at) = text[middle..].find("max_tokens ") else {
        panic!("the generated policy has a max_tokens in its second half");
    };
    let at = middle + at + "max_tokens ".len();
    let mut typed = text.clone();
    typed.insert(at, '1');
    let mut db = Database::incremental();
    let source = SourceText::new(&db, "bench.mcpolicy".into(), text.clone());
    assert!(db::diagnostics(&db, source).is_empty());
    let versions = [typed, text];
    let mut next = 0;
    group.bench_function(BenchmarkId::new("set_text_and_diagnostics", 1_000), |b| {
        b.iter_batched(
            || {
                next = 1 - next;
                versions[next].clone()
            },
            |version| {
                use salsa::Setter;
                source.set_text(&mut db).to(version);
                black_box(db::diagnostics(&db, source).len())
            },
            BatchSize::LargeInput,
        );
    });
    group.finish();
}

/// One output format of `mcpc check`.
type Renderer = fn(&[FileReport]) -> String;

/// `defaults { sampling on; sampling on; … }`, all on one line: `n - 1`
/// duplicate-statement findings.
fn duplicates_on_one_line(n: usize) -> String {
    format!(
        "mcpolicy 1\ndefaults {{ {} }}\n",
        vec!["sampling on"; n].join("; ")
    )
}

fn findings_one_line<M: Measurement>(c: &mut Criterion<M>, name: &str) {
    let mut group = c.benchmark_group(name);
    group.warm_up_time(Duration::from_secs(1));
    group.sample_size(10);
    for &n in &[4_000usize, 16_000, 50_000] {
        let text = duplicates_on_one_line(n);
        let diagnostics = {
            let db = Database::default();
            let source = SourceText::new(&db, "bench.mcpolicy".into(), text.clone());
            db::diagnostics(&db, source).to_vec()
        };
        assert_eq!(diagnostics.len(), n - 1, "one finding per duplicate");
        group.throughput(criterion::Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("diagnostics", n), &text, |b, text| {
            b.iter_batched(
                || text.clone(),
                |text| {
                    let db = Database::default();
                    let source = SourceText::new(&db, "bench.mcpolicy".into(), text);
                    black_box(db::diagnostics(&db, source).len())
                },
                BatchSize::LargeInput,
            );
        });
        let reports = [FileReport {
            path: "bench.mcpolicy".into(),
            text: text.clone(),
            diagnostics,
        }];
        let renderers: [(&str, Renderer); 4] = [
            ("json", render::json),
            ("sarif", render::sarif),
            ("github", render::github),
            ("human", |r| render::human(r, render::Style::Plain)),
        ];
        for (format, renderer) in renderers {
            group.bench_with_input(BenchmarkId::new(format, n), &reports, |b, reports| {
                b.iter(|| black_box(renderer(reports).len()));
            });
        }
    }
    group.finish();
}

/// On-CPU time of the measuring thread, in nanoseconds (Linux schedstat).
/// Falls back to zero where the file is missing, which criterion reports
/// as an obviously wrong figure rather than a plausible one.
struct ThreadCpu;

impl std::fmt::Debug for ThreadCpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ThreadCpu")
    }
}

fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

impl Measurement for ThreadCpu {
    type Intermediate = u64;
    type Value = f64;

    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> f64 {
        thread_cpu_ns().saturating_sub(start) as f64
    }
    fn add(&self, a: &f64, b: &f64) -> f64 {
        a + b
    }
    fn zero(&self) -> f64 {
        0.0
    }
    fn to_f64(&self, value: &f64) -> f64 {
        *value
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        // Values are nanoseconds, like wall time's.
        WallTime.formatter()
    }
}

fn main() {
    if std::env::var_os("MCPC_BENCH_CPU").is_some() {
        let mut c = Criterion::default()
            .with_measurement(ThreadCpu)
            .configure_from_args();
        front_end(&mut c, "front_end_cpu");
        keystroke(&mut c, "keystroke_cpu");
        findings_one_line(&mut c, "findings_one_line_cpu");
        c.final_summary();
    } else {
        let mut c = Criterion::default().configure_from_args();
        front_end(&mut c, "front_end");
        keystroke(&mut c, "keystroke");
        findings_one_line(&mut c, "findings_one_line");
        c.final_summary();
    }
}
