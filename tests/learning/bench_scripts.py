"""The bench scripts the learning tests run: bench/ is not a package, so they are imported by
path (a module of its own name, as `import conftest` would find another folder's)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def load_script(relative: str) -> ModuleType:
    """A bench script, imported by path (bench/ is not a package)."""
    path = REPO / relative
    name = "bench_" + path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
