#!/usr/bin/env bash
# KernelBench-format problems on a GPU machine: the figures of docs/results-kernelbench.md.
#   bash bench/kb_gpu_run.sh STEP...   with STEP in setup tests templates compile level2 set groups
# Outputs land in $OUT (default ./gpu-out).
# - setup: bench/gpu_device_run.sh's (the wheels of .whl/ into /tmp/site; see that script).
# - tests: tests/gpu plus the KernelBench judge's tests, on the GPU, under timeout
#   $KB_TESTS_TIMEOUT seconds (default 300).
# - templates: bench/kb_templates_gpu.py (every template and rewrite against eager; $KB_TEMPLATES_ARGS
#   passed on, e.g. "-k conv"), under timeout $KB_TEMPLATES_TIMEOUT seconds (default 200).
# - compile: bench/kb_compile_baseline.py over the Level-1 problems $KB_COMPILE_PROBLEMS (numbers,
#   default "19 23 1 40 95"), into the compile cache $KB_COMPILE_CACHE (default
#   /tmp/kb-compile-cache, emptied first), under timeout $KB_COMPILE_TIMEOUT (default 540); its
#   lines in $OUT/compile.txt, each run's JSON record in /tmp/kb-compile-records.
# - level2: bench/kb_level2_gpu.py over $KB_DIR/level2 (each Level-2 file's fuse and epilogue
#   children against eager) with $KB_L2_ARGS (e.g. "--problems 1-50 --compile"), under timeout
#   $KB_L2_TIMEOUT seconds (default 540), into $OUT/level2.log.
# - set: `codevolve kernelbench` over $KB_DIR (default .kb: a KernelBench checkout's files, level1/
#   inside; not in the repository), level $KB_LEVEL (default 1), problems $KB_PROBLEMS,
#   $KB_PROPOSALS proposals each, baselines $KB_BASELINES (default eager), into the database $KB_DB
#   (default $OUT/kb.sqlite; name a carried copy to continue a set), under timeout $KB_TIMEOUT
#   seconds (default 400); the same command continues the set.
# - groups: `set` for each group of $KB_GROUPS in turn (space-separated, e.g. "12,25 1-18"), most
#   promising first, all within $KB_BUDGET seconds (default 540) and into one database; with
#   $KB_DB_FROM (a carried copy of an earlier call's database) copied to $KB_DB first.
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src:$PWD TRITON_CACHE_DIR=/tmp/triton-cache
KB_DIR=${KB_DIR:-.kb}
KB_DB=${KB_DB:-$OUT/kb.sqlite}
for step in "$@"; do
  case "$step" in
    setup)
      bash bench/gpu_device_run.sh setup
      ;;
    tests)
      timeout ${KB_TESTS_TIMEOUT:-300} python3 -m pytest -c /dev/null --rootdir . -p no:cacheprovider -q \
        -W ignore::pytest.PytestUnknownMarkWarning tests/gpu \
        tests/unit/problems/kernelbench/device/test_kb_judge.py \
        2>&1 | tee "$OUT/gpu_tests.log" | tail -15
      ;;
    templates)
      timeout ${KB_TEMPLATES_TIMEOUT:-200} python3 bench/kb_templates_gpu.py ${KB_TEMPLATES_ARGS:-} 2>&1 \
        | tee "$OUT/templates.log"
      ;;
    compile)
      timeout ${KB_COMPILE_TIMEOUT:-540} python3 bench/kb_compile_baseline.py --dir "$KB_DIR" \
        --problems "${KB_COMPILE_PROBLEMS:-19 23 1 40 95}" \
        --cache-dir "${KB_COMPILE_CACHE:-/tmp/kb-compile-cache}" --out /tmp/kb-compile-records \
        2>&1 | tee "$OUT/compile.txt"
      ;;
    level2)
      timeout ${KB_L2_TIMEOUT:-540} python3 bench/kb_level2_gpu.py --dir "$KB_DIR/level2" \
        ${KB_L2_ARGS:-} 2>&1 | tee "$OUT/level2.log" | tail -130
      ;;
    set)
      timeout ${KB_TIMEOUT:-400} python3 -m codevolve.services.cli kernelbench --dir "$KB_DIR" \
        --level "${KB_LEVEL:-1}" --problems "${KB_PROBLEMS:-1-100}" --proposals "${KB_PROPOSALS:-8}" \
        --baselines "${KB_BASELINES:-eager}" --judge-trials "${KB_TRIALS:-10}" --remeasure-samples 2 \
        --db "$KB_DB" --report "$OUT/kb.json" 2>&1 | tee "$OUT/set.log" | tail -60
      ;;
    groups)
      [ -n "${KB_DB_FROM:-}" ] && cp "$KB_DB_FROM" "$KB_DB"
      start=$(date +%s)
      for group in ${KB_GROUPS:?name the groups of problems}; do
        left=$(( ${KB_BUDGET:-540} - ($(date +%s) - start) ))
        [ "$left" -lt 20 ] && break
        echo "=== problems $group ($left s left)"
        KB_PROBLEMS=$group KB_TIMEOUT=$left bash "$0" set | grep -E '^\[|fast_|interrupted'
        cp "$OUT/set.log" "$OUT/set_${group//,/_}.log"
      done
      ;;
    *)
      echo "unknown step $step" >&2
      exit 2
      ;;
  esac
done
