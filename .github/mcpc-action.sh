#!/usr/bin/env bash
# The shell steps of the `mcpc check` GitHub Action (action.yml at the
# repository's root), kept here so that they run, and are tested, without
# GitHub (cli/tests/github_action.rs). One subcommand per step:
#
#   key      the install root and the cache key of the mcpc built from this
#            action's sources (outputs `root`, `key`)
#   install  an `mcpc`: INPUT_MCPC if given, else the one cached in MCPC_ROOT,
#            else `cargo install --locked --path cli` from the action's own
#            sources into MCPC_ROOT (outputs `mcpc`; MCPC_ROOT/bin on PATH)
#   check    `mcpc check --format github` over INPUT_PATHS, after writing
#            SARIF when asked (outputs `sarif-file`); its exit code is
#            mcpc's: 0 clean, 1 findings, 2 usage or I/O error
#
# Inputs come as environment variables (never spliced into the script, so a
# path cannot inject shell): INPUT_PATHS (one path per line, files or
# directories; default `.`), INPUT_DENY_WARNINGS (true|false),
# INPUT_SARIF_FILE, INPUT_UPLOAD_SARIF (true|false), INPUT_MCPC; and MCPC
# (the binary `install` chose) for `check`. Outputs are appended to
# $GITHUB_OUTPUT, PATH additions to $GITHUB_PATH, as GitHub's runner reads
# them.
set -euo pipefail

action_path=${GITHUB_ACTION_PATH:-$(cd "$(dirname "$0")/.." && pwd)}

# A workflow error annotation, then exit 2 (mcpc's code for usage errors).
fail() {
  printf '::error title=mcpc action::%s\n' "$1"
  exit 2
}

output() {
  if [[ -n ${GITHUB_OUTPUT:-} ]]; then
    printf '%s=%s\n' "$1" "$2" >>"$GITHUB_OUTPUT"
  fi
}

# Whether the true|false input NAME is true; anything else is a usage error.
flag() {
  case ${2:-false} in
    true) return 0 ;;
    false) return 1 ;;
    *) fail "input '$1' must be true or false, not '$2'" ;;
  esac
}

key() {
  # What the build reads: the manifests, the lock file and the sources of the
  # crates mcpc links (their tests and benches do not change the binary).
  local digest
  digest=$(
    cd "$action_path"
    find Cargo.toml Cargo.lock grammar compiler runtime proxy cli \
      \( -name target -o -name tests -o -name benches -o -name node_modules \) -prune \
      -o -type f -print0 |
      LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
  )
  local key="mcpc-${RUNNER_OS:-$(uname -s)}-${RUNNER_ARCH:-$(uname -m)}-$digest"
  output root "${MCPC_CACHE_DIR:-$HOME/.cache/mcpc-action}/$key"
  output key "$key"
  printf 'mcpc cache key %s\n' "$key"
}

install() {
  local mcpc
  if [[ -n ${INPUT_MCPC:-} ]]; then
    mcpc=$INPUT_MCPC
    "$mcpc" --version >/dev/null 2>&1 || fail "input 'mcpc': '$mcpc' does not run ('$mcpc --version' failed)"
  else
    local root=${MCPC_ROOT:?MCPC_ROOT, the root of the key step, is not set}
    mcpc=$root/bin/mcpc
    if "$mcpc" --version >/dev/null 2>&1; then
      printf 'using the cached %s\n' "$mcpc"
    else
      command -v cargo >/dev/null 2>&1 ||
        fail "no cargo on PATH: the action builds mcpc from source; add a Rust toolchain step (1.89 or later) before it, or give an mcpc binary as input 'mcpc'"
      cargo install --locked --root "$root" --path "$action_path/cli" ||
        fail "cargo install of mcpc failed (on Linux it needs the OpenSSL headers: libssl-dev and pkg-config)"
    fi
    if [[ -n ${GITHUB_PATH:-} ]]; then
      printf '%s\n' "$root/bin" >>"$GITHUB_PATH"
    fi
  fi
  "$mcpc" --version
  output mcpc "$mcpc"
}

check() {
  local mcpc=${MCPC:?MCPC, the mcpc of the install step, is not set}
  local paths=() line
  while IFS= read -r line || [[ -n $line ]]; do
    # Trim the indentation and trailing blanks a YAML block leaves.
    line=${line#"${line%%[![:space:]]*}"}
    line=${line%"${line##*[![:space:]]}"}
    if [[ -n $line ]]; then paths+=("$line"); fi
  done <<<"${INPUT_PATHS:-}"
  ((${#paths[@]})) || paths=(.)

  local options=()
  if flag deny-warnings "${INPUT_DENY_WARNINGS:-false}"; then options+=(--deny-warnings); fi

  local sarif=${INPUT_SARIF_FILE:-}
  if flag upload-sarif "${INPUT_UPLOAD_SARIF:-false}" && [[ -z $sarif ]]; then
    sarif=${RUNNER_TEMP:-${TMPDIR:-/tmp}}/mcpolicy.sarif
  fi
  if [[ -n $sarif ]]; then
    : 2>/dev/null >"$sarif" || fail "input 'sarif-file': cannot write '$sarif'"
    local status=0
    "$mcpc" check --format sarif "${options[@]}" -- "${paths[@]}" >"$sarif" || status=$?
    # 1 is findings, which the SARIF holds; 2 means it is not a whole report.
    ((status < 2)) || fail "mcpc check --format sarif failed (exit $status); no SARIF written"
    output sarif-file "$sarif"
  fi

  local status=0
  "$mcpc" check --format github "${options[@]}" -- "${paths[@]}" || status=$?
  return "$status"
}

case ${1:-} in
  key | install | check) "$1" ;;
  *)
    printf 'usage: %s key|install|check\n' "$0" >&2
    exit 2
    ;;
esac
