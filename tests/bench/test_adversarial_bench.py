"""The adversarial suite's preparation and its bench's record, without a GPU: the builds made
ahead run at once, through real harness workers and nvcc, and are the ones the cases' checks
then find in the build cache; the baselines measured apart are timed only once the builds are
done; each check runs in a spare worker started beside the one before and told to wait for the
GPU; every entry names the verifier and suite it ran on, and a resume onto another one is
refused with a message that says why and what to do."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import psutil
import pytest

from bench import adversarial
from bench.adversarial_suite import (
    BY_NAME,
    CASES,
    builds_of,
    case_request,
    prepare,
    run_case,
    write_kernelbench_cases,
)
from bench.common import files_digest, tree_files

REPO = Path(__file__).resolve().parents[2]
CPU_WORKER = REPO / "tests" / "harness" / "cpu_worker.py"

# A worker command run under a shell that logs each process's start and end with its pid and,
# for one told to wait for its turn on the GPU (the pipe in its environment: a baselines
# worker, a spare started beside a running worker), "gated"; the worker's parent is this
# shell, which it watches instead of the client (exit_with_parent)
_LOGGED = (
    'echo "start $$ ${KERNELBLASTER_GPU_FREE_FD:+gated} $(date +%s.%N)" >> "$0"; '
    'KERNELBLASTER_PARENT_PID=$$ "$@"; code=$?; echo "end $$ - $(date +%s.%N)" >> "$0"; '
    "exit $code"
)


def _intervals(log: Path) -> dict[int, tuple[str, float, float | None]]:
    """pid -> (kind, start, end) of every worker started, in the order their start lines were
    written (two started at once may write theirs in either order); kind "gated" or "free",
    end None for one killed (its shell with it)."""
    found: dict[int, tuple[str, float, float | None]] = {}
    for line in log.read_text().splitlines():
        event, pid, *kind, at = line.split()
        if event == "start":
            found[int(pid)] = (kind[0] if kind else "free", float(at), None)
        else:
            what, began, _ = found[int(pid)]
            found[int(pid)] = (what, began, float(at))
    return found


def test_each_build_is_made_once_and_the_kernelbench_extension_once_by_an_honest_case():
    built = builds_of(CASES)
    assert [c for c in built if c.form != "kernelbench"] == [
        c for c in CASES if c.form != "kernelbench"
    ]
    (kernelbench,) = [c for c in built if c.form == "kernelbench"]
    assert kernelbench.hack_class == "honest"
    assert builds_of([BY_NAME["kb_timer_patch"]]) == [BY_NAME["kb_timer_patch"]]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_case_is_built_ahead_with_the_settings_its_check_runs_with(case, tmp_path):
    built = case_request(case, "build", tmp_path / "kernelbench", tmp_path / "cache")
    checked = case_request(case, "check", tmp_path / "kernelbench", tmp_path / "cache")
    assert (built.task, checked.task) == ("build", "check")
    assert (built.source, built.reference, built.settings) == (
        checked.source,
        checked.reference,
        checked.settings,
    )
    # a case aimed at the baselines keeps a cache of its own: none measured by another case
    shared = case_request(BY_NAME["relu_good"], "check", tmp_path / "kb", tmp_path / "cache")
    own = built.settings.cache_dir != shared.settings.cache_dir
    assert own == case.fresh_cache


@pytest.mark.nvcc
def test_builds_run_at_once_baselines_after_them_and_the_checks_find_the_builds(tmp_path):
    kernelbench_dir, cache_dir, log = tmp_path / "kernelbench", tmp_path / "cache", tmp_path / "log"
    write_kernelbench_cases(kernelbench_dir)
    worker = ["sh", "-c", _LOGGED, str(log), sys.executable, str(CPU_WORKER), str(tmp_path)]
    cases = [BY_NAME[name] for name in ("relu_good", "partial_write", "side_stream_joined")]
    ahead = prepare(cases, kernelbench_dir, cache_dir, jobs=3, more={"worker_command": worker})

    assert all(r.build is not None and r.build.ok for r in ahead.builds.values()), ahead.builds
    assert sorted(ahead.builds) == sorted(c.name for c in cases)
    intervals = _intervals(log)
    builds = sorted((s, e) for kind, s, e in intervals.values() if kind == "free")
    assert len(builds) == 3
    assert any(later < end for (_, end), (later, _) in itertools.pairwise(builds)), builds
    # one reference, its baselines measured apart (torch.compile on the CPU), timed after
    (reference,) = ahead.baselines
    assert ahead.baseline_errors == {}
    (turn,) = [span for span in ahead.baselines[reference].spans if span.kind == "gpu"]
    assert turn.start >= ahead.builds_ended > max(end for _, end in builds) - 1.0
    assert (cache_dir / "baselines").is_dir() and list((cache_dir / "baselines").iterdir())

    for case in cases:  # the real worker, as the bench runs it: the build is the one made ahead
        response = run_case(case, kernelbench_dir, cache_dir)
        assert response.build is not None and response.build.cached, case.name
        assert response.build.key == ahead.builds[case.name].build.key


def _file(tmp_path: Path, **digests: str | None) -> Path:
    out = tmp_path / "adversarial.json"
    entry = {"name": "relu_good", "seconds": 9.0, "as_expected": True, "commit": "abc123"}
    out.write_text(json.dumps({"cases": [{**entry, **digests}]}))
    return out


def test_a_resume_onto_another_verifier_is_refused_and_leaves_the_file(tmp_path, capsys):
    code = adversarial.code_identity()
    out = _file(tmp_path, verifier="0" * 64, suite=code["suite"])
    before = out.read_bytes()
    assert adversarial.main(["--resume", "--out", str(out)]) == 2
    message = capsys.readouterr().err
    assert "refusing to resume" in message
    assert "1 of its 1 cases ran on verifier 000000000000" in message
    assert code["verifier"][:12] in message and "harness/ or kernelblaster/" in message
    assert "Run without --resume to start over" in message and "abc123" in message
    assert out.read_bytes() == before


def test_a_resume_onto_another_suite_or_an_unrecorded_verifier_is_refused(tmp_path, capsys):
    code = adversarial.code_identity()
    out = _file(tmp_path, verifier=code["verifier"], suite="1" * 64)
    assert adversarial.main(["--resume", "--out", str(out)]) == 2
    assert "ran on suite 111111111111" in capsys.readouterr().err
    out = _file(tmp_path)  # written before entries carried digests
    assert adversarial.main(["--resume", "--out", str(out)]) == 2
    assert "record no verifier and suite digest" in capsys.readouterr().err


def test_the_digest_follows_every_file_but_byte_code_and_not_where_the_tree_is(tmp_path):
    def tree(root: Path, text: str = "x = 1\n") -> str:
        (root / "check").mkdir(parents=True, exist_ok=True)
        (root / "check" / "verify.py").write_text(text)
        return files_digest(tree_files(root), root)

    first = tree(tmp_path / "a")
    assert tree(tmp_path / "b") == first  # the same files elsewhere
    (tmp_path / "b" / "check" / "__pycache__").mkdir()
    (tmp_path / "b" / "check" / "__pycache__" / "verify.cpython-312.pyc").write_bytes(b"\0")
    assert files_digest(tree_files(tmp_path / "b"), tmp_path / "b") == first
    assert tree(tmp_path / "c", "x = 2\n") != first  # an edit
    (tmp_path / "a" / "check" / "verify.py").rename(tmp_path / "a" / "check" / "gate.py")
    assert files_digest(tree_files(tmp_path / "a"), tmp_path / "a") != first
    (tmp_path / "d" / "check").mkdir(parents=True)
    (tmp_path / "d" / "check" / "verify.py").write_text("x = 1\n")
    (tmp_path / "d" / "check" / "extra.cu").write_text("")
    assert files_digest(tree_files(tmp_path / "d"), tmp_path / "d") != first


@pytest.mark.nvcc
def test_a_resume_runs_the_rest_on_the_same_verifier_into_one_file(tmp_path, capsys):
    out = tmp_path / "adversarial.json"
    adversarial.main(["--cases", "relu_good", "--jobs", "2", "--out", str(out)])  # CPU: no verdicts
    first = json.loads(out.read_text())["cases"][0]
    adversarial.main(["--resume", "--cases", "relu_good", "partial_write", "--out", str(out)])
    result = json.loads(out.read_text())
    code = adversarial.code_identity()
    assert [e["name"] for e in result["cases"]] == ["relu_good", "partial_write"]
    assert result["cases"][0] == first  # kept, not run again
    assert [run["cases"] for run in result["runs"]] == [1, 1]
    assert [e["run"] for e in result["cases"]] == [0, 1]
    assert {run["workers"] for run in result["runs"]} == {"spare, started beside the check before"}
    assert result["verifier"] == code["verifier"] and result["verifiers"] == {code["verifier"]: 2}
    assert result["suite"] == [code["suite"]]
    assert all(e["build_cached"] for e in result["cases"])  # each check's build made ahead
    assert len(result["not_run"]) == len(CASES) - 2
    assert "2 on verifier " + code["verifier"][:12] in capsys.readouterr().out


@pytest.mark.nvcc
def test_a_budget_stops_before_a_case_would_overrun_and_says_what_is_left(tmp_path, capsys):
    out = tmp_path / "adversarial.json"
    assert adversarial.main(["--cases", "relu_good", "--budget-s", "1", "--out", str(out)]) == 3
    result = json.loads(out.read_text())
    assert result["cases"] == [] and len(result["not_run"]) == len(CASES)
    assert "stopped by --budget-s" in capsys.readouterr().out


@pytest.mark.nvcc
@pytest.mark.parametrize("fresh", [False, True], ids=["spares", "fresh"])
def test_each_check_runs_in_a_spare_started_beside_the_one_before(fresh, tmp_path):
    """The bench's checks, through the real worker (stopped past the build on this GPU-less
    machine): by default each in a spare started beside the check before, told to wait for
    the GPU until that one has exited; with --fresh-workers each started when its check is.
    Every worker is gone once the checks are done, the spare left waiting included."""
    kernelbench_dir, cache_dir, log = tmp_path / "kernelbench", tmp_path / "cache", tmp_path / "log"
    worker = ["sh", "-c", _LOGGED, str(log), sys.executable, "-m", "kernelblaster.harness.worker"]
    cases = [BY_NAME[name] for name in ("relu_good", "partial_write", "softmax_honest")]
    with adversarial.checker(fresh) as check:
        responses = [
            check(case_request(c, "check", kernelbench_dir, cache_dir, {"worker_command": worker}))
            for c in cases
        ]
    assert [r.build.ok and r.error.kind for r in responses] == ["no_gpu"] * 3
    workers = list(_intervals(log).items())
    assert not any(psutil.pid_exists(pid) for pid, _ in workers)
    if fresh:
        assert [kind for _, (kind, _, _) in workers] == ["free"] * 3
        spans = [(start, end) for _, (_, start, end) in workers]
        assert all(
            end is not None and end <= later for (_, end), (later, _) in itertools.pairwise(spans)
        )
        return
    # the first started for its check; each later one beside the one before, gated. The first
    # two start within milliseconds of each other, so their log lines may come in either
    # order: the free one first, then the gated ones by their starts (seconds apart)
    free = [w for w in workers if w[1][0] == "free"]
    gated = sorted((w for w in workers if w[1][0] == "gated"), key=lambda w: w[1][1])
    assert (len(free), len(gated)) == (1, 3)
    workers = free + gated
    for (_, (_, _, end)), (_, (_, start, _)) in itertools.pairwise(workers):
        assert end is not None and start < end
    assert workers[-1][1][2] is None  # the spare nobody took: killed at the end
