#!/usr/bin/env bash
# Steps run on the GPU machine (embedded mode there, but for `throughput`, which runs against the
# Postgres and Redis that `services` starts). Usage:
#   bash bench/gpu_device_run.sh STEP...   with STEP in setup tests hardware oracle fidelity
#   evaluate evolve evolve_multi services throughput profile services_stop; outputs land in $OUT
#   (default ./gpu-out). evolve reads PROPOSALS, SEED, EVOLVE_WALL_S and EVOLVE_TIMEOUT from the
#   environment.
# `setup` installs the wheels in .whl/ (ignored by git; the GPU machine has torch, Triton, numpy
# and httpx but no package index), built on a machine with one for the GPU machine's Python 3.12:
#   python3 -m pip download -d .whl --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 sqlalchemy greenlet aiosqlite alembic pydantic \
#     pydantic-settings redis hiredis fastapi uvicorn asyncpg python-multipart pyyaml rich
#   (16 MiB with their needs; pyyaml and rich are imported by the runtime and the CLI); `profile`
#   also needs py-spy: the same download of py-spy with --platform manylinux1_x86_64
#   --platform manylinux_2_5_x86_64
# `services` starts the PostgreSQL and the Redis of .svc/ (ignored by git, carried: built by
# bench/gpu_services_bundle.sh, 24 MiB, runs on any x86_64 glibc >= 2.14): Postgres on 127.0.0.1:
# $PG_PORT (default 5432, the next free port if taken) with trust auth, superuser postgres and a
# database test, its data fresh under $SVC_RUN (default /tmp/codevolve-svc); as root it runs as
# the user postgres (created if missing, else nobody) from a copy of .svc/pg there. Redis on
# 127.0.0.1:$REDIS_PORT (default 6379, the same), with no persistence. Both are stopped and
# started afresh by each `services`; `services_stop` stops them. The ports taken are kept in
# $SVC_RUN/ports.env, which `throughput` reads: it runs bench/throughput.py against them with
# $THROUGHPUT_ARGS (e.g. "--quick --parts 1"), under timeout $THROUGHPUT_TIMEOUT (default 540 s),
# into $OUT/throughput.log. $PYTHON (default python3) runs the benchmark.
#   bash bench/gpu_device_run.sh setup services throughput services_stop
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src:$PWD TRITON_CACHE_DIR=/tmp/triton-cache
PYTHON=${PYTHON:-python3}
SVC_RUN=${SVC_RUN:-/tmp/codevolve-svc}
PG_PORT=${PG_PORT:-5432}
REDIS_PORT=${REDIS_PORT:-6379}

free_port() {  # the first port from $1 on that nothing listens on at 127.0.0.1
  # SO_REUSEADDR as the servers bind: a port with only closed connections (TIME_WAIT) is free.
  python3 -c "import socket, sys
for port in range(int(sys.argv[1]), int(sys.argv[1]) + 100):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(('127.0.0.1', port))
        except OSError:
            continue
        print(port)
        break" "$1"
}

# Postgres refuses to run as root: as root, pick an unprivileged user and a way to become it.
pg_user() {
  PG_OS_USER=$(id -un)
  as_pg() { "$@"; }
  [ "$(id -u)" = 0 ] || return 0
  PG_OS_USER=${PG_OS_USER_NAME:-postgres}
  if ! id -u "$PG_OS_USER" > /dev/null 2>&1; then
    useradd -r -M -d /nonexistent -s /bin/false "$PG_OS_USER" 2> /dev/null \
      || adduser -S -D -H "$PG_OS_USER" 2> /dev/null || PG_OS_USER=nobody
  fi
  id -u "$PG_OS_USER" > /dev/null 2>&1 || { echo "no user to run postgres as"; return 1; }
  PG_OS_UID=$(id -u "$PG_OS_USER"); PG_OS_GID=$(id -g "$PG_OS_USER")
  as_pg() { runuser -u "$PG_OS_USER" -- "$@"; }
  as_pg true 2> /dev/null && return 0
  as_pg() { setpriv --reuid="$PG_OS_UID" --regid="$PG_OS_GID" --clear-groups -- "$@"; }
  as_pg true 2> /dev/null && return 0
  as_pg() {
    python3 -c "import os, sys
os.setgroups([]); os.setgid(int(sys.argv[2])); os.setuid(int(sys.argv[1]))
os.execvp(sys.argv[3], sys.argv[3:])" "$PG_OS_UID" "$PG_OS_GID" "$@"
  }
  as_pg true || { echo "cannot run as $PG_OS_USER"; return 1; }
}

