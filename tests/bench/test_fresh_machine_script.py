"""bench/fresh_machine.py, the acceptance run of a bare GPU machine, run here on this venv
(`--installed`) without a GPU: the parts that need none (the build into a fresh home, the
scripted endpoint, the language server's answer on a save, the results file and its copy to
$OUT, the table, the exit status) work, and each step that needs a GPU fails saying why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STEPS = [
    "install", "build", "check", "check_sanitize", "optimize", "bench_kernelbench", "lsp_save",
    "init",
]  # fmt: skip

pytestmark = pytest.mark.nvcc


@pytest.mark.skipif(
    pytest.importorskip("torch").cuda.is_available(), reason="the GPU run is the real one"
)
def test_the_acceptance_run_without_a_gpu_says_what_failed_and_why(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "OUT": str(out)}
    done = subprocess.run(
        [sys.executable, "-m", "bench.fresh_machine", "--installed", sys.prefix,
         "--budget-s", "240", "--results", str(tmp_path / "results"),
         "--scratch", str(tmp_path)],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    (written,) = (tmp_path / "results").glob("fresh-machine-*.json")
    result = json.loads(written.read_text())
    assert set(result) == {"gpu", "home_empty", "steps", "optimize"}
    assert result["home_empty"] is True
    assert [s["name"] for s in result["steps"]] == STEPS
    for step in result["steps"]:
        assert set(step) >= {"name", "ok", "seconds", "detail"} and step["detail"]
    steps = {s["name"]: s for s in result["steps"]}
    assert steps["install"] == {**steps["install"], "ok": False}
    assert steps["install"]["detail"].startswith("not run: --installed")
    assert steps["build"]["ok"] and "registers" in steps["build"]["detail"]
    assert "/home/.cache/kernelblaster/builds" in steps["build"]["detail"]
    # without a GPU: said by the harness, the server's setup diagnostic, the bench's refusal
    assert "CPU-only build" in steps["check"]["detail"]
    assert steps["lsp_save"]["detail"].startswith("setup: ")
    assert "KernelBench needs a GPU" in steps["bench_kernelbench"]["detail"]
    assert result["optimize"] == {"improved": False, "speedup": None, "sanitizer": None}
    # the table comes last; the file and the log went to $OUT
    table = done.stdout.strip().splitlines()[-len(STEPS) - 1 :]
    assert table[0].split() == ["step", "ok", "s", "detail"]
    assert [row.split()[0:2] for row in table[1:3]] == [["install", "FAIL"], ["build", "ok"]]
    assert sorted(p.name for p in out.iterdir()) == sorted([written.name, "fresh-machine.log"])
