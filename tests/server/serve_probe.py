"""Runs `kernelblaster serve` and, when it exits, records which heavy modules the server
process had imported (to $KERNELBLASTER_PROBE_MODULES), so a test can assert it never
imported torch."""

from __future__ import annotations

import atexit
import json
import os
import sys
from pathlib import Path

from kernelblaster.cli import main

HEAVY = {"torch", "numpy", "triton", "openai"}


def record() -> None:
    loaded = sorted({name.split(".")[0] for name in sys.modules} & HEAVY)
    Path(os.environ["KERNELBLASTER_PROBE_MODULES"]).write_text(json.dumps(loaded))


atexit.register(record)
sys.exit(main(["serve"]))
