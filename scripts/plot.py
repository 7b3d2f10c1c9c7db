"""Learning curves of run directories: a thin entry point to ``pytorchrl plot``.

    python scripts/plot.py RUN_DIR... [-o FILE.png] [--metric eval_return_mean] [--compare M1 M2] [--x env_steps|wall_time_s]
"""

import sys

from pytorchrl.cli import main

if __name__ == "__main__":
    sys.exit(main(["plot", *sys.argv[1:]]))
