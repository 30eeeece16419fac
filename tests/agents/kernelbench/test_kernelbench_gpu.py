"""`init` and `bench kernelbench` with the real harness on a GPU, against the scripted
OpenAI-compatible server: a wrong first reply is fed back with the harness's mismatch and the
second is verified and written; a run records a verified problem with its speedups and a
degenerate reference as such."""

from __future__ import annotations

import json
import runpy
import shutil
from pathlib import Path

import pytest

from bench import openai_server
from bench.openai_server import reply
from kernelblaster.cli import main

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[3]
PROBLEMS = REPO / "bench" / "kernelbench"
ANSWERS = PROBLEMS / "answers"
RELU = ANSWERS / "19_ReLU.init.cu"
DEGENERATE = '''"""ReLU of inputs in [-2, -1): the output is all zeros, on every input scale
the verification tries."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


batch_size = 256
dim = 1024


def get_inputs():
    return [torch.rand(batch_size, dim) - 2.0]


def get_init_inputs():
    return []
'''


@pytest.fixture
def endpoint(monkeypatch, tmp_path):
    def use(server):
        monkeypatch.setenv("KERNELBLASTER_LLM_BASE_URL", server.base_url)
        monkeypatch.setenv("KERNELBLASTER_LLM_MODEL", "test-model")
        monkeypatch.setenv("KERNELBLASTER_CACHE_DIR", str(tmp_path / "cache"))

    return use


def test_init_feeds_a_wrong_result_back_and_writes_the_verified_kernel(endpoint, tmp_path, capsys):
    problem = tmp_path / "19_ReLU.py"
    shutil.copy(PROBLEMS / "level1" / "19_ReLU.py", problem)
    right = RELU.read_text()
    wrong = right.replace("v > 0.0f ? v : 0.0f", "v > 0.5f ? v : 0.0f")
    with openai_server.OpenAITestServer() as server:
        endpoint(server)
        server.push(reply(f"```cuda\n{wrong}```"), reply(f"```cuda\n{right}```"))
        assert main(["init", str(problem), "--json"]) == 0
        feedback = server.chat_requests[1].messages[-1]["content"]
    result = json.loads(capsys.readouterr().out)
    assert "computes a different result than the reference" in feedback
    assert "differs in" in feedback
    assert result["written"] == str(problem.with_suffix(".cu"))
    assert problem.with_suffix(".cu").read_text() == right
    assert result["attempts"] == 2 and result["prompt_tokens"] == 200
    assert result["check"]["verify"]["ok"] and result["check"]["timing"]["median_ms"] > 0
    assert result["check"]["eager"] is not None


def test_a_run_verifies_optimizes_and_reports_a_degenerate_reference(endpoint, tmp_path, capsys):
    level = tmp_path / "level1"
    level.mkdir()
    shutil.copy(PROBLEMS / "level1" / "19_ReLU.py", level)
    (level / "99_Degenerate.py").write_text(DEGENERATE)
    answers = tmp_path / "answers"
    shutil.copytree(ANSWERS, answers)
    shutil.copy(RELU, answers / "99_Degenerate.init.cu")
    scripted = runpy.run_path(str(REPO / "bench" / "kernelbench_mechanics.py"))
    results = tmp_path / "results"
    with openai_server.OpenAITestServer(
        responder=scripted["responder"](openai_server, answers)
    ) as server:
        endpoint(server)
        code = main(
            [
                "bench", "kernelbench", str(level), "--mechanics", "--rollouts", "1",
                "--depth", "1", "--results", str(results), "--work", str(tmp_path / "work"),
                "--kb", str(tmp_path / "kb.sqlite3"), "--seed", "1",
            ]
        )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    (path,) = results.glob("kernelbench-*-level1.json")
    run = json.loads(path.read_text())
    by_name = {p["problem"]: p for p in run["problems"]}
    relu = by_name["19_ReLU"]
    assert relu["status"] == "verified", relu["detail"]
    assert relu["speedup"] > 0 and relu["baseline"] in ("eager", "torch.compile")
    assert relu["steps"] == 1 and relu["prompt_tokens"] > 0
    degenerate = by_name["99_Degenerate"]
    assert degenerate["status"] == "degenerate_reference", degenerate["detail"]
    assert run["summary"]["verified"] == 1 and run["summary"]["problems"] == 2
    report = (results / path.name.replace("-level1.json", ".md")).read_text()
    assert "Mechanics run, not a model's performance" in report
    assert "[2/2] level1/99_Degenerate: degenerate_reference" in out
