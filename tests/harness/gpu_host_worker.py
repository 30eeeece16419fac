"""The real harness worker (`python -m kernelblaster.harness.worker`) as it starts on a host
with a GPU: `gpu_present()` says yes (this machine has no driver's device node), nothing else
is changed, and nothing here imports torch, so a test sees what the worker does before its own
torch import (harness/worker/serve.py: main starts the clean reference process first).

    python tests/harness/gpu_host_worker.py MARKER

MARKER is ignored; it puts a test's own folder on the worker's command line, where
tests/process_leaks.py looks for what a test left running."""

from __future__ import annotations

import sys

from kernelblaster.harness.worker import serve

serve.gpu_present = lambda: True

if __name__ == "__main__":
    sys.exit(serve.main())
