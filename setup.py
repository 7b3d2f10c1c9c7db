"""pytorchrl: scalable reinforcement learning with PyTorch on Ray."""

import re

from setuptools import find_packages, setup

VERSION = re.search(r'__version__ = "([^"]+)"', open("pytorchrl/version.py").read()).group(1)  # type: ignore[union-attr]

setup(
    name="pytorchrl",
    version=VERSION,
    description="Scalable reinforcement learning with PyTorch on Ray: distributed schemes from one YAML config.",
    long_description=open("README.md").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["pytorchrl", "pytorchrl.*"]),
    package_data={"pytorchrl": ["py.typed"]},
    python_requires=">=3.10",
    install_requires=[
        "torch>=2.1",
        "ray[default]>=2.9",
        "gymnasium>=1.0",
        "numpy>=1.24",
        "pyyaml>=6.0",
        "tensorboard>=2.12",
        "lz4>=4.0",
    ],
    extras_require={
        "test": [
            "pytest>=7", "pytest-timeout>=2.1", "ruff>=0.4", "mypy>=1.8", "types-PyYAML", "pygame>=2.1", "pillow>=9",
            "ale-py>=0.10", "opencv-python-headless>=4", "gymnasium[mujoco]>=1.0", "Box2D>=2.3.10", "matplotlib>=3.5", "prometheus-client>=0.20", "ray[tune]>=2.9",
            "stable-baselines3>=2.3",  # tests scripts/sb3_pong_same_frames.py, the peer wrapper
            "setuptools>=61", "wheel",  # tests/test_packaging.py reads setup.py and builds the wheel
        ],
        "video": ["pygame>=2.1", "pillow>=9"],
        "plot": ["matplotlib>=3.5"],
        "prometheus": ["prometheus-client>=0.20"],
        "tune": ["ray[tune]>=2.9"],
        # Box2D's own wheels: gymnasium[box2d] pins box2d-py, which builds from source with swig and a compiler
        "box2d": ["Box2D>=2.3.10", "pygame>=2.1"],
        "mujoco": ["gymnasium[mujoco]>=1.0"],
        "atari": ["gymnasium[atari]>=1.0", "ale-py>=0.10", "opencv-python-headless>=4"],
    },
    entry_points={"console_scripts": ["pytorchrl=pytorchrl.cli:main"]},
    classifiers=["Programming Language :: Python :: 3", "License :: OSI Approved :: MIT License"],
)
