"""The real harness worker with one of its own steps made to raise, as a bug of ours would:
`python raising_worker.py WHERE`, WHERE being "build" (the harness's build step, before any
candidate code ran here), "check" (the check, once the candidate is loaded: its code may be
what raised) or "missing-module" (the check's import of a dependency that is not installed, as
ncu_report was on a fresh machine). What the worker answers then is the test's
(test_worker_harness_failures.py)."""

from __future__ import annotations

import sys

import torch  # noqa: F401 - imported before the patch below, as the worker would

from kernelblaster.harness.check import check
from kernelblaster.harness.worker import serve as worker


def _raise(*_args, **_kwargs):
    raise RuntimeError(f"a bug in the harness's {WHERE} step")


def _import_missing(*_args, **_kwargs):
    sys.modules["ncu_report"] = None  # type: ignore[assignment] - how Python spells "not there"
    import ncu_report  # noqa: F401


WHERE = sys.argv[1]
if WHERE == "build":
    worker._build = _raise
else:
    check.gpu_problem = lambda settings: None  # a CPU machine passes for a GPU one here
    check.run_check = _import_missing if WHERE == "missing-module" else _raise

if __name__ == "__main__":
    sys.exit(worker.main())
