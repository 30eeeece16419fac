"""The KB from the command line when things are wrong: a folder or file that can't be written,
an unknown state, a reader that closes the pipe, an imported runaway note. Each gets one line
saying what and how to fix, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from kernelblaster.kb.records import MAX_NOTE_CHARS
from kernelblaster.kb.store import KnowledgeBase


def _kb(*args: str, kb_path, stdout=subprocess.PIPE) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "KERNELBLASTER_KB"}
    command = [sys.executable, "-m", "kernelblaster", "kb", "--kb", str(kb_path), *args]
    return subprocess.Popen(command, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True)


def _run(*args: str, kb_path) -> tuple[int, str, str]:
    process = _kb(*args, kb_path=kb_path)
    out, err = process.communicate(timeout=60)
    return process.returncode, out, err


def _new_kb(path):
    KnowledgeBase.open(path).close()
    return path


def test_a_kb_folder_that_cannot_be_created_is_one_clear_line(tmp_path):
    # the personal KB is the one made on first use: its folder is in the data dir
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the KB's folder should be")
    env = {k: v for k, v in os.environ.items() if k != "KERNELBLASTER_KB"}
    command = [sys.executable, "-m", "kernelblaster", "kb", "stats"]
    done = subprocess.run(
        command, env={**env, "XDG_DATA_HOME": str(blocker)}, capture_output=True, text=True
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"Cannot use the folder {blocker / 'kernelblaster'}: {blocker} is a file" in done.stderr
    assert "KERNELBLASTER_KB" in done.stderr


@pytest.mark.skipif(shutil.which("chattr") is None, reason="needs chattr (e2fsprogs)")
def test_a_read_only_kb_is_one_clear_line(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "kb.sqlite3"
    KnowledgeBase.open(path).close()
    # immutable: read-only even for root, which CI runs as
    if subprocess.run(["chattr", "+i", str(path), str(folder)], check=False).returncode != 0:
        pytest.skip("this filesystem has no immutable attribute")
    try:
        code, _, err = _run("stats", kb_path=path)
    finally:
        subprocess.run(["chattr", "-i", str(path), str(folder)], check=True)
    assert code == 1 and "Traceback" not in err
    assert "can't be opened for writing" in err and "writable" in err


def test_an_unknown_state_is_refused_with_the_known_ones(tmp_path):
    code, out, err = _run(
        "show", "--state", "nonexistent", "--arch", "sm_90", kb_path=_new_kb(tmp_path / "k")
    )
    assert code == 2 and out == ""
    assert "unknown state 'nonexistent'" in err and "memory.dram" in err


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(tmp_path):
    kb_path = _new_kb(tmp_path / "k")
    process = _kb("show", "--state", "memory.dram", "--arch", "sm_90", kb_path=kb_path)
    process.stdout.close()  # as `| head -0` would, before anything is written
    _, err = process.communicate(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err
    assert process.returncode == 141


def test_an_imported_runaway_note_is_clipped_like_our_own(tmp_path):
    source = tmp_path / "source.sqlite3"
    with KnowledgeBase.open(source) as kb:
        kb.add_note("sm_90", "memory.dram", "coalesce_global_access", "a short note")
    export = tmp_path / "export.json"
    assert _run("export", str(export), kb_path=source)[0] == 0
    data = json.loads(export.read_text())
    data["notes"][0]["text"] = "z" * 1_000_000
    export.write_text(json.dumps(data))

    target = _new_kb(tmp_path / "target.sqlite3")
    assert _run("import", str(export), kb_path=target)[0] == 0
    with KnowledgeBase.open(target) as kb:
        (note,) = kb.note_history()
    assert len(note.text) == MAX_NOTE_CHARS and note.text.endswith("…")
