"""A regular (non-editable) install works, also when run from the root of a checkout, where the
top-level `kernelblaster/` folder comes first on sys.path (it used to hide every subpackage),
and it ships the data files the code reads."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from tests_paths import REPO


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    target = tmp_path_factory.mktemp("site")
    command = [sys.executable, "-m", "pip", "install", "-q", "--target", str(target)]
    subprocess.run([*command, str(REPO)], check=True, timeout=600, capture_output=True)
    return target


def _python(code: str, site, cwd) -> subprocess.CompletedProcess:
    # -S: not this venv's site-packages (its editable install would answer every import);
    # only the regular install in `site`.
    env = {**os.environ, "PYTHONPATH": str(site)}
    command = [sys.executable, "-S", "-c", code]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("where", ["checkout root", "elsewhere"])
def test_every_subpackage_imports(installed, tmp_path, where):
    cwd = REPO if where == "checkout root" else tmp_path
    code = (
        "import kernelblaster.agents.loop.run, kernelblaster.harness.worker.serve, "
        "kernelblaster.kb.store, "
        "kernelblaster.server.app; from kernelblaster.kb.catalog import load_catalog; "
        "from kernelblaster.agents.llm.prompting import load_template; load_template('lowering'); "
        "from importlib.resources import files; "
        "assert files('kernelblaster.harness.native').joinpath('native_driver.cpp').is_file(); "
        "assert files('kernelblaster.harness.check').joinpath('cupti_counters.cpp').is_file(); "
        "import kernelblaster.harness.worker.__main__; "  # `python -m kernelblaster.harness.worker`
        "print(len(load_catalog().technique))"
    )
    done = _python(code, installed, cwd)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) >= 30
