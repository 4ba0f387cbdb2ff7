#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests and benches of
# mcpolicy-store-postgres (and .ci/run), in a directory of its own:
#
#   pg-test-cluster.sh start DIR   initdb (if DIR has no cluster) and start;
#                                  prints `export MCPOLICY_TEST_POSTGRES=…`
#   pg-test-cluster.sh stop DIR    stop (fast shutdown); the data stays
#   pg-test-cluster.sh kill DIR    stop at once (immediate shutdown: a crash)
#   pg-test-cluster.sh env DIR     print the export line again
#   pg-test-cluster.sh start-tls DIR
#                                  for the TLS tests (tests/tls.rs): a throwaway
#                                  CA and certificates made with the openssl CLI
#                                  in DIR/certs, a cluster with ssl=on on
#                                  127.0.0.1 (TCP, TLS only: hostssl) in DIR/tls
#                                  and one without TLS on 127.0.0.1 in DIR/tcp;
#                                  prints `export MCPOLICY_TEST_POSTGRES_TLS=…`
#                                  and the others the tests read. `stop` and
#                                  `kill` stop these too.
#
# The server listens on a unix socket in DIR only (no TCP port), trusts local
# connections (the directory is the only way in) and runs as an unprivileged
# user: PostgreSQL refuses to run as root, so under root the cluster belongs
# to the `postgres` user (created by the Debian package; created here if
# missing). PostgreSQL itself is installed by .ci/run; this script finds its
# binaries with pg_config or under /usr/lib/postgresql.
set -euo pipefail

usage() { echo "usage: $0 start|start-tls|stop|kill|env DIR" >&2; exit 2; }
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
    local owned
    for owned in "$dir/tls" "$dir/tcp"; do
      if [ -d "$owned" ]; then chown postgres "$owned"; fi
    done
    # runuser keeps the environment small; the programs need only their arguments.
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# A TCP port on 127.0.0.1 nothing listens on, kept in FILE so a restart
# reuses it.
free_port() {
  local file=$1 port
  if [ -f "$file" ]; then cat "$file"; return; fi
  for port in $(seq 54330 54999); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port" >"$file"
      echo "$port"
      return
    fi
  done
  echo "no free TCP port on 127.0.0.1 in 54330-54999" >&2
  exit 1
}

