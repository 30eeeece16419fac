"""`python -m kernelblaster.harness.worker`: the worker's command line (see serve.py)."""

import sys

from kernelblaster.harness.worker.serve import main

if __name__ == "__main__":
    sys.exit(main())
