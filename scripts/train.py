"""Same as ``pytorchrl train``: python scripts/train.py CONFIG.yaml [KEY=VALUE ...]."""

import sys

from pytorchrl.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