# The test CA (and a second, unrelated one with the same name), a server
# certificate for `localhost` only (no IP address in it) and a client
# certificate for the role `certuser`, all with the openssl CLI.
make_certs() {
  local certs="$dir/certs"
  if [ -f "$certs/client.crt" ]; then return; fi
  command -v openssl >/dev/null || { echo "the openssl CLI is not installed" >&2; exit 1; }
  mkdir -p "$certs"
  local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  for ca in ca other-ca; do
    openssl req -x509 "${ec[@]}" -keyout "$certs/$ca.key" -out "$certs/$ca.crt" -days 3650 \
      -subj "/CN=mcpolicy test CA" -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  done
  leaf() { # NAME CN EXTENSIONS
    openssl req "${ec[@]}" -keyout "$certs/$1.key" -out "$certs/$1.csr" -subj "/CN=$2" 2>/dev/null
    printf '%b' "$3" >"$certs/$1.ext"
    openssl x509 -req -in "$certs/$1.csr" -CA "$certs/ca.crt" -CAkey "$certs/ca.key" \
      -set_serial "0x$(openssl rand -hex 8)" -days 3650 -extfile "$certs/$1.ext" \
      -out "$certs/$1.crt" 2>/dev/null
    rm -f "$certs/$1.csr" "$certs/$1.ext"
  }
  leaf server localhost "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
  leaf client certuser "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n"
  chmod 600 "$certs"/*.key
  chmod 644 "$certs"/*.crt
  chmod 755 "$certs"
  # The server's key belongs to the server's user, readable by it alone.
  if [ "$(id -u)" -eq 0 ]; then chown postgres "$certs/server.key" "$certs/server.crt"; fi
}

# initdb a cluster in SUB/data (if none) with the extra configuration on
# standard input, and start it.
start_cluster() {
  local sub=$1 conf
  conf=$(cat)
  mkdir -p "$sub"
  if [ "$(id -u)" -eq 0 ]; then chown postgres "$sub"; fi
  if [ ! -f "$sub/data/PG_VERSION" ]; then
    as_owner "$bin/initdb" --pgdata="$sub/data" --username=postgres --auth=trust \
      --encoding=UTF8 --locale=C.UTF-8 >"$sub/initdb.log" 2>&1 \
      || { cat "$sub/initdb.log" >&2; exit 1; }
    printf '%s\n' "$conf" >>"$sub/data/postgresql.conf"
  fi
  # Already running (start-tls given twice): nothing to start.
  if as_owner "$bin/pg_ctl" --pgdata="$sub/data" status >/dev/null 2>&1; then return; fi
  as_owner "$bin/pg_ctl" --pgdata="$sub/data" --log="$sub/server.log" --wait --timeout=60 \
    start >/dev/null || { tail -n 30 "$sub/server.log" >&2; exit 1; }
}

stop_cluster() { # DATA MODE
  if [ -f "$1/postmaster.pid" ]; then
    as_owner "$bin/pg_ctl" --pgdata="$1" --mode="$2" --wait stop >/dev/null
  fi
}

print_tls_env() {
  echo "export MCPOLICY_TEST_POSTGRES_TLS='host=localhost port=$(cat "$dir/tls/port") user=postgres dbname=postgres'"
  echo "export MCPOLICY_TEST_POSTGRES_TLS_CERTS='$dir/certs'"
  echo "export MCPOLICY_TEST_POSTGRES_TCP='host=127.0.0.1 port=$(cat "$dir/tcp/port") user=postgres dbname=postgres'"
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
  start-tls)
    make_certs
    mkdir -p "$dir/tls" "$dir/tcp"
    tls_port=$(free_port "$dir/tls/port")
    start_cluster "$dir/tls" <<CONF
listen_addresses = '127.0.0.1'
port = $tls_port
unix_socket_directories = '$dir/tls'
max_connections = 100
shared_buffers = 16MB
ssl = on
ssl_cert_file = '$dir/certs/server.crt'
ssl_key_file = '$dir/certs/server.key'
ssl_ca_file = '$dir/certs/ca.crt'
CONF
    # TCP in TLS only (no hostnossl line: plain text is refused); certuser
    # by its client certificate alone.
    cat >"$dir/tls/data/pg_hba.conf" <<HBA
local all all trust
hostssl all certuser 127.0.0.1/32 cert
hostssl all all 127.0.0.1/32 trust
HBA
    as_owner "$bin/pg_ctl" --pgdata="$dir/tls/data" reload >/dev/null
    "$bin/psql" -h "$dir/tls" -p "$tls_port" -U postgres -d postgres -qAt -v ON_ERROR_STOP=1 <<'SQL' >/dev/null
SELECT 'CREATE ROLE certuser LOGIN' WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'certuser')
\gexec
GRANT CREATE ON DATABASE postgres TO certuser;
SQL
    tcp_port=$(free_port "$dir/tcp/port")
    start_cluster "$dir/tcp" <<CONF
listen_addresses = '127.0.0.1'
port = $tcp_port
unix_socket_directories = '$dir/tcp'
max_connections = 100
shared_buffers = 16MB
ssl = off
CONF
    cat >"$dir/tcp/data/pg_hba.conf" <<HBA
local all all trust
host all all 127.0.0.1/32 trust
HBA
    as_owner "$bin/pg_ctl" --pgdata="$dir/tcp/data" reload >/dev/null
    print_tls_env
    ;;
  stop|kill)
    mode=fast
    if [ "$action" = kill ]; then mode=immediate; fi
    for cluster in "$data" "$dir/tls/data" "$dir/tcp/data"; do
      stop_cluster "$cluster" "$mode"
    done
    ;;
  env)
    print_env
    if [ -f "$dir/tls/port" ]; then print_tls_env; fi
    ;;
  *) usage ;;
esac
