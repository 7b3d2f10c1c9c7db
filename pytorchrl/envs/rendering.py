"""OpenGL rendering without a display, and MuJoCo's warnings shown once.

MuJoCo renders through OpenGL: with a display, GLFW; without one (a server, a container, CI),
GLFW fails deep inside the first ``render()`` with a long traceback. :func:`use_headless_gl`
picks a headless backend through MuJoCo's own ``MUJOCO_GL`` variable (EGL, which Mesa provides
even without a GPU, else OSMesa), unless the user chose one. gymnasium reads ``MUJOCO_GL`` when
an env makes its first renderer, so setting it before the render env is made is enough.
"""

from __future__ import annotations

import ctypes.util
import os
import re
import sys
import traceback

import gymnasium as gym

#: headless OpenGL backends MuJoCo knows, best first, with the library each needs
HEADLESS_BACKENDS = (("egl", "EGL"), ("osmesa", "OSMesa"))

_shown: set[str] = set()
_GL_BACKEND_FILE = re.compile(r"mujoco[/\\](egl|osmesa|glfw)[/\\]")


def has_display() -> bool:
    """Whether an X11 or Wayland display is there for GLFW."""
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def use_headless_gl() -> str | None:
    """Without a display and without the user's choice, set ``MUJOCO_GL`` (and PyOpenGL's
    ``PYOPENGL_PLATFORM``, which other OpenGL envs read) to the first headless backend whose
    library is installed.

    :return: the ``MUJOCO_GL`` now in force (None: a display, GLFW's default, or no backend found).
    """
    if has_display() or "MUJOCO_GL" in os.environ:
        return os.environ.get("MUJOCO_GL")
    chosen = os.environ.get("PYOPENGL_PLATFORM")  # a PyOpenGL platform already chosen must match MuJoCo's
    if chosen not in dict(HEADLESS_BACKENDS):
        chosen = next((name for name, library in HEADLESS_BACKENDS if ctypes.util.find_library(library)), None)
    if chosen is not None:
        os.environ["MUJOCO_GL"] = chosen
        os.environ.setdefault("PYOPENGL_PLATFORM", chosen)
    return chosen


def opengl_hint() -> str:
    """What to try when an env cannot render through OpenGL (one clause for an error line)."""
    current = os.environ.get("MUJOCO_GL")
    where = f"MUJOCO_GL={current}" if current else "MUJOCO_GL unset" + ("" if has_display() else ", no display")
    return (
        f"{where}; without a display MuJoCo needs MUJOCO_GL=egl (libEGL: Mesa or a GPU driver) "
        "or MUJOCO_GL=osmesa (libOSMesa, e.g. apt install libosmesa6)"
    )


def is_opengl_failure(exc: BaseException) -> bool:
    """Whether ``exc`` was raised inside PyOpenGL or one of MuJoCo's OpenGL backends (MuJoCo
    imports the ``MUJOCO_GL`` backend when an env is made: a missing library fails there)."""
    frames = traceback.extract_tb(exc.__traceback__)
    return any(f"{os.sep}OpenGL{os.sep}" in frame.filename or _GL_BACKEND_FILE.search(frame.filename) for frame in frames)


def show_mujoco_warnings_once(env_id: str) -> None:
    """Print each distinct MuJoCo warning once per process, for a MuJoCo env id.

    MuJoCo prints its warnings on stderr each time a model is compiled, i.e. for every env made
    (mujoco 4.0 warns that HalfCheetah's ``settotalmass`` is deprecated): a run would repeat it
    per env and per evaluation. A handler the user installed is left alone.
    """
    if not _is_mujoco(env_id):
        return
    import mujoco

    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(_warn_once)


def _warn_once(message: str) -> None:
    text = message.strip()
    if text not in _shown:
        _shown.add(text)
        print(f"pytorchrl: MuJoCo warning (shown once): {text}", file=sys.stderr)


def _is_mujoco(env_id: str) -> bool:
    spec = gym.registry.get(env_id)
    return spec is not None and isinstance(spec.entry_point, str) and spec.entry_point.startswith("gymnasium.envs.mujoco")
