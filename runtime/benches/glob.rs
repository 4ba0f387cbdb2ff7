//! Model-hint globs against huge hints: `table::pattern::matches` is linear
//! in the hint (`docs/threat-model.md`, a hostile server's model hints).
//!
//! A server chooses its hints' names; the policy's `models` globs are
//! matched against each. The worst shape for a backtracking matcher is a
//! long run between stars that almost matches everywhere: `*(ab)^199c*`
//! against `abab…`. Linear time shows as a constant time per MiB.
//!
//! Run: `cargo bench -p mcpolicy-runtime --bench glob`; figures in
//! `docs/performance.md`, "Model-hint globs".

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use mcpolicy_runtime::table::pattern::matches;

const MIB: usize = 1024 * 1024;

fn bench(c: &mut Criterion) {
    let run = "ab".repeat(199) + "c";
    let pattern = format!("*{run}*");
    let mut group = c.benchmark_group("model_hint_glob");
    group.sample_size(10);
    for mib in [1, 4, 15] {
        let hint = "ab".repeat(mib * MIB / 2);
        group.throughput(Throughput::Bytes(hint.len() as u64));
        group.bench_with_input(BenchmarkId::new("run_400", mib), &hint, |b, hint| {
            b.iter(|| assert!(!matches(black_box(&pattern), black_box(hint))));
        });
        let hint: String = "é".repeat(mib * MIB / 2);
        let pattern = format!("*{}x*", "é".repeat(399));
        group.bench_with_input(
            BenchmarkId::new("run_400_non_ascii", mib),
            &hint,
            |b, hint| {
                b.iter(|| assert!(!matches(black_box(&pattern), black_box(hint))));
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
