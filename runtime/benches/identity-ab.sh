#!/usr/bin/env bash
# Same-run A/B of request identity against SHA-256, steadier than criterion on
# a shared machine: whole runs of each binary's IDENTITY_LOOP mode (see
# benches/identity.rs; building the input costs ~0), alternating
# BEFORE and AFTER, the minimum of ROUNDS runs per function, in µs per call.
#
#   cargo bench -p mcpolicy-runtime --bench identity --no-run   # prints the binary
#   runtime/benches/identity-ab.sh BEFORE_BIN AFTER_BIN [SIZE...]
#
# SIZE: 4KiB 64KiB dense-4KiB dense-64KiB (default: all four). ROUNDS=5.
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
before=$1 after=$2
shift 2
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(4KiB 64KiB dense-4KiB dense-64KiB)
rounds=${ROUNDS:-5}

seconds() { # BIN SIZE FUNCTION CALLS
  local start end
  start=$(date +%s%N)
  IDENTITY_LOOP="$2/$3" IDENTITY_ITERS="$4" "$1" >/dev/null
  end=$(date +%s%N)
  echo $(((end - start) / 1000))
}

printf '%-12s %-6s %10s %10s %7s\n' size build sha256_us identity_us ratio
for size in "${sizes[@]}"; do
  case $size in *4KiB) calls=100000 ;; *) calls=10000 ;; esac
  declare -A best=()
  for ((r = 0; r < rounds; r++)); do
    for build in before after; do
      bin=${!build}
      for function in sha256_of_canonical request_identity; do
        t=$(seconds "$bin" "$size" "$function" "$calls")
        key=$build/$function
        if [ -z "${best[$key]:-}" ] || [ "$t" -lt "${best[$key]}" ]; then best[$key]=$t; fi
      done
    done
  done
  for build in before after; do
    awk -v s="${best[$build/sha256_of_canonical]}" -v i="${best[$build/request_identity]}" \
      -v n="$calls" -v size="$size" -v build="$build" \
      'BEGIN { printf "%-12s %-6s %10.2f %10.2f %6.2fx\n", size, build, s / n, i / n, i / s }'
  done
  unset best
done
