"""On a GPU: compute-sanitizer run through the native driver (the `native_sanitizer_driver`
setting, harness/check/sanitizer.py) finds what it finds through run_once: the planted
out-of-bounds write with its line, the shared-memory race, nothing in a clean kernel; and it
ran the driver, not run_once after a fallback. The setting stays off by default until this
passes on a GPU."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kernelblaster.harness.build.nvcc import build
from kernelblaster.harness.check.sanitizer import sanitize_target
from kernelblaster.harness.target.target_build import build_spec
from kernelblaster.harness.target.targets import Target, resolve_target
from kernelblaster.settings import load_settings

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

TARGETS = Path(__file__).resolve().parents[2] / "fixtures" / "targets"


def _findings(name: str, native: bool, tmp_path: Path) -> set[tuple[str, int | None]]:
    source = TARGETS / f"{name}.cu"
    settings = load_settings(source, environ={}).merged(
        {"cache_dir": str(tmp_path / "cache"), "native_sanitizer_driver": native}
    )
    target = resolve_target(source, settings)
    assert isinstance(target, Target), target
    built = build(build_spec(target, settings), settings)
    assert built.ok, built.error
    findings, run, error = sanitize_target(target, built, settings)
    assert error is None, error
    assert run.status == ("failed" if findings else "passed"), run
    return {(finding.kind, finding.line) for finding in findings}


@pytest.mark.parametrize(
    ("name", "expected"),
    [("out_of_bounds", {("memcheck", 4)}), ("shared_race", {"racecheck"}), ("good", set())],
)
def test_the_driver_finds_what_run_once_finds(name, expected, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="kernelblaster.harness.check.sanitizer"):
        native = _findings(name, True, tmp_path)
    assert "through run_once" not in caplog.text  # the driver ran, no fallback
    assert native == _findings(name, False, tmp_path)
    kinds = {kind for kind, _ in native}
    assert {e for e in expected if isinstance(e, str)} <= kinds
    assert {e for e in expected if isinstance(e, tuple)} <= native
    if not expected:
        assert native == set()
