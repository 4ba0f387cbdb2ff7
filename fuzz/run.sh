#!/usr/bin/env bash
# Coverage-guided fuzzing of mcpolicy with libFuzzer on the stable toolchain.
#
#   fuzz/run.sh short [TARGET]   ~15 s per target (CI; FUZZ_SECONDS overrides)
#   fuzz/run.sh long  [TARGET]   10 min per target, or until Ctrl-C (FUZZ_SECONDS overrides)
#   fuzz/run.sh merge [TARGET]   add what the last runs found that adds coverage to fuzz/corpus/
#   fuzz/run.sh build            build the instrumented binaries only
#
# Targets: policy_check policy_ide policy_fmt request proxy reader_differential lsp_transport (default: all,
# one after another: one core). New inputs go to target/fuzz-scratch/TARGET;
# crashes to target/fuzz-artifacts/TARGET/. See fuzz/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-short}
only=${2:-}
targets=(policy_check policy_ide policy_fmt request proxy reader_differential lsp_transport)
if [[ -n "$only" ]]; then
  if [[ ! " ${targets[*]} " =~ " $only " ]]; then
    echo "fuzz/run.sh: no target '$only' (targets: ${targets[*]})" >&2
    exit 2
  fi
  targets=("$only")
fi
case "$mode" in
  short) seconds=${FUZZ_SECONDS:-15} ;;
  long) seconds=${FUZZ_SECONDS:-600} ;;
  merge | build) seconds=0 ;;
  *)
    echo "usage: fuzz/run.sh short|long|merge|build [TARGET]" >&2
    exit 2
    ;;
esac

base=${CARGO_TARGET_DIR:-target}
host=$(rustc -vV | sed -n 's/^host: //p')
# What cargo-fuzz passes, all stable rustc flags: SanitizerCoverage feeding
# libFuzzer's counters, comparison tracing and stack depth. `--target` keeps
# the flags off build scripts and proc macros (they run inside the compiler
# and cannot link libFuzzer).
flags=(
  -Cpasses=sancov-module
  -Cllvm-args=-sanitizer-coverage-level=4
  -Cllvm-args=-sanitizer-coverage-inline-8bit-counters
  -Cllvm-args=-sanitizer-coverage-pc-table
  -Cllvm-args=-sanitizer-coverage-trace-compares
  -Cllvm-args=-sanitizer-coverage-stack-depth
  --cfg fuzzing
)
dir="$base/fuzz"
if [[ "${FUZZ_SANITIZER:-}" == address ]]; then
  # AddressSanitizer needs an unstable flag: RUSTC_BOOTSTRAP lets the
  # stable compiler take it. Its own build directory (other flags).
  export RUSTC_BOOTSTRAP=1
  flags+=(-Zsanitizer=address)
  dir="$base/fuzz-asan"
fi
export RUSTFLAGS="${flags[*]}"
export CARGO_INCREMENTAL=0

echo "==> building the fuzz targets (profile fuzz, $dir)"
cargo build --locked --profile fuzz -p mcpolicy-fuzz --features libfuzzer --bins \
  --target "$host" --target-dir "$dir"
bin="$dir/$host/fuzz"
[[ "$mode" == build ]] && exit 0

status=0
for target in "${targets[@]}"; do
  corpus="fuzz/corpus/$target"
  scratch="$base/fuzz-scratch/$target"
  artifacts="$base/fuzz-artifacts/$target"
  mkdir -p "$corpus" "$scratch" "$artifacts" "fuzz/regressions/$target"
  if [[ "$mode" == merge ]]; then
    # A small set of inputs that reaches every edge the scratch inputs
    # reach and the corpus does not (edges only, not hit counts: that keeps
    # the corpus to hundreds of files, not thousands).
    echo "==> $target: merging $scratch into $corpus (only inputs that add coverage edges)"
    "$bin/$target" -set_cover_merge=1 -use_counters=0 "$corpus" "$scratch" 2>&1 |
      grep -E "MERGE-OUTER: [0-9]+ new files" || true
    continue
  fi
  echo "==> $target: $mode run, ${seconds}s"
  # The scratch directory first: new inputs are written there, never into
  # the repository's corpus (`merge` adds the useful ones).
  if ! "$bin/$target" "$scratch" "$corpus" fuzz/regressions/"$target" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" \
    2>"$base/fuzz-$target.log"; then
    status=1
    echo "!!! $target: libFuzzer found a failure; the input is in $artifacts/" >&2
    echo "    replay it with: cargo test -p mcpolicy-fuzz --test replay (after copying it to fuzz/regressions/$target/)" >&2
    tail -n 60 "$base/fuzz-$target.log" >&2
    continue
  fi
  grep -E "^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)|cov: " \
    "$base/fuzz-$target.log" | tail -n 5
done
exit "$status"
