#!/usr/bin/env bash
# Submit a pytorchrl training run to a Ray cluster as a Ray job.
#
#   scripts/submit_job.sh CONFIG.yaml [KEY=VALUE ...]
#
# Environment:
#   RAY_ADDRESS   the cluster's job server (default http://127.0.0.1:8265, the head node's dashboard)
#   RUN_ROOT      where the run directory goes *on the head node* (default /tmp/pytorchrl-runs);
#                 the job's working directory is a temporary copy, so never leave runs there
#   NO_WAIT=1     return at once instead of following the job's logs
#
# The repository is shipped with --working-dir: the driver runs in (and every job worker imports
# pytorchrl from) that copy, so the cluster's nodes need only pytorchrl's dependencies (torch,
# ray, gymnasium, ...) installed. The driver joins the cluster through RAY_ADDRESS, which Ray
# sets for the job. Logs: `ray job logs JOB_ID` (and the Ray dashboard); the run directory:
# $RUN_ROOT/<configdir>-<config>-<timestamp> on the head node, printed at the top of the logs.
# Ctrl-C stops following the logs, not the job: `ray job stop JOB_ID` stops it (SIGTERM: the run
# checkpoints at its round's end unless Ray kills it first, after RAY_JOB_STOP_WAIT_TIME_S).
set -euo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  sed -n '2,18p' "$0"
  exit 0
fi
if [[ $# -lt 1 ]]; then
  sed -n '2,18p' "$0" >&2
  exit 2
fi
config="$1"; shift
if [[ ! -f "$config" ]]; then
  echo "submit_job.sh: config file '$config' does not exist" >&2
  exit 2
fi
repo="$(cd "$(dirname "$0")/.." && pwd -P)"
config_path="$(cd "$(dirname "$config")" && pwd -P)/$(basename "$config")"
# the job runs in a copy of the repository: the config is named by its path inside it
if [[ "$config_path" != "$repo"/* ]]; then
  echo "submit_job.sh: config file '$config' is outside the repository $repo, which is what the job ships; copy it into the repository (e.g. configs/)" >&2
  exit 2
fi
config="${config_path#"$repo"/}"
cd "$repo"
# Ray's upload of the working directory leaves out what .gitignore and .rayignore match (run
# directories), tracked or not: --no-index asks the patterns, not the index
ignores=(git)
[[ -f .rayignore ]] && ignores=(git -c core.excludesFile=.rayignore)
if command -v git >/dev/null && git rev-parse --is-inside-work-tree >/dev/null 2>&1 && "${ignores[@]}" check-ignore -q --no-index "$config"; then
  echo "submit_job.sh: config file '$config' is ignored by git (.gitignore or .rayignore), so Ray does not ship it with the job; copy it elsewhere in the repository (e.g. configs/)" >&2
  exit 2
fi
export RAY_ADDRESS="${RAY_ADDRESS:-http://127.0.0.1:8265}"
# a job server nobody answers at: one line, not Ray's traceback (any HTTP answer, 401 included, is one)
if [[ "$RAY_ADDRESS" == http://* || "$RAY_ADDRESS" == https://* ]]; then
  if ! problem="$(python -c 'import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(sys.argv[1].rstrip("/") + "/api/version", timeout=5)
except urllib.error.HTTPError:
    pass
except Exception as exc:
    print(getattr(exc, "reason", None) or exc); sys.exit(1)' "$RAY_ADDRESS" 2>&1)"; then
    echo "submit_job.sh: no Ray job server answers at RAY_ADDRESS=$RAY_ADDRESS ($problem); it is the head's dashboard (port 8265), which listens on 127.0.0.1 only unless the head was started with --dashboard-host=0.0.0.0" >&2
    exit 2
  fi
elif [[ "$RAY_ADDRESS" != auto ]]; then
  # a cluster's own host:port (what `pytorchrl train --address` takes): Ray finds the job server
  # through it, and waits 40 s before its traceback when nobody answers there
  if ! problem="$(python -c 'import socket, sys
host, _, port = sys.argv[1].split("://", 1)[-1].rpartition(":")
try:
    socket.create_connection((host, int(port)), timeout=5).close()
except Exception as exc:
    print(getattr(exc, "strerror", None) or exc); sys.exit(1)' "$RAY_ADDRESS" 2>&1)"; then
    echo "submit_job.sh: no Ray cluster answers at RAY_ADDRESS=$RAY_ADDRESS ($problem); give the head's job server, e.g. RAY_ADDRESS=http://HEAD:8265 (its dashboard)" >&2
    exit 2
  fi
fi
# clusters with token authentication (Ray's default since 2.5x): send the token we have
if [[ -z "${RAY_AUTH_MODE:-}" && ( -n "${RAY_AUTH_TOKEN:-}" || -f "$HOME/.ray/auth_token" ) ]]; then
  export RAY_AUTH_MODE=token
fi
run_root="${RUN_ROOT:-/tmp/pytorchrl-runs}"
# to the nanosecond: jobs submitted in one second (a loop over seeds) must not share a run directory
stem="$(basename "$config")"; stem="${stem%.yaml}"; stem="${stem%.yml}"
folder="$(basename "$(dirname "$config")")"
[[ "$folder" != "." ]] && stem="$folder-$stem"  # a config at the repository's top: no hidden ".-" directory
name="$stem-$(date +%Y%m%d-%H%M%S-%N)"
follow=()
[[ "${NO_WAIT:-0}" == "1" ]] && follow=(--no-wait)
# ${a[@]+...}: an empty array is "unbound" under set -u in bash before 4.4 (macOS's /bin/bash is 3.2)
exec ray job submit ${follow[@]+"${follow[@]}"} \
  --working-dir . \
  --runtime-env-json '{"env_vars": {"OMP_NUM_THREADS": "1"}}' \
  -- python -m pytorchrl.cli train "$config" --run-dir "$run_root/$name" --quiet "$@"
