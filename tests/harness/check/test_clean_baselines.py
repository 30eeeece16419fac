"""The PyTorch baselines are timed in the clean reference process, not beside the candidate:
a candidate that makes the reference's own operators slower in its process (an ATen kernel
registered over torch's, a dispatch mode pushed for good) changes no output, so verification
has nothing to reject, and must not move the speedups either. Real processes, with the CPU
standing in for the GPU (timed on the host's clock), torch.compile included (~12 s each on
2 cores). tests/harness/check/test_adversarial_gpu.py runs the same on a GPU, with a C++ extension's
static initializer."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelblaster.harness.check import check, clean_baselines
from kernelblaster.harness.check.baselines import cached_baselines
from kernelblaster.harness.protocol.records import CheckResult, Timing, VerifyResult
from kernelblaster.harness.target.clean_reference import CleanReference
from kernelblaster.harness.target.reference import load_reference
from kernelblaster.harness.target.targets import Target
from kernelblaster.settings import Settings

RELU = Path(__file__).resolve().parents[2] / "fixtures" / "targets" / "relu_ref.py"
CPU = torch.device("cpu")
KERNEL_MS = 0.01
# What the tampering costs each relu call in this process: 20 ms, where the reference's own
# relu of 65,536 floats takes tens of microseconds
SLOWER_S = 0.02


@pytest.fixture(scope="module")
def clean():
    process = CleanReference("cpu", answers=clean_baselines.ANSWERS)
    yield process
    process.close()


def _slow(x: torch.Tensor, calls: list[int]) -> torch.Tensor:
    """relu's right answer, late: a correct but slow implementation changes no output."""
    calls.append(1)
    time.sleep(SLOWER_S)
    return x.clamp_min(0.0)


def _slow_aten_kernel(calls: list[int]):
    """The candidate's own kernel for aten::relu, registered over torch's (no Python name
    rebound): the C++ extension's TORCH_LIBRARY_IMPL(aten, CUDA, m), from Python."""
    library = torch.library.Library("aten", "IMPL")
    library.impl("relu", lambda x: _slow(x, calls), "CPU")
    return library._destroy


def _slow_dispatch_mode(calls: list[int]):
    """A dispatch mode entered at import and never left: every relu in the process is slow."""

    class Slow(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.relu.default:
                return _slow(args[0], calls)
            return func(*args, **(kwargs or {}))

    mode = Slow()
    mode.__enter__()
    return lambda: mode.__exit__(None, None, None)


def _timed_result() -> CheckResult:
    """A verified kernel's result as the check leaves it before the baselines."""
    verify = VerifyResult(ok=True, trials=3, atol=1e-5, rtol=1e-5, seeds=[11, 12, 13])
    timing = Timing(
        median_ms=KERNEL_MS, min_ms=KERNEL_MS, max_ms=KERNEL_MS, p20_ms=KERNEL_MS,
        p80_ms=KERNEL_MS, repetitions=20,
    )  # fmt: skip
    return CheckResult(source="relu.cu", target_kind="plain", verify=verify, timing=timing)


def _target(reference: Path = RELU) -> Target:
    return Target(kind="plain", source="relu.cu", reference=str(reference), entry="relu")


@pytest.mark.parametrize("tamper", [_slow_aten_kernel, _slow_dispatch_mode])
def test_a_reference_slowed_in_the_candidates_process_moves_no_baseline(clean, tmp_path, tamper):
    settings = Settings(cache_dir=str(tmp_path))
    said: list[str] = []
    calls: list[int] = []
    undo = tamper(calls)
    try:
        reference = load_reference(RELU, CPU)
        reference.model(*reference.inputs(0, CPU))
        assert calls, "the tampering slows the reference in this process"
        calls.clear()
        result = _timed_result()
        error = check.add_baselines(
            _target(), settings, result, progress=lambda _, m: said.append(m), clean=clean
        )
    finally:
        undo()
    assert error is None, error
    assert calls == []  # nothing of the baselines ran in this process
    assert result.eager is not None and result.eager.median_ms < SLOWER_S * 1e3
    assert result.compiled is not None and result.speedup_vs_compile is not None
    assert result.speedup_vs_eager == pytest.approx(result.eager.median_ms / KERNEL_MS)
    assert said == ["timing PyTorch eager and torch.compile (cached per reference)"]
    # kept once per reference text, as the worker reads it back before timing the next kernel
    cached = cached_baselines(RELU, CPU, settings.cache_root())
    assert cached is not None and (cached.eager, cached.compiled) == (result.eager, result.compiled)
    # where the measurement's seconds went: torch.compile's compilation apart from its timing
    measured = {"baselines_eager", "baselines_compile", "baselines_compiled_timing"}
    assert measured <= set(result.phase_seconds) and cached.seconds == {}
    again = _timed_result()
    assert check.add_baselines(_target(), settings, again, progress=print, clean=clean) is None
    assert again.eager == result.eager and not measured & set(again.phase_seconds)


def test_a_broken_reference_is_said_and_the_clean_process_answers_on(clean, tmp_path):
    broken = tmp_path / "broken_ref.py"
    broken.write_text("import torch\nraise ValueError('no reference today')\n")
    settings = Settings(cache_dir=str(tmp_path / "cache"))
    result = _timed_result()
    error = check.add_baselines(
        _target(broken), settings, result, progress=lambda *_: None, clean=clean
    )
    assert error is not None and error.kind == "bad_reference"
    assert "no reference today" in error.message
    assert result.eager is None and result.speedup_vs_eager is None
    with pytest.raises(RuntimeError, match="not started to answer 'profile'"):
        clean.ask("profile", RELU)
    clean.open(RELU, trials=3, atol=None, rtol=None)  # its sessions go on as before
    assert clean.facts().trials == 3
