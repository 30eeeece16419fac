"""The bench scripts the tests run: bench/ is not a package, so they are imported by path,
through bench/common.py's loader (the names the bench scripts load each other by)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
from common import bench_module  # noqa: E402 - bench/ on the path first


def load_script(relative: str) -> ModuleType:
    """A bench script by its path from the repository ("bench/learning.py")."""
    return bench_module(str(Path(relative).relative_to("bench")))