services_stop() {
  if [ -f "$SVC_RUN/pgdata/postmaster.pid" ]; then
    # As the user that owns the data, whichever `services` picked.
    PG_OS_USER_NAME=$(stat -c %U "$SVC_RUN/pgdata") pg_user && as_pg env LD_LIBRARY_PATH="$SVC_RUN/pg/lib" "$SVC_RUN/pg/bin/pg_ctl" \
      -D "$SVC_RUN/pgdata" stop -m fast -w
  fi
  if [ -f "$SVC_RUN/redis.pid" ]; then
    kill "$(cat "$SVC_RUN/redis.pid")" 2> /dev/null
    for _ in $(seq 50); do [ -f "$SVC_RUN/redis.pid" ] || break; sleep 0.1; done
  fi
  return 0
}

services_start() {
  [ -x .svc/pg/bin/postgres ] && [ -x .svc/redis/bin/redis-server ] \
    || { echo ".svc/ is missing: build it with bench/gpu_services_bundle.sh, carry it"; return 1; }
  services_stop
  rm -rf "$SVC_RUN"
  mkdir -p "$SVC_RUN/redis" && chmod 755 "$SVC_RUN"
  cp -r .svc/pg "$SVC_RUN/pg" && chmod -R a+rX "$SVC_RUN/pg"  # readable by the postgres user
  pg_user || return 1
  local pg_port redis_port pg="env LD_LIBRARY_PATH=$SVC_RUN/pg/lib LC_ALL=C TZ=UTC $SVC_RUN/pg/bin"
  pg_port=$(free_port "$PG_PORT")
  redis_port=$(free_port "$REDIS_PORT")
  [ "$pg_port" = "$PG_PORT" ] || echo "port $PG_PORT is taken: postgres on $pg_port"
  [ "$redis_port" = "$REDIS_PORT" ] || echo "port $REDIS_PORT is taken: redis on $redis_port"
  printf 'PG_PORT=%s\nREDIS_PORT=%s\n' "$pg_port" "$redis_port" > "$SVC_RUN/ports.env"
  mkdir -p "$SVC_RUN/pgdata" "$SVC_RUN/pgsock"
  touch "$SVC_RUN/pg.log"
  chown "$PG_OS_USER" "$SVC_RUN/pgdata" "$SVC_RUN/pgsock" "$SVC_RUN/pg.log" 2> /dev/null
  chmod 700 "$SVC_RUN/pgdata"
  echo "postgres runs as $PG_OS_USER"
  as_pg $pg/initdb -D "$SVC_RUN/pgdata" -U postgres -A trust -E UTF8 --locale=C \
    > "$SVC_RUN/initdb.log" 2>&1 || { cat "$SVC_RUN/initdb.log"; return 1; }
  # As the CI's Postgres here: the defaults, autovacuum off, fsync on.
  cat >> "$SVC_RUN/pgdata/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $pg_port
unix_socket_directories = '$SVC_RUN/pgsock'
max_connections = 100
shared_buffers = 128MB
autovacuum = off
fsync = on
${PG_CONF:-}
CONF
  as_pg $pg/pg_ctl -D "$SVC_RUN/pgdata" -l "$SVC_RUN/pg.log" -w -t 60 start \
    || { cat "$SVC_RUN/pg.log"; return 1; }
  .svc/redis/bin/redis-server --bind 127.0.0.1 --port "$redis_port" --save "" --appendonly no \
    --protected-mode no --dir "$SVC_RUN/redis" --daemonize yes --pidfile "$SVC_RUN/redis.pid" \
    --logfile "$SVC_RUN/redis.log" || { cat "$SVC_RUN/redis.log"; return 1; }
  local ok=
  for _ in $(seq 100); do
    if $pg/pg_isready -q -h 127.0.0.1 -p "$pg_port" \
      && [ "$(.svc/redis/bin/redis-cli -p "$redis_port" ping 2> /dev/null)" = PONG ]; then
      ok=1; break
    fi
    sleep 0.2
  done
  [ -n "$ok" ] || { echo "services did not answer"; tail "$SVC_RUN/pg.log" "$SVC_RUN/redis.log"; return 1; }
  $pg/psql -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -qAtc 'CREATE DATABASE test' \
    || return 1
  $pg/psql -h 127.0.0.1 -p "$pg_port" -U postgres -d test -Atc 'SELECT version()' || return 1
  echo "redis $(.svc/redis/bin/redis-cli -p "$redis_port" info server | grep -E '^redis_version')"
  echo "postgresql://postgres@127.0.0.1:$pg_port/test redis://127.0.0.1:$redis_port/0"
}
ORACLE=src/codevolve/problems/gemm_tiling_gpu/data/oracle_h200.json
for step in "$@"; do
  echo "=== $step $(date -u +%T)"
  case $step in
    setup)
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
      # The sandbox starts its servers with python -I (no PYTHONPATH): a .pth file in the
      # interpreter's own site-packages makes this checkout importable there.
      site=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
      printf '%s\n%s\n' "$PWD/src" /tmp/site > "$site/codevolve-checkout.pth"
      nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,power.draw \
        --format=csv
      python3 -c "import torch, triton, codevolve.services.runtime.embedded as r; \
print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.device_count(), 'GPUs')"
      ;;
    services)
      services_start || { services_stop; exit 1; }
      ;;
    services_stop)
      services_stop
      ;;
    throughput)
      [ -f "$SVC_RUN/ports.env" ] && . "$SVC_RUN/ports.env"
      # shellcheck disable=SC2086  # THROUGHPUT_ARGS is a list of flags
      timeout ${THROUGHPUT_TIMEOUT:-540} "$PYTHON" bench/throughput.py \
        --pg "postgresql://postgres@127.0.0.1:$PG_PORT/test" --redis "redis://127.0.0.1:$REDIS_PORT/0" \
        ${THROUGHPUT_ARGS:-} 2>&1 | tee "$OUT/throughput.log"
      cp "$SVC_RUN"/*.log "$OUT/" 2> /dev/null
      ;;
    profile)
      # One throughput run ($THROUGHPUT_ARGS, default 64 slots) under py-spy (installed by setup
      # from .whl/, when its wheel is there), then where the controller's loop spent its samples.
      [ -f "$SVC_RUN/ports.env" ] && . "$SVC_RUN/ports.env"
      # shellcheck disable=SC2086  # THROUGHPUT_ARGS is a list of flags
      timeout ${THROUGHPUT_TIMEOUT:-540} /tmp/site/bin/py-spy record --nonblocking -r 250 -f raw \
        -o "$OUT/spy.txt" -- "$PYTHON" bench/throughput.py \
        --pg "postgresql://postgres@127.0.0.1:$PG_PORT/test" --redis "redis://127.0.0.1:$REDIS_PORT/0" \
        ${THROUGHPUT_ARGS:---parts 2 --slots 64 --proposals 10240 --proposal-processes 2} 2>&1 \
        | tee "$OUT/profile.log"
      "$PYTHON" bench/spy_summary.py "$OUT/spy.txt" | tee -a "$OUT/profile.log"
      ;;
    smoke)
      python3 -m codevolve.services.cli evaluate --problem gemm-tiling \
        --program data/gemm_tiling_gpu/programs/cost_model_best.py --json | head -c 400; echo
      ;;
    tests)
      timeout 240 python3 -m pytest -c /dev/null --rootdir . -p no:cacheprovider -q \
        -W ignore::pytest.PytestUnknownMarkWarning tests/gpu 2>&1 | tee "$OUT/gpu_tests.log"
      ;;
    hardware)
      python3 bench/gpu_calibrate.py hardware --out "$OUT/hardware.json" && cat "$OUT/hardware.json"
      ;;
    oracle)
      timeout ${ORACLE_TIMEOUT:-400} python3 bench/gpu_calibrate.py oracle --out "$OUT/oracle_h200.json" \
        2>&1 | tee "$OUT/oracle.log" | tail -30
      if python3 -c "import json,sys; sys.exit(not json.load(open('$OUT/oracle_h200.json'))['complete'])"; then
        cp "$OUT/oracle_h200.json" "$ORACLE"  # only a finished sweep replaces the stored table
      fi
      ;;
    fidelity)
      python3 bench/gpu_calibrate.py fidelity --oracle "$OUT/oracle_h200.json" \
        --out "$OUT/fidelity.json"
      ;;
    evaluate)
      programs=$(ls data/gemm_tiling_gpu/programs/*.py)
      timeout 300 python3 bench/gpu_calibrate.py evaluate --oracle "$ORACLE" $programs \
        --out "$OUT/evaluate.json" 2>&1 | tee "$OUT/evaluate.log"
      ;;
    evolve)
      timeout ${EVOLVE_TIMEOUT:-330} python3 -m codevolve.services.cli run gemm-tiling-gpu \
        --db "$OUT/gpu_evolve.sqlite" --proposals ${PROPOSALS:-400} --seed ${SEED:-0} --workers 6 \
        --in-flight 12 \
        --max-wall-s ${EVOLVE_WALL_S:-240} --quiet --report "$OUT/gpu_evolve_report.json" \
        2>&1 | tail -20
      python3 -m codevolve.services.cli best --db "$OUT/gpu_evolve.sqlite" \
        "$(python3 -c "import json;print(json.load(open('$OUT/gpu_evolve_report.json'))['job_id'])")" \
        > "$OUT/gpu_evolved_best.py"
      if [ -s "$OUT/gpu_evolved_best.py" ]; then
        cp "$OUT/gpu_evolved_best.py" data/gemm_tiling_gpu/programs/gpu_evolved_best.py
      fi
      ;;
  esac
done
echo "=== done $(date -u +%T)"
