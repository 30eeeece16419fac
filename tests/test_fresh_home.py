"""The `kernelblaster` command as a new user first runs it: the installed command, in a fresh
process, with HOME and the XDG cache, data and config folders pointing at folders that do not
exist yet (issue 42: no test machine lacked the cache's work folder, so nothing saw it go
missing). Every folder the run writes to is made, the results come out as on a warm machine,
and a folder that can't be made is one clear setup error naming it and the fix. CPU only: what
needs a GPU says so (a CPU-only torch here), and that too must be that error, not a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.openai_server import OpenAITestServer, reply
from tests.tests_paths import EXAMPLES

KERNELBLASTER = shutil.which("kernelblaster", path=str(Path(sys.executable).parent))
TIMEOUT_S = 300


class FreshHome:
    """A home that does not exist yet, and the command's environment pointing at it."""

    def __init__(self, root: Path) -> None:
        self.home = root / "home"  # made by nobody: the run must make what it needs
        self.cache = self.home / ".cache"
        self.data = self.home / ".local" / "share"
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("KERNELBLASTER_", "XDG_"))
        }
        self.env.update(
            HOME=str(self.home),
            XDG_CACHE_HOME=str(self.cache),
            XDG_DATA_HOME=str(self.data),
            XDG_CONFIG_HOME=str(self.home / ".config"),
        )

    def run(self, *args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
        assert KERNELBLASTER is not None, "kernelblaster is not installed in this venv"
        return subprocess.run(
            [KERNELBLASTER, *args],
            env={**self.env, **env},
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )


@pytest.fixture
def fresh(tmp_path: Path) -> FreshHome:
    made = FreshHome(tmp_path)
    assert not made.home.exists()
    return made


def no_traceback(done: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in done.stdout + done.stderr, done.stderr


@pytest.mark.nvcc
def test_build_on_a_fresh_home_makes_the_cache_and_builds(fresh):
    done = fresh.run("build", str(EXAMPLES / "softmax.cu"), "--arch", "sm_90", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["ok"] and result["resources"][0]["registers"] > 0
    cache = fresh.cache / "kernelblaster"
    assert (cache / "builds").is_dir() and (cache / "build-locks").is_dir()
    assert result["artifact"].startswith(str(cache / "builds"))
    # a second build is the cache's
    again = json.loads(fresh.run("build", str(EXAMPLES / "softmax.cu"), "--arch", "sm_90",
                                 "--json").stdout)  # fmt: skip
    assert again["cached"] and again["artifact"] == result["artifact"]


@pytest.mark.nvcc
def test_check_on_a_fresh_home_without_a_gpu_says_what_is_missing(fresh):
    done = fresh.run("check", str(EXAMPLES / "softmax.cu"), "--arch", "sm_90", "--json")
    no_traceback(done)
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]
    assert error["kind"] in ("torch_missing", "no_gpu", "no_driver") and error["fix"]
    assert (fresh.cache / "kernelblaster" / "builds").is_dir()


@pytest.mark.nvcc
def test_a_cache_folder_that_cannot_be_made_is_one_setup_error(fresh):
    """XDG_CACHE_HOME is a file: the worker answers with one setup_path error naming it and
    what to do (never a crash, never the kernel's build failure)."""
    fresh.home.mkdir()
    fresh.cache.write_text("a file where the cache should be")
    done = fresh.run("build", str(EXAMPLES / "softmax.cu"), "--arch", "sm_90", "--json")
    no_traceback(done)
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]
    assert error["kind"] == "setup_path"
    folder = fresh.cache / "kernelblaster"
    assert error["message"].startswith(f"KernelBlaster cannot use the folder {folder}/")
    assert error["message"].endswith(f": {fresh.cache} is a file, not a folder.")
    assert error["fix"].startswith(f"Remove {fresh.cache}, or: Set cache_dir")
    # the same in words, without --json
    words = fresh.run("build", str(EXAMPLES / "softmax.cu"), "--arch", "sm_90")
    assert "error (setup_path): KernelBlaster cannot use the folder" in words.stdout


def test_the_kb_on_a_fresh_home_is_made_in_the_data_folder(fresh):
    done = fresh.run("kb", "stats")
    no_traceback(done)
    assert done.returncode == 0, done.stderr
    assert (fresh.data / "kernelblaster" / "kb.sqlite3").is_file()
    path = fresh.run("kb", "path")
    assert path.stdout.strip() == str(fresh.data / "kernelblaster" / "kb.sqlite3")


def test_a_kb_folder_that_cannot_be_made_says_which_and_how(fresh):
    fresh.home.mkdir()
    (fresh.home / ".local").write_text("a file in the way")
    done = fresh.run("kb", "stats")
    no_traceback(done)
    assert done.returncode != 0
    assert f"{fresh.home / '.local'} is a file, not a folder" in done.stderr
    assert "kb_path" in done.stderr and "XDG_DATA_HOME" in done.stderr


def test_init_without_a_gpu_on_a_fresh_home(fresh, tmp_path):
    """`init` from a PyTorch module on a fresh home, against a scripted endpoint: the scratch
    folder its candidates are checked in is made, the first reply builds, and its check says
    what this machine lacks (no kernel is written: it was never verified)."""
    problem = tmp_path / "problem" / "relu.py"
    problem.parent.mkdir()
    shutil.copyfile(EXAMPLES / "relu.py", problem)
    kernel = (EXAMPLES / "relu.cu").read_text()
    with OpenAITestServer(responder=lambda request: reply(f"```cuda\n{kernel}```")) as server:
        done = fresh.run(
            "init",
            str(problem),
            "--attempts",
            "1",
            "--json",
            KERNELBLASTER_LLM_BASE_URL=server.base_url,
            KERNELBLASTER_LLM_MODEL="test-model",
            OPENAI_API_KEY="sk-test",
        )
    no_traceback(done)
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert result["written"] is None and not (problem.parent / "relu.cu").exists()
    assert "PyTorch" in result["error"] or "GPU" in result["error"]
    assert (fresh.cache / "kernelblaster" / "init").is_dir()


def test_init_of_a_file_that_is_no_module_is_a_usage_error(fresh, tmp_path):
    missing = fresh.run("init", str(tmp_path / "nowhere.py"))
    assert missing.returncode == 2 and "error:" in missing.stderr
    not_python = tmp_path / "k.cu"
    not_python.write_text("__global__ void k() {}\n")
    done = fresh.run("init", str(not_python))
    assert done.returncode == 2 and "is not a Python file" in done.stderr
    no_traceback(done)
