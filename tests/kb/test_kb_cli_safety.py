"""No `kb` command destroys a KB or ends in a traceback: `export` never writes over the KB itself
(nor its WAL, nor through a link) and over another file only with --force; a mistyped --kb is
an error, not a new empty KB; a repository's configuration can't stop a `kb` command with
settings `kb` doesn't use; unreadable and read-only files are one line saying what to do."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kernelblaster.cli import main
from kernelblaster.kb.store import KnowledgeBase
from tests.kb.kb_helpers import make_attempt


@pytest.fixture(autouse=True)
def no_kb_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("KERNELBLASTER_KB", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config-home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data-home"))


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def learned(tmp_path) -> Path:
    path = tmp_path / "kb.sqlite3"
    with KnowledgeBase.open(path) as kb:
        kb.record(make_attempt(measured_speedup=1.5))
    return path


def _attempts(path: Path) -> int:
    with KnowledgeBase.open(path) as kb:
        return len(kb.attempts())


@pytest.mark.parametrize("force", [[], ["--force"]])
@pytest.mark.parametrize(
    "name", ["kb.sqlite3", "kb.sqlite3-wal", "link.json", "./sub/../kb.sqlite3"]
)
def test_export_never_writes_over_the_kb_itself(capsys, tmp_path, learned, name, force):
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.json").symlink_to(learned)
    before = learned.read_bytes()
    code, _, err = _run(capsys, "kb", "--kb", str(learned), "export", str(tmp_path / name), *force)
    assert code == 2 and "is the knowledge base being exported" in err
    assert learned.read_bytes() == before and _attempts(learned) == 1


def test_export_replaces_an_existing_file_only_with_force(capsys, tmp_path, learned):
    mine = tmp_path / "notes.json"
    mine.write_text("my notes")
    code, _, err = _run(capsys, "kb", "--kb", str(learned), "export", str(mine))
    assert code == 2 and "exists; pass --force" in err and mine.read_text() == "my notes"
    assert _run(capsys, "kb", "--kb", str(learned), "export", str(mine), "--force")[0] == 0
    assert '"attempts"' in mine.read_text()


def test_export_to_a_folder_or_into_a_missing_folder_says_what_to_do(capsys, tmp_path, learned):
    code, _, err = _run(capsys, "kb", "--kb", str(learned), "export", str(tmp_path))
    assert code == 2 and "is a folder; name the file to write" in err
    code, _, err = _run(capsys, "kb", "--kb", str(learned), "export", str(tmp_path / "no/x.json"))
    assert code == 2 and "does not exist; create it first" in err
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("command", [["stats"], ["show"], ["export", "out.json"], ["sync"]])
def test_a_mistyped_kb_is_an_error_not_a_new_kb(capsys, tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    typo = tmp_path / "kb.sqlte3"
    code, _, err = _run(capsys, "kb", "--kb", str(typo), *command)
    assert code in (1, 2) and err.count("\n") == 1
    if command != ["sync"]:  # sync names no file: it says a team KB is a URL
        assert code == 2 and f"`kernelblaster kb init {typo}` creates one" in err
    assert not typo.exists() and not (tmp_path / "out.json").exists()


def test_kb_init_creates_a_kb_once(capsys, tmp_path):
    path = tmp_path / "team.sqlite3"
    code, out, _ = _run(capsys, "kb", "init", str(path))
    assert code == 0 and "created" in out and path.is_file()
    assert _run(capsys, "kb", "--kb", str(path), "stats")[0] == 0
    code, _, err = _run(capsys, "kb", "init", str(path))
    assert code == 2 and "already exists" in err


def test_kb_commands_ignore_the_repository_settings_they_do_not_use(
    capsys, tmp_path, monkeypatch, learned
):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "kernelblaster.toml").write_text(
        'nvcc = "/tmp/evil-nvcc"\nnvcc_flags = ["-run"]\nrollouts = "many"\n'
    )
    monkeypatch.chdir(repo)
    code, out, err = _run(capsys, "kb", "--kb", str(learned), "stats")
    assert code == 0 and "attempts: 1" in out, err
    # the one setting kb reads still needs trust from a repository's file
    (repo / "kernelblaster.toml").write_text(f'kb_path = "{learned}"\n')
    code, _, err = _run(capsys, "kb", "stats")
    assert code == 2 and "kb_path" in err and "kernelblaster trust" in err


def test_an_unreadable_kb_is_one_line(capsys, learned, monkeypatch):
    # CI runs as root, whom permissions don't stop: the refusal is made to happen
    real_open = Path.open

    def refusing_open(self, *args, **kwargs):
        if self == learned:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refusing_open)
    code, out, err = _run(capsys, "kb", "--kb", str(learned), "stats")
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "can't be read (Permission denied)" in err and "readable" in err


@pytest.mark.skipif(shutil.which("chattr") is None, reason="needs chattr (e2fsprogs)")
def test_merging_into_a_read_only_kb_is_one_line(capsys, tmp_path, learned):
    exported = tmp_path / "theirs.json"
    assert _run(capsys, "kb", "--kb", str(learned), "export", str(exported))[0] == 0
    # immutable: read-only even for root, which CI runs as
    if subprocess.run(["chattr", "+i", str(learned)], check=False).returncode != 0:
        pytest.skip("this filesystem has no immutable attribute")
    try:
        code, _, err = _run(capsys, "kb", "--kb", str(learned), "merge", str(exported))
    finally:
        subprocess.run(["chattr", "-i", str(learned)], check=True)
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert "can't be opened for writing" in err and "writable" in err
