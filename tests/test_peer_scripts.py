"""``scripts/sb3_pong_same_frames.py``: the SB3 Pong peer on pytorchrl's game (4 emulated frames per step)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO

SCRIPT = str(REPO / "scripts" / "sb3_pong_same_frames.py")
pytestmark = pytest.mark.timeout(120)


def test_missing_peer_is_one_line(tmp_path):
    out = subprocess.run([sys.executable, SCRIPT, "--peers", str(tmp_path), "--task", "pong"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip() == f"--peers {tmp_path}: no bench_sb3_pixels_physics.py there"


@pytest.mark.slow
def test_peer_builds_pong_with_four_frames_per_step(tmp_path):
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("ale_py")
    # a stand-in peer with the real one's seams: a module-level make_pong that main() calls
    (tmp_path / "bench_sb3_pixels_physics.py").write_text(
        textwrap.dedent(
            """
            import sys

            def make_pong(seed, n_envs):
                raise AssertionError("the script must replace the peer's builder")

            def main():
                env = make_pong(0, 1)
                inner = env.venv.envs[0]
                skips = []
                while hasattr(inner, "env"):
                    skips.append(getattr(inner, "_skip", None))
                    inner = inner.env
                print(sys.argv[1:], [s for s in skips if s], inner._frameskip, inner.ale.getFloat("repeat_action_probability"))
            """
        )
    )
    out = subprocess.run([sys.executable, SCRIPT, "--peers", str(tmp_path), "--task", "pong"], capture_output=True, text=True, timeout=100)
    assert out.returncode == 0, out.stderr
    # SB3's MaxAndSkipEnv repeats 4 times over an emulator that now steps one frame, sticky actions kept
    assert out.stdout.strip().splitlines()[-1] == "['--task', 'pong'] [4] 1 0.25"
