#!/bin/bash
# The GPU checks of central inference and the learner (issue 39) on a CUDA machine:
#   bash scripts/gpu_check.sh [OUT_DIR] [STEP ...]      STEP: tests server pong row (default: tests server pong)
#   tests   the CUDA tests (tests/test_cuda.py, and the noise tests' cuda cases)
#   server  one inference server's batches on the GPU (pinned and pageable copies) and on the CPU
#   pong    APPO Pong, the learner on the GPU, central (the server on the GPU) against local
#           inference, with PONG_WORKERS (default 8 12) workers x 8 envs, PONG_SECONDS each (at
#           most, with PONG_STEPS: each run to that many agent steps; PONG_SET: overrides, e.g.
#           PONG_SET=scheme.max_policy_lag=384)
#   scaling the latency env's scale-out with central inference on this machine's cores (no GPU
#           used: the machine is the only one lent with more than 2 cores), SCALING_WORKERS
#           (default 1 2 4 8 16 32 64) one-env workers, SCALING_SECONDS (default 15) each, SCALING_SET
#           overrides (e.g. SCALING_SET=scheme.inference_server.num_servers=2)
#   row     a results-table row's run: ROW_CONFIG (default configs/appo/atari_pong_gpu.yaml) to its
#           budget (seed ROW_SEED, default 0) for at most ROW_SECONDS, the run directory without
#           checkpoints packed as OUT_DIR/ALGO-STEM-seedN.tar.gz (the table's run name: the config's
#           folder and file stem); where /tmp already holds that run stopped with a checkpoint (an
#           earlier call on the same warm machine), it is resumed instead; ROW_SET adds overrides to a
#           fresh run, separated by spaces (e.g. ROW_SET=run.eval_parallel=true: evaluation beside
#           training; the PPO Breakout row on a GPU: ROW_CONFIG=configs/ppo/atari_breakout.yaml
#           ROW_SET="run.device=cuda env.atari.num_threads=8 run.torch_threads=4 run.eval_parallel=true",
#           keys the table counts as neutral)
# On a machine without network, wheels left in .whl/ by scripts/gpu_wheels.sh (ray stripped of
# its jars and dashboard as .whl/ray_site.tar.xz) are installed into /tmp/site first.
# pipefail: a step that fails fails the script, though its output goes through tee; each
# step's status is also written to OUT/status.txt
set -u -o pipefail
OUT=${1:-${OUT:-/tmp/gpu_check}}; mkdir -p "$OUT"; shift || true
failed=0
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
    tests) echo "== tests"; timeout ${TESTS_TIMEOUT:-240} python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/agent/test_noise.py -rs 2>&1 | tee "$OUT/pytest.txt" | tail -25 ;;
    server) echo "== server"; timeout 60 python3 scripts/central_gpu.py server 2>&1 | grep -E '^\{|rror' | tee "$OUT/server.jsonl" ;;
    # PONG_STEPS: each run to that many steps, so no 60 s default cut (PONG_SECONDS still may); a run root of its own per call
    pong) echo "== pong"; pong_root=$(mktemp -d /tmp/pong.XXXXXX); pong_seconds=${PONG_SECONDS:-60}
          if [ -n "${PONG_STEPS:-}" ] && [ -z "${PONG_SECONDS:-}" ]; then pong_seconds=${PONG_TIMEOUT:-540}; fi
          timeout ${PONG_TIMEOUT:-540} python3 scripts/central_gpu.py pong --workers ${PONG_WORKERS:-8 12} --seconds $pong_seconds ${PONG_STEPS:+--steps $PONG_STEPS} ${PONG_SET:+--set $PONG_SET} --run-root "$pong_root" 2>&1 | grep -E '^\{|rror' | tee "$OUT/pong.jsonl" ;;
    scaling) echo "== scaling"; timeout ${SCALING_TIMEOUT:-300} python3 scripts/central_scaling.py --modes central --workers ${SCALING_WORKERS:-1 2 4 8 16 32 64} --seconds ${SCALING_SECONDS:-15} ${SCALING_SET:+--set $SCALING_SET} 2>&1 | grep -E '^\{|rror' | tee "$OUT/scaling.jsonl" ;;
    row) seed=${ROW_SEED:-0}; config=${ROW_CONFIG:-configs/appo/atari_pong_gpu.yaml}
         name=$(basename "$(dirname "$config")")-$(basename "$config" .yaml)-seed$seed; echo "== row $name"
         if [ -d /tmp/$name/checkpoints ]; then what="--resume /tmp/$name"; else what="$config run.seed=$seed ${ROW_SET:-} --run-dir /tmp/$name"; fi
         timeout ${ROW_SECONDS:-560} python3 -m pytorchrl.cli train $what --quiet 2>&1 | tail -3
         tar czf "$OUT/$name.tar.gz" -C /tmp --exclude=checkpoints "$name" && ls -la "$OUT/$name.tar.gz" ;;
    *) echo "unknown step $step (tests, server, pong, scaling, row)"; exit 2 ;;
  esac
  status=$?; echo "$step $status" >> "$OUT/status.txt"; [ "$status" -eq 0 ] || failed=1
done
exit $failed
