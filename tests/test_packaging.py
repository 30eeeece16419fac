"""A regular (non-editable) install works, also when run from the root of a checkout, where the
top-level `kernelblaster/` folder comes first on sys.path (it used to hide every subpackage),
and it ships the data files the code reads."""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.tests_paths import REPO


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


def _setuptools() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def _folder(package: str, package_dir: dict[str, str]) -> str:
    """The repository folder of `package` under pyproject's package-dir mapping."""
    root = max((p for p in package_dir if package == p or package.startswith(p + ".")), key=len)
    rest = package[len(root) :].lstrip(".").replace(".", "/")
    return "/".join(part for part in (package_dir[root], rest) if part)


@pytest.fixture(scope="module")
def tracked() -> set[str]:
    done = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"not a git checkout: {done.stderr.strip()}")
    return set(done.stdout.splitlines())


def test_every_listed_package_has_an_init_tracked_by_git(tracked):
    """A package without a tracked __init__.py (an ignored folder: `build/` once hid
    harness/build/) imports only as a namespace package, and a clone lacks what it left out."""
    setuptools = _setuptools()
    missing = [
        package
        for package in setuptools["packages"]
        if f"{_folder(package, setuptools['package-dir'])}/__init__.py" not in tracked
    ]
    assert missing == []


def test_every_folder_of_modules_is_a_listed_package(tracked):
    """A regular install ships only the listed packages: a new room must be listed."""
    setuptools = _setuptools()
    listed = {_folder(package, setuptools["package-dir"]) for package in setuptools["packages"]}
    roots = set(setuptools["package-dir"].values())
    folders = {
        str(Path(path).parent)
        for path in tracked
        if path.endswith(".py") and str(Path(path).parts[0]) in roots
    }
    assert folders - listed == set()


def test_every_package_data_pattern_matches_a_tracked_file(tracked):
    setuptools = _setuptools()
    for package, patterns in setuptools["package-data"].items():
        folder = _folder(package, setuptools["package-dir"])
        for pattern in patterns:
            assert any(fnmatch.fnmatch(path, f"{folder}/{pattern}") for path in tracked), (
                f"{package}: {pattern} matches no file in {folder}/"
            )
