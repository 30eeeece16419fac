"""The layers the README's Development section draws, held: harness's protocol and pure-analysis
modules load without torch, the LLM stack or the editor's code, in a fresh interpreter, because
every process (the server included) imports them; and nothing in harness/ or kb/ imports agents/
or server/ (one direction of dependency)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

PROTOCOL = [
    "worker_protocol",
    "optimize_protocol",
    "init_protocol",
    "records",
    "worker_client",
    "worker_failures",
]
ANALYSIS = [
    "ncu_reader",
    "ncu_metrics",
    "ncu_markup",
    "classify",
    "findings",
    "ptxas",
    "occupancy",
    "nvcc_output",
    "static_checks",
    "cuda_source",
    "reference_source",
]
HEAVY = ("torch", "openai", "pygls", "kernelblaster.agents", "kernelblaster.server")


@pytest.mark.parametrize("module", PROTOCOL + ANALYSIS)
def test_protocol_and_analysis_modules_load_without_torch_llm_or_editor_code(module):
    probe = (
        f"import sys, json; import kernelblaster.harness.{module}; "
        f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({HEAVY!r}))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert json.loads(done.stdout) == [], f"kernelblaster.harness.{module} loads them"


@pytest.mark.parametrize("package", ["harness", "kb"])
def test_harness_and_kb_never_import_agents_or_server(package):
    offenders = []
    for path in sorted((REPO / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            offenders += [
                f"{path.relative_to(REPO)}:{node.lineno} {name}"
                for name in names
                if name.startswith(("kernelblaster.agents", "kernelblaster.server"))
            ]
    assert offenders == []
