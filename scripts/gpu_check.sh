#!/bin/bash
# The GPU checks of central inference and the learner (issue 39), in one pass on a CUDA machine:
#   bash scripts/gpu_check.sh [OUT_DIR]
# the CUDA tests (tests/test_cuda.py, and the noise tests' cuda cases), one inference server's
# batches on the GPU (pinned and pageable copies) and on the CPU, and APPO Pong with 8 collection
# workers x 8 envs, the learner on the GPU, central (the server on the GPU) against local inference.
# On a machine without network, wheels left in .whl/ by scripts/gpu_wheels.sh (ray stripped of its jars and dashboard as
# .whl/ray_site.tar.xz) are installed into /tmp/site first.
set -u
OUT=${1:-${OUT:-/tmp/gpu_check}}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  if [ -f .whl/ray_site.tar.xz ]; then tar xJf .whl/ray_site.tar.xz -C /tmp/site || exit 1; fi
  export PYTHONPATH=/tmp/site:$PWD
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
nproc | tee -a "$OUT/gpu.txt"
python3 -c "import torch, ray, gymnasium, ale_py; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'ray', ray.__version__)" 2>&1 | tee -a "$OUT/gpu.txt"
echo "== tests"; timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/agent/test_noise.py -rs 2>&1 | tee "$OUT/pytest.txt" | tail -25
echo "== server"; timeout 60 python3 scripts/central_gpu.py server 2>&1 | grep '^{' | tee "$OUT/server.jsonl"
echo "== pong"; timeout 300 python3 scripts/central_gpu.py pong --workers 8 --seconds ${PONG_SECONDS:-100} --run-root /tmp/pong 2>&1 | grep -E '^\{|rror' | tee "$OUT/pong.jsonl"
