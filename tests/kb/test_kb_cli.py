"""`kernelblaster kb ...` end to end through the real entry point."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from kernelblaster.cli import main
from kernelblaster.kb.store import KnowledgeBase
from tests.kb.kb_helpers import make_attempt


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_path_follows_the_environment(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELBLASTER_KB", str(tmp_path / "env.sqlite3"))
    monkeypatch.chdir(tmp_path)
    assert _run(capsys, "kb", "path") == (0, f"{tmp_path / 'env.sqlite3'}\n", "")
    assert _run(capsys, "kb", "--kb", "x.sqlite3", "path")[1] == "x.sqlite3\n"


def test_stats_show_export_merge_import(capsys, monkeypatch, tmp_path, new_location):
    monkeypatch.chdir(tmp_path)
    mine, theirs = new_location("mine"), new_location("theirs")
    with KnowledgeBase.open(mine) as kb:
        kb.record(make_attempt(measured_speedup=1.8, prompt_tokens=900, completion_tokens=300))
        kb.record(make_attempt(outcome="wrong_result"))
        kb.add_note("sm_90", "memory.dram", "coalesce_global_access", "use a smem transpose")
    with KnowledgeBase.open(theirs) as kb:
        kb.record(make_attempt(arch="sm_80", technique="vectorized_loads", measured_speedup=1.2))

    code, out, _ = _run(capsys, "kb", "--kb", str(mine), "stats", "--json")
    stats = json.loads(out)
    assert code == 0 and stats["attempts"] == 2
    assert stats["outcomes"] == {"success": 1, "wrong_result": 1}
    assert stats["prompt_tokens"] == 900 and stats["notes"] == 1
    code, out, _ = _run(capsys, "kb", "--kb", str(mine), "stats")
    assert "outcomes: success 1, wrong_result 1" in out

    code, out, _ = _run(capsys, "kb", "--kb", str(mine), "show")
    header, _rule, row = out.splitlines()[:3]
    assert header.split()[:4] == ["arch", "state", "technique", "tries"]
    assert row.split()[:7] == ["sm_90", "memory.dram", "coalesce_global_access", "2", "1", "0", "1"]
    assert "1.80x" in row
    code, out, _ = _run(capsys, "kb", "--kb", str(mine), "show", "--json")
    view = json.loads(out)
    assert code == 0 and view["summary"]["attempts"] == 2
    (entry,) = view["entries"]
    assert entry["technique"] == "coalesce_global_access" and entry["attempts"] == 2
    assert entry["title"] == "Coalesce global memory accesses" and entry["category"] == "memory"
    assert entry["notes"] == ["use a smem transpose"]
    # the failed attempt has no measurement; the verified one is plotted against its prediction
    assert [(m["predicted_speedup"], m["measured_speedup"]) for m in entry["measurements"]] == [
        (1.45, 1.8)
    ]
    assert [a["outcome"] for a in view["recent_attempts"]] == ["wrong_result", "success"]
    code, out, _ = _run(capsys, "kb", "--kb", str(mine), "show", "--json", "--arch", "sm_80")
    assert json.loads(out)["entries"] == [] and json.loads(out)["recent_attempts"] == []
    code, out, _ = _run(
        capsys,
        "kb",
        "--kb",
        str(mine),
        "show",
        "--arch",
        "sm_90",
        "--state",
        "memory.dram",
        "--json",
    )
    ranked = json.loads(out)
    coalesce = next(r for r in ranked if r["technique"] == "coalesce_global_access")
    assert coalesce["attempts"] == 2 and coalesce["notes"] == ["use a smem transpose"]
    code, out, _ = _run(
        capsys, "kb", "--kb", str(mine), "show", "--arch", "sm_90", "--state", "memory.dram"
    )
    assert out.startswith("ranking for memory.dram on sm_90") and "this_arch" in out

    exported = tmp_path / "theirs.json"
    code, out, _ = _run(capsys, "kb", "--kb", str(theirs), "export", str(exported))
    assert code == 0 and "exported 1 attempts" in out
    for _ in range(2):
        code, out, _ = _run(capsys, "kb", "--kb", str(mine), "merge", str(exported))
        assert code == 0
    assert "attempts already present: 1" in out
    with KnowledgeBase.open(mine) as kb:
        assert len(kb.attempts()) == 3

    code, _, err = _run(capsys, "kb", "--kb", str(mine), "import", str(exported))
    assert code == 1 and "already holds 3 attempts" in err
    fresh = new_location("fresh")
    if isinstance(fresh, Path):  # a file is created on purpose, never by a mistyped --kb
        assert _run(capsys, "kb", "init", str(fresh))[0] == 0
    code, out, _ = _run(capsys, "kb", "--kb", str(fresh), "import", str(exported))
    assert code == 0 and "attempts added: 1" in out


def test_errors_are_one_line_and_leave_files_alone(capsys, tmp_path):
    foreign = tmp_path / "other.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    code, out, err = _run(capsys, "kb", "--kb", str(foreign), "stats")
    assert code == 1 and out == ""
    assert err.startswith("kernelblaster kb: ") and "another application" in err
    code, _, err = _run(
        capsys, "kb", "--kb", str(tmp_path / "kb.sqlite3"), "merge", str(tmp_path / "nope.json")
    )
    assert code == 2 and "nope.json does not exist" in err


def test_kb_imports_no_agents_server_harness_or_torch():
    import subprocess
    import sys

    probe = (
        "import sys, kernelblaster.kb.cli, kernelblaster.kb.transfer, kernelblaster.kb.ranking;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch' or "
        "m.startswith(('kernelblaster.agents', 'kernelblaster.server', 'kernelblaster.harness'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
