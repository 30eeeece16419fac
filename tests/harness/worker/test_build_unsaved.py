"""Building a source's unsaved text as that file (BuildSpec.source_text), with the real nvcc:
includes from the file's folder, errors and the line table naming the file, the entry stored
under the file's key so that saving the text is a hit; one nvcc for two builds of the same
inputs at once; scratch directories of killed builds removed; the worker's refusals."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import msgspec
import pytest

from kernelblaster.harness.build.nvcc import BuildSpec, build
from kernelblaster.harness.protocol.records import BuildResult
from kernelblaster.settings import Settings

SM90 = Settings(arch="sm_90")

SCALE = Path(__file__).resolve().parents[2] / "fixtures" / "cuda" / "scale_with_header"
HEADER = (SCALE / "scale.cuh").read_text()  # scaled(v): FACTOR * v
KERNEL = (SCALE / "scale.cu").read_text()  # FACTOR defined, then scale.cuh included
EDITED = KERNEL.replace("#define FACTOR 2.0f", "#define FACTOR 3.0f")


@pytest.fixture
def source(tmp_path: Path) -> Path:
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "scale.cuh").write_text(HEADER)
    path = folder / "scale.cu"
    path.write_text(KERNEL)
    return path


def build_of(
    source: Path, cache: Path, text: str | None = None, flags: tuple[str, ...] = (), **settings
) -> BuildResult:
    spec = BuildSpec(source=str(source), output_kind="shared", source_text=text, flags=[*flags])
    return build(spec, msgspec.structs.replace(SM90, **settings), cache_dir=cache)


@pytest.mark.nvcc
def test_unsaved_text_builds_as_the_file_and_saving_it_is_a_cache_hit(source, tmp_path):
    cache = tmp_path / "cache"
    ahead = build_of(source, cache, EDITED)
    assert ahead.ok and not ahead.cached and ahead.source == str(source)
    assert source.read_text() == KERNEL  # the user's file is never written
    entry = Path(ahead.artifact).parent
    deps = json.loads((entry / "deps.json").read_text())
    assert str(source) in deps and str(source.parent / "scale.cuh") in deps
    assert not [dep for dep in deps if "build-scratch" in dep]  # the copy is not a dependency
    assert list((cache / "build-scratch").iterdir()) == []
    again = build_of(source, cache, EDITED)  # the same edit again (an undo, then a redo)
    assert again.cached and again.key == ahead.key

    saved_before = build_of(source, cache)  # the file still holds the old text: another entry
    assert saved_before.ok and not saved_before.cached and saved_before.key != ahead.key

    source.write_text(EDITED)
    saved = build_of(source, cache)
    assert saved.ok and saved.cached
    assert (saved.key, saved.artifact) == (ahead.key, ahead.artifact)

    # the header is a dependency of the entry: editing it misses
    (source.parent / "scale.cuh").write_text(HEADER.replace("FACTOR * v", "FACTOR * v + 1.0f"))
    assert not build_of(source, cache).cached


@pytest.mark.nvcc
def test_the_line_table_names_the_file_and_the_texts_lines(source, tmp_path):
    """ncu's source view reads -lineinfo's table; the PTX kept in the artifact (uncompressed
    here, to be read) holds it: files by index, then `.loc <file> <line>`."""
    text = "// a new first line\n" + EDITED  # the kernel's body on lines 6-9
    result = build_of(source, tmp_path / "cache", text, flags=("-no-compress",))
    assert result.ok
    artifact = Path(result.artifact).read_bytes().decode("latin-1")
    files = dict(re.findall(r'\.file\s+(\d+)\s+"([^"]*)"', artifact))
    assert set(files.values()) == {str(source), str(source.parent / "scale.cuh")}
    (index,) = [number for number, name in files.items() if name == str(source)]
    lines = {int(line) for line in re.findall(rf"\.loc\s+{index}\s+(\d+)\s", artifact)}
    assert lines == {6, 7, 8, 9}


@pytest.mark.nvcc
def test_errors_in_unsaved_text_name_the_file_and_its_lines(source, tmp_path):
    broken = EDITED.replace("scaled(x[i]);", "scaled(x[i]) * undefined_factor;")
    result = build_of(source, tmp_path / "cache", "// a new first line\n" + broken)
    assert not result.ok and result.error.kind == "build_failed"
    (error,) = [d for d in result.diagnostics if d.severity == "error"]
    assert (error.file, error.line) == (str(source), 8)  # line 7 of `broken`, one line below
    assert error.message == 'identifier "undefined_factor" is undefined'


@pytest.mark.nvcc
def test_a_quoted_include_is_searched_in_the_files_folder_first(source, tmp_path):
    """An `-I` folder holding a header of the same name comes after the file's own folder, for
    the unsaved text as for the file."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "scale.cuh").write_text("#error the -I folder's header was included\n")
    result = build_of(source, tmp_path / "cache", EDITED, flags=(f"-I{other}",))
    assert result.ok, result.diagnostics


@pytest.mark.nvcc
def test_two_builds_of_the_same_inputs_at_once_run_nvcc_once(source, tmp_path):
    log = tmp_path / "compiles.log"
    nvcc = tmp_path / "nvcc"
    nvcc.write_text(
        f'#!/bin/sh\ncase "$*" in *--version*) ;; *) echo compile >> "{log}" ;; esac\n'
        f'exec "{shutil.which("nvcc")}" "$@"\n'
    )
    nvcc.chmod(0o755)
    results: list[BuildResult] = []

    def run() -> None:
        results.append(build_of(source, tmp_path / "cache", EDITED, nvcc=str(nvcc)))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert log.read_text().splitlines() == ["compile"]
    assert sorted(result.cached for result in results) == [False, True]
    assert results[0].artifact == results[1].artifact


@pytest.mark.nvcc
def test_the_scratch_of_a_killed_build_is_removed_by_the_next(source, tmp_path):
    cache = tmp_path / "cache"
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    abandoned = cache / "build-scratch" / f"{ended.stdout.strip()}-killed"
    (abandoned / "keep").mkdir(parents=True)
    assert build_of(source, cache, EDITED).ok
    assert not abandoned.exists()


def run_worker(request: dict) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "kernelblaster.harness.worker"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


def test_the_worker_builds_unsaved_text_only(source):
    checked = run_worker(
        {"task": "check", "source": str(source), "unsaved_text": EDITED, "settings": {}}
    )
    assert checked["build"] is None
    assert checked["error"]["kind"] == "bad_target"
    assert "built only (task 'build')" in checked["error"]["message"]
    both = run_worker(
        {
            "task": "build",
            "source": str(source),
            "unsaved_text": EDITED,
            "source_text": EDITED,
            "settings": {},
        }
    )
    assert "not both" in both["error"]["message"]
