#!/bin/bash
# The GPU checks of central inference and the learner (issue 39) on a CUDA machine:
#   bash scripts/gpu_check.sh [OUT_DIR] [STEP ...]      STEP: tests server pong row (default: tests server pong)
#   tests   the CUDA tests (tests/test_cuda.py, and the noise tests' cuda cases)
#   server  one inference server's batches on the GPU (pinned and pageable copies) and on the CPU
#   pong    APPO Pong, the learner on the GPU, central (the server on the GPU) against local
#           inference, with PONG_WORKERS (default 8 12) workers x 8 envs, PONG_SECONDS each
#   row     configs/appo/atari_pong_gpu.yaml to its 10M frames (seed ROW_SEED, default 0) for at most
#           ROW_SECONDS, the run directory without checkpoints packed as
#           OUT_DIR/appo-atari_pong_gpu-seedN.tar.gz; where /tmp already holds that run stopped with a
#           checkpoint (an earlier call on the same warm machine), it is resumed instead; ROW_SET adds
#           overrides to a fresh run, each without spaces (e.g. ROW_SET=run.eval_parallel=true: evaluation
#           beside training)
# On a machine without network, wheels left in .whl/ by scripts/gpu_wheels.sh (ray stripped of
# its jars and dashboard as .whl/ray_site.tar.xz) are installed into /tmp/site first.
set -u
OUT=${1:-${OUT:-/tmp/gpu_check}}; mkdir -p "$OUT"; shift || true
steps=${*:-tests server pong}
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  if [ -f .whl/ray_site.tar.xz ]; then tar xJf .whl/ray_site.tar.xz -C /tmp/site || exit 1; fi
  export PYTHONPATH=/tmp/site:$PWD
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -c "import os, torch, ray, gymnasium, ale_py; print(os.cpu_count(), 'cores; torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'ray', ray.__version__)" 2>&1 | tee -a "$OUT/gpu.txt"
for step in $steps; do
  case $step in
    tests) echo "== tests"; timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/agent/test_noise.py -rs 2>&1 | tee "$OUT/pytest.txt" | tail -25 ;;
    server) echo "== server"; timeout 60 python3 scripts/central_gpu.py server 2>&1 | grep '^{' | tee "$OUT/server.jsonl" ;;
    pong) echo "== pong"; timeout 540 python3 scripts/central_gpu.py pong --workers ${PONG_WORKERS:-8 12} --seconds ${PONG_SECONDS:-60} --run-root /tmp/pong 2>&1 | grep -E '^\{|rror' | tee "$OUT/pong.jsonl" ;;
    row) seed=${ROW_SEED:-0}; name=appo-atari_pong_gpu-seed$seed; echo "== row $name"
         if [ -d /tmp/$name/checkpoints ]; then what="--resume /tmp/$name"; else what="configs/appo/atari_pong_gpu.yaml run.seed=$seed ${ROW_SET:-} --run-dir /tmp/$name"; fi
         timeout ${ROW_SECONDS:-560} python3 -m pytorchrl.cli train $what --quiet 2>&1 | tail -3
         tar czf "$OUT/$name.tar.gz" -C /tmp --exclude=checkpoints "$name" && ls -la "$OUT/$name.tar.gz" ;;
    *) echo "unknown step $step (tests, server, pong, row)"; exit 2 ;;
  esac
done
