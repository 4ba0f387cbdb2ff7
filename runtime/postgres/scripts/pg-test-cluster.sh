#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests and benches of
# mcpolicy-store-postgres (and .ci/run), in a directory of its own:
#
#   pg-test-cluster.sh start DIR   initdb (if DIR has no cluster) and start;
#                                  prints `export MCPOLICY_TEST_POSTGRES=…`
#   pg-test-cluster.sh stop DIR    stop (fast shutdown); the data stays
#   pg-test-cluster.sh kill DIR    stop at once (immediate shutdown: a crash)
#   pg-test-cluster.sh env DIR     print the export line again
#
# The server listens on a unix socket in DIR only (no TCP port), trusts local
# connections (the directory is the only way in) and runs as an unprivileged
# user: PostgreSQL refuses to run as root, so under root the cluster belongs
# to the `postgres` user (created by the Debian package; created here if
# missing). PostgreSQL itself is installed by .ci/run; this script finds its
# binaries with pg_config or under /usr/lib/postgresql.
set -euo pipefail

usage() { echo "usage: $0 start|stop|kill|env DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
action=$1
dir=$(mkdir -p "$2" && cd "$2" && pwd)
data="$dir/data"

bindir() {
  if [ -n "${MCPOLICY_PG_BIN:-}" ]; then echo "$MCPOLICY_PG_BIN"; return; fi
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$found" ]; then echo "$found"; return; fi
  if command -v pg_config >/dev/null; then pg_config --bindir; return; fi
  echo "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin, no pg_config)" >&2
  exit 1
}
bin=$(bindir)

# Runs a PostgreSQL program as the cluster's owner.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir /nonexistent --shell /usr/sbin/nologin postgres
    chown postgres "$dir"
    # runuser keeps the environment small; the programs need only their arguments.
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

print_env() {
  echo "export MCPOLICY_TEST_POSTGRES='host=$dir port=5432 user=postgres dbname=postgres'"
  echo "export MCPOLICY_TEST_PGDIR='$dir'"
}

case "$action" in
  start)
    if [ ! -f "$data/PG_VERSION" ]; then
      as_owner "$bin/initdb" --pgdata="$data" --username=postgres --auth=trust \
        --encoding=UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; exit 1; }
      cat >>"$data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$dir'
unix_socket_permissions = 0777
max_connections = 400
shared_buffers = 128MB
fsync = on
CONF
    fi
    as_owner "$bin/pg_ctl" --pgdata="$data" --log="$dir/server.log" --wait --timeout=60 \
      -o "-k $dir" start >/dev/null || { tail -n 30 "$dir/server.log" >&2; exit 1; }
    print_env
    ;;
  stop)
    if [ -f "$data/postmaster.pid" ]; then
      as_owner "$bin/pg_ctl" --pgdata="$data" --mode=fast --wait stop >/dev/null
    fi
    ;;
  kill)
    if [ -f "$data/postmaster.pid" ]; then
      as_owner "$bin/pg_ctl" --pgdata="$data" --mode=immediate --wait stop >/dev/null
    fi
    ;;
  env) print_env ;;
  *) usage ;;
esac
