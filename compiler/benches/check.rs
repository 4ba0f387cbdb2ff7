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
//! Run: `CARGO_TARGET_DIR=target-perf cargo bench -p mcpolicy-compiler --bench check`
//! (figures in `compiler/PERF.md`).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use mcpolicy_compiler::check;
use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_compiler::parse;

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

fn front_end(c: &mut Criterion) {
    let mut group = c.benchmark_group("front_end");
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

criterion_group!(benches, front_end);
criterion_main!(benches);
