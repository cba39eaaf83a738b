#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests of the PostgreSQL engine.
#
#   .ci/postgres.sh start DIR   installs Debian's postgresql-15 when no initdb
#                               is found, creates a cluster in DIR (initdb as
#                               the postgres user when run as root: PostgreSQL
#                               refuses to run as root), starts it on
#                               127.0.0.1 and a free port with fsync on, and
#                               prints its URL (password authentication).
#   .ci/postgres.sh stop DIR    stops that cluster by the PID in its
#                               postmaster.pid and removes DIR.
#
# .ci/run exports the URL as FENCEQ_TEST_POSTGRES_URL; the tests use it.
set -euo pipefail

cmd=${1:?usage: postgres.sh start|stop DIR}
dir=${2:?usage: postgres.sh start|stop DIR}
password=fenceq-test

find_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [[ -x $d/initdb ]] && { echo "$d"; return 0; }
  done
  return 1
}

as_pg() {
  if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case $cmd in
start)
  if ! bin=$(find_bin); then
    apt=(apt-get); [[ $(id -u) -ne 0 ]] && apt=(sudo -n apt-get)
    # Major version pinned; Debian ships its point releases as security updates.
    { DEBIAN_FRONTEND=noninteractive timeout 300 "${apt[@]}" -qq update &&
      DEBIAN_FRONTEND=noninteractive timeout 600 "${apt[@]}" -qq -y install postgresql-15; } \
      >/tmp/fenceq-ci-postgres.log 2>&1 </dev/null || {
      echo "postgres.sh: could not install postgresql-15 (log: /tmp/fenceq-ci-postgres.log)" >&2; exit 1; }
    bin=$(find_bin)
  fi
  mkdir -p "$dir"
  chmod 755 "$dir"
  [[ $(id -u) -eq 0 ]] && chown postgres: "$dir"
  printf '%s\n' "$password" >"$dir/.pw"
  [[ $(id -u) -eq 0 ]] && chown postgres: "$dir/.pw"
  as_pg "$bin/initdb" -D "$dir/data" -U postgres --pwfile="$dir/.pw" \
    --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 || {
    cat "$dir/initdb.log" >&2; exit 1; }
  # A port free when probed may be taken before the server binds it (other
  # jobs share the machine): try a few.
  port=
  for attempt in 1 2 3 4 5; do
    port=
    for p in $(shuf -i 20000-60000 -n 50); do
      if ! (exec 3<>/dev/tcp/127.0.0.1/"$p") 2>/dev/null; then port=$p; break; fi
    done
    [[ -n $port ]] || { echo "postgres.sh: no free port found" >&2; exit 1; }
    if as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 start \
      -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$dir -c fsync=on -c max_connections=400 -c shared_buffers=64MB" \
      >"$dir/pg_ctl.log" 2>&1; then
      break
    fi
    if [[ $attempt -eq 5 ]] || ! grep -q "could not bind" "$dir/postgres.log"; then
      cat "$dir/pg_ctl.log" "$dir/postgres.log" >&2; exit 1
    fi
  done
  echo "postgres://postgres:$password@127.0.0.1:$port/postgres?sslmode=disable"
  ;;
stop)
  pidfile=$dir/data/postmaster.pid
  if [[ -f $pidfile ]]; then
    pid=$(head -n 1 "$pidfile")
    kill -INT "$pid" 2>/dev/null || true # fast shutdown
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
  ;;
*)
  echo "usage: postgres.sh start|stop DIR" >&2; exit 2
  ;;
esac
