#!/usr/bin/env bash
# gemm-kernel-gpu steps on the GPU machine; outputs land in $OUT (default ./gpu-out). Usage:
#   bash bench/gpu_kernel_run.sh STEP...   with STEP in setup tests probe variants pipeline evolve pause
#   evaluate
# tests: the GPU harness and pipeline tests (TESTS_FILES: other files; TESTS_K=EXPR: only those
#   pytest -k selects).
# probe: single kernels timed alone (bench/gpu_kernel_probe.py: K splits of mid-size tiles, and
#   the L2's state after the flush; the kernels cuBLAS runs per selection shape).
#   PROBE_SECTIONS="cublas": only those sections.
# setup installs the wheels of .whl/ (carried; see bench/gpu_device_run.sh for the download).
# variants: every kernel variant per regime (bench/gpu_kernel.py variants).
# tune: retired with bench/gpu_kernel_tune.py (git show 1faea2f:bench/gpu_kernel_tune.py;
#   docs/results-gpu-kernel.md, "How the shipped programs were built"): fails with one line.
# pipeline: GPU evaluations per minute through the device's pipeline (bench/gpu_kernel_pipeline.py):
#   PIPELINE_CHILDREN children with new launches (default 40), PIPELINE_LOOPS at once (default 16),
#   then their dispatch-only children; $OUT/pipeline.json.
# evolve: `codevolve run gemm-kernel-gpu` for EVOLVE_WALL_S seconds (default 240), seed SEED,
#   EVOLVE_WORKERS worker loops sharing the GPU and as many programs in flight (default 16); with
#   RESUME=JOB it continues that job from $DB (default $OUT/kernel_evolve.sqlite); the best
#   program goes to $OUT/kernel_evolved_best.py.
# pause: `codevolve run gemm-kernel-gpu` (seed SEED) stopped by SIGTERM after PAUSE_S seconds
#   (default 150), then `codevolve run --resume` of the paused job in a new process, stopped
#   the same way; with RESUME=JOB, only the second part, on a job in $DB carried from an earlier
#   machine. $OUT/pause.log has both parts' lines and the job's status after each.
# evaluate: the initial program, data/gemm_kernel_gpu/*.txt and the evolved best (if any) on
#   all 88 shapes, 30 samples (bench/gpu_kernel.py evaluate). Measured programs are stored as
#   .txt: they are data (the sources measured), not modules of this repository.
set -u
case " $* " in
  *" tune "*)  # before any step runs: a call that asks for it does nothing
    echo "gpu_kernel_run.sh: step 'tune' is retired with bench/gpu_kernel_tune.py (git show 1faea2f:bench/gpu_kernel_tune.py)" >&2
    exit 2
    ;;
esac
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src:$PWD TRITON_CACHE_DIR=/tmp/triton-cache
DB=${DB:-$OUT/kernel_evolve.sqlite}
for step in "$@"; do
  echo "=== $step $(date -u +%T)"
  case $step in
    setup)
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
      site=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
      printf '%s\n%s\n' "$PWD/src" /tmp/site > "$site/codevolve-checkout.pth"
      nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv
      ;;
    tests)
      timeout 540 python3 -m pytest -c /dev/null --rootdir . -p no:cacheprovider -q \
        -W ignore::pytest.PytestUnknownMarkWarning \
        ${TESTS_FILES:-tests/gpu/test_kernel_harness.py tests/gpu/test_kernel_pipeline_gpu.py} \
        ${TESTS_K:+-k "$TESTS_K"} 2>&1 \
        | tee "$OUT/kernel_tests.log" | tail -30
      ;;
    probe)
      timeout 240 python3 bench/gpu_kernel_probe.py --out "$OUT/probe.json" \
        --sections ${PROBE_SECTIONS:-split l2 cublas} 2>&1 | tee "$OUT/probe.log"
      ;;
    variants)
      timeout 400 python3 bench/gpu_kernel.py variants --out "$OUT/variants.json" \
        --program "$OUT/composed.py" 2>&1 | tee "$OUT/variants.log"
      ;;
    evolve)
      # A GPU evaluation that compiles a new kernel variant takes up to ~90 s: the run finishes
      # the evaluations in flight after its wall budget. A resumed job keeps its stored options.
      if [ -n "${RESUME:-}" ]; then
        job_args=(--resume "$RESUME")
      else
        job_args=(gemm-kernel-gpu --proposals "${PROPOSALS:-5000}" --seed "${SEED:-0}"
          --in-flight "${EVOLVE_WORKERS:-16}" --max-wall-s "${EVOLVE_WALL_S:-240}")
      fi
      timeout $((${EVOLVE_WALL_S:-240} + 180)) python3 -m codevolve.services.cli run \
        "${job_args[@]}" --db "$DB" --workers "${EVOLVE_WORKERS:-16}" --quiet \
        --report "$OUT/kernel_evolve_report.json" \
        2>&1 | tail -25 | tee "$OUT/kernel_evolve.log"
      job=${RESUME:-$(python3 -c "import json;print(json.load(open('$OUT/kernel_evolve_report.json'))['job_id'])")}
      python3 -m codevolve.services.cli best --db "$DB" "$job" > "$OUT/kernel_evolved_best.py"
      ;;
    pause)
      stop=(timeout -k 90 -s TERM "${PAUSE_S:-150}")
      job=${RESUME:-}
      if [ -z "$job" ]; then
        "${stop[@]}" python3 -m codevolve.services.cli run gemm-kernel-gpu --seed "${SEED:-0}" \
          --proposals 5000 --in-flight 2 --max-wall-s 3600 --db "$DB" --workers 2 --quiet \
          2>&1 | tail -5 | tee "$OUT/pause.log"
        job=$(grep -o 'job [0-9a-f-]* is paused' "$OUT/pause.log" | cut -d' ' -f2)
        python3 -m codevolve.services.cli status --db "$DB" "$job" 2>&1 | tee -a "$OUT/pause.log"
      fi
      "${stop[@]}" python3 -m codevolve.services.cli run --resume "$job" --db "$DB" --quiet \
        --workers 2 2>&1 | tail -5 | tee -a "$OUT/pause.log"
      python3 -m codevolve.services.cli status --db "$DB" "$job" 2>&1 | tee -a "$OUT/pause.log"
      ;;
    pipeline)
      timeout 540 python3 bench/gpu_kernel_pipeline.py --children "${PIPELINE_CHILDREN:-40}" \
        --loops "${PIPELINE_LOOPS:-16}" --out "$OUT/pipeline.json" 2>&1 | tee "$OUT/pipeline.log"
      ;;
    evaluate)
      # EVAL_PROGRAMS: the stored programs to measure (default: all of data/gemm_kernel_gpu);
      # EVAL_FLUSH=clean: the L2 left clean instead of dirty before each timed launch.
      programs=(src/codevolve/problems/gemm_kernel_gpu/initial_program.txt
        ${EVAL_PROGRAMS:-data/gemm_kernel_gpu/*.txt})
      [ -s "$OUT/kernel_evolved_best.py" ] && programs+=("$OUT/kernel_evolved_best.py")
      timeout 300 python3 bench/gpu_kernel.py evaluate "${programs[@]}" --samples 30 \
        --seed ${SEED_EVAL:-2} --flush "${EVAL_FLUSH:-dirty}" --out "$OUT/kernel_evaluate.json" 2>&1 | tee "$OUT/kernel_evaluate.log"
      ;;
  esac
done
echo "=== done $(date -u +%T)"
