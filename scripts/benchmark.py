"""Same as ``pytorchrl benchmark``: python scripts/benchmark.py NAME ... | all [--seeds 0 1 2]."""

import sys

from pytorchrl.cli import main

if __name__ == "__main__":
    sys.exit(main(["benchmark", *sys.argv[1:]]))
