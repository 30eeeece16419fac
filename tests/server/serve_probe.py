"""Runs `kernelblaster serve` and, when it exits, records which heavy modules and which
modules of kernelblaster.agents (the LLM side) the server process had imported (to
$KERNELBLASTER_PROBE_MODULES), so a test can assert it imported neither."""

from __future__ import annotations

import atexit
import json
import os
import sys
from pathlib import Path

from kernelblaster.cli import main

HEAVY = {"torch", "numpy", "triton", "openai"}
AGENTS = "kernelblaster.agents"


def record() -> None:
    heavy = {name.split(".")[0] for name in sys.modules} & HEAVY
    agents = {name for name in sys.modules if name == AGENTS or name.startswith(AGENTS + ".")}
    loaded = sorted(heavy | agents)
    Path(os.environ["KERNELBLASTER_PROBE_MODULES"]).write_text(json.dumps(loaded))


atexit.register(record)
sys.exit(main(["serve"]))
