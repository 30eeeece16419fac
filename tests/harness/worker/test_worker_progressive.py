"""The worker's order on a profile run, with the GPU steps replaced by recorded results (this
machine has no GPU; tests/harness/check/test_check_gpu.py runs them for real): the verification and
timing go out before ncu starts, and the PyTorch baselines are measured only after the profile,
so neither waits for torch.compile. Also: the baselines' cache is on disk, keyed by the
reference's content and the GPU."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec
import pytest

from kernelblaster.harness.analysis.ncu_reader import read_report
from kernelblaster.harness.protocol.records import (
    BuildResult,
    CheckResult,
    HarnessError,
    Timing,
    VerifyResult,
)
from kernelblaster.harness.protocol.worker_protocol import (
    WorkerMessage,
    WorkerProgress,
    WorkerRequest,
    WorkerResponse,
)
from kernelblaster.harness.worker import serve as worker
from kernelblaster.settings import Settings

check = pytest.importorskip("kernelblaster.harness.check.check")  # imports torch
from kernelblaster.harness.check import baselines  # noqa: E402 - as above
from kernelblaster.harness.profile import counters, profile  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
FIVE = REPO / "tests" / "fixtures" / "ncu" / "h100-five"


def _timing(ms: float) -> Timing:
    return Timing(median_ms=ms, min_ms=ms, max_ms=ms, p20_ms=ms, p80_ms=ms, repetitions=50)


@pytest.fixture
def recorded(tmp_path, monkeypatch) -> list[tuple[str, object]]:
    """Runs handle() on examples/relu.cu with recorded build, check and profile results;
    returns the events in order: ("emit", message), ("profile", None), ("baselines", None)."""
    for name in ("relu.cu", "relu.py"):
        shutil.copyfile(REPO / "examples" / name, tmp_path / name)
    events: list[tuple[str, object]] = []

    def run_check(target, built, settings, **_):
        verify = VerifyResult(ok=True, trials=3, atol=1e-5, rtol=1e-5, seeds=[7, 8, 9])
        result = CheckResult(
            source=target.source, target_kind=target.kind, arch="sm_90", verify=verify
        )
        result.timing = _timing(0.02)
        return result, None

    def profile_target(*_, **__):
        events.append(("profile", None))
        return read_report(FIVE / "five.ncu-rep", depth="full"), None

    def profile_in_process(*_, **__):
        events.append(("counters", None))
        if (tmp_path / "counters_fail").exists():
            return None, HarnessError(kind="counters_failed", message="CUPTI said no.")
        report = read_report(FIVE / "five.ncu-rep", depth="quick")
        return msgspec.structs.replace(report, program="in_process", report_path=None), None

    def warm_up(settings):
        events.append(("warm_up", None))
        if (tmp_path / "warm_up_fails").exists():
            raise RuntimeError("no CUDA GPU")

    def add_baselines(target, settings, result, *, progress, clean):
        events.append(("baselines", None))
        result.eager = _timing(0.05)
        result.speedup_vs_eager = 2.5
        return None

    monkeypatch.setattr(
        worker, "_build", lambda target, _: BuildResult(ok=True, source=target.source, arch="sm_90")
    )
    # Sent as the real stream sends it: as it is when emitted, not as it is later.
    wire = msgspec.json.Decoder(WorkerMessage)
    monkeypatch.setattr(
        worker, "emit", lambda m: events.append(("emit", wire.decode(msgspec.json.encode(m))))
    )
    monkeypatch.setattr(check, "gpu_problem", lambda _: None)
    monkeypatch.setattr(check, "run_check", run_check)
    monkeypatch.setattr(check, "add_baselines", add_baselines)
    monkeypatch.setattr(profile, "profile_target", profile_target)
    monkeypatch.setattr(counters, "profile_in_process", profile_in_process)
    monkeypatch.setattr(counters, "warm_up", warm_up)
    return events


def _request(tmp_path: Path, task: str) -> WorkerRequest:
    settings = Settings(cache_dir=str(tmp_path / "cache"))
    return WorkerRequest(task=task, source=str(tmp_path / "relu.cu"), settings=settings)


def _progress(recorded) -> list[WorkerProgress]:
    return [m for kind, m in recorded if kind == "emit" and isinstance(m, WorkerProgress)]


def test_the_timing_goes_out_before_the_profile_and_the_baselines_after_it(recorded, tmp_path):
    response = worker.handle(_request(tmp_path, "profile"))
    order = [kind if kind != "emit" else type(m).__name__ for kind, m in recorded]
    partial, early = [m for m in _progress(recorded) if m.check is not None]
    # the timing, then the in-process counters' state, then ncu's profile
    assert recorded.index(("emit", partial)) < order.index("counters")
    assert order.index("counters") < recorded.index(("emit", early)) < order.index("profile")
    # set up beside the build (a thread started before it), done before the counters run
    assert order.index("warm_up") < order.index("counters")
    assert not partial.states and early.profile.program == "in_process"
    assert [s.state for s in early.states] == [s.state for s in response.states]
    assert order[-1] == "baselines"  # after the profile: the state doesn't wait for them
    # what follows the state (ncu's pass, the baselines) is said to be background work, which
    # the language server stops for another file's save (server/session/jobs.py)
    (marker,) = [m for m in _progress(recorded) if m.background]
    assert recorded.index(("emit", early)) < recorded.index(("emit", marker))
    assert recorded.index(("emit", marker)) < order.index("profile")
    assert not partial.background and not early.background
    assert isinstance(partial, WorkerProgress) and partial.phase == "profile"
    assert partial.build is not None and partial.build.ok
    assert partial.check.timing.median_ms == 0.02 and partial.check.verify.ok
    assert partial.check.eager is None and partial.check.speedup_vs_eager is None
    assert isinstance(response, WorkerResponse) and response.error is None
    assert response.check.speedup_vs_eager == 2.5 and response.states


def test_without_in_process_counters_ncu_alone_gives_the_state(recorded, tmp_path):
    (tmp_path / "counters_fail").touch()
    response = worker.handle(_request(tmp_path, "profile"))
    assert ("counters", None) in recorded  # tried, failed: nothing sent ahead of ncu
    assert not [m for m in _progress(recorded) if m.states]
    said = [m.message for m in _progress(recorded) if m.message.startswith("no in-process")]
    assert said == ["no in-process counters: CUPTI said no. The state waits for ncu."]
    assert response.error is None and response.profile.program is None and response.states

    recorded.clear()
    request = _request(tmp_path, "profile")
    request.settings = msgspec.structs.replace(request.settings, in_process_counters=False)
    worker.handle(request)
    assert ("counters", None) not in recorded and ("profile", None) in recorded
    assert ("warm_up", None) not in recorded  # nothing set up for counters that won't run


def test_a_failed_warm_up_leaves_the_profile_to_meet_and_report_it(recorded, tmp_path):
    (tmp_path / "warm_up_fails").touch()
    response = worker.handle(_request(tmp_path, "profile"))
    assert ("warm_up", None) in recorded and ("counters", None) in recorded
    assert [m for m in _progress(recorded) if m.states]  # the counters ran all the same
    assert response.error is None


def test_the_counters_state_stays_when_ncus_pass_fails(recorded, tmp_path, monkeypatch):
    failure = HarnessError(kind="ncu_missing", message="ncu not found")
    monkeypatch.setattr(profile, "profile_target", lambda *_, **__: (None, failure))
    response = worker.handle(_request(tmp_path, "profile"))
    assert response.error == failure  # what the source lines need, said
    assert response.profile.program == "in_process" and response.states


def test_a_check_run_measures_its_baselines_before_answering(recorded, tmp_path):
    response = worker.handle(_request(tmp_path, "check"))
    assert ("profile", None) not in recorded and ("baselines", None) in recorded
    assert ("warm_up", None) not in recorded
    assert not [m for kind, m in recorded if kind == "emit" and m.check is not None]
    assert response.check.speedup_vs_eager == 2.5 and response.profile is None


def test_baselines_are_cached_on_disk_per_reference_content_and_gpu(tmp_path):
    cache = tmp_path / "cache"
    source = (REPO / "examples" / "relu.py").read_bytes()
    path = baselines.cache_file(source, "NVIDIA H100 80GB HBM3", cache)
    assert path.parent == cache / "baselines"
    assert baselines.read_cached(path) is None
    measured = baselines.Baselines(eager=_timing(0.05), compiled=_timing(0.03))
    baselines.store(path, measured)
    # a later process (a restarted server) computes the same file and reads them back
    again = baselines.cache_file(source, "NVIDIA H100 80GB HBM3", cache)
    assert baselines.read_cached(again) == measured
    assert baselines.cache_file(source, "NVIDIA H200", cache) != path
    assert baselines.cache_file(source + b"\n# edited\n", "NVIDIA H100 80GB HBM3", cache) != path
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left behind
