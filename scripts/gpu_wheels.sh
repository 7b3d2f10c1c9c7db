#!/bin/bash
# Wheels for scripts/gpu_check.sh on a GPU machine without network whose Python has torch but not
# ray, gymnasium or ale-py (the lent H100/H200 machines: Python 3.12, x86-64):
#   bash scripts/gpu_wheels.sh [PYTHON_VERSION]     # default 3.12; writes .whl/ (git-ignored)
# ray's wheel (~80 MB) is too large to carry, so it is unpacked here without its Java jars and
# dashboard build, its binaries stripped of symbols, and packed as .whl/ray_site.tar.xz (~26 MB).
set -eu
py=${1:-3.12}; tag=cp${py/./}
ray_version=$(python3 -c "import ray; print(ray.__version__)")
platforms="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any"
mkdir -p .whl
exclude=$(git rev-parse --git-path info/exclude)  # a worktree's .git is a file: ask git where its exclude file is
grep -qx "/.whl/" "$exclude" 2>/dev/null || { mkdir -p "$(dirname "$exclude")"; echo "/.whl/" >> "$exclude"; }
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$py" --implementation cp $platforms -d .whl \
  "gymnasium==$(python3 -c 'import gymnasium; print(gymnasium.__version__)')" "ale-py==$(python3 -c 'import ale_py; print(ale_py.__version__)')" \
  farama-notifications jsonschema jsonschema-specifications referencing rpds-py lz4
tmp=$(mktemp -d)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$py" --implementation cp $platforms -d "$tmp" "ray==$ray_version"
(cd "$tmp" && unzip -q ray-*-"$tag"-*.whl && rm -rf ray/jars ray/dashboard/client/build \
  && { find ray -name "*.so" -exec strip --strip-unneeded {} + 2>/dev/null || true; } && strip --strip-unneeded ray/core/src/ray/gcs/gcs_server ray/core/src/ray/raylet/raylet \
  && tar cf - ray ray-*.dist-info | xz -T2 -6 > ray_site.tar.xz)
mv "$tmp/ray_site.tar.xz" .whl/ && rm -rf "$tmp"
du -sh .whl
