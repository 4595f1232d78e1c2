#!/usr/bin/env bash
# Steps run on the GPU machine (embedded mode there: it reaches no Redis). Usage:
#   bash bench/gpu_device_run.sh STEP...   with STEP in setup tests hardware oracle fidelity
#   evaluate evolve evolve_multi; outputs land in $OUT (default ./gpu-out). evolve reads
#   PROPOSALS, SEED, EVOLVE_WALL_S and EVOLVE_TIMEOUT from the environment.
# `setup` installs the wheels in .whl/ (ignored by git; the GPU machine has torch, Triton, numpy
# and httpx but no package index), built on a machine with one for the GPU machine's Python 3.12:
#   python3 -m pip download -d .whl --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 sqlalchemy greenlet aiosqlite alembic pydantic \
#     pydantic-settings redis fastapi uvicorn asyncpg python-multipart    (14 MiB with their needs)
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src:$PWD TRITON_CACHE_DIR=/tmp/triton-cache
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
      python3 -c "import torch, triton, codevolve.services.runtime as r; \
print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.device_count(), 'GPUs')"
      ;;
    smoke)
      python3 -m codevolve.services.cli evaluate --problem gemm-tiling \
        --program bench/gpu_programs/cost_model_best.py --json | head -c 400; echo
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
      programs=$(ls bench/gpu_programs/*.py)
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
        cp "$OUT/gpu_evolved_best.py" bench/gpu_programs/gpu_evolved_best.py
      fi
      ;;
  esac
done
echo "=== done $(date -u +%T)"
