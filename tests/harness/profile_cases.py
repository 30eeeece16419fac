"""Real ncu reports paired with the classification they must get.

To add a capture: put the report (and its kernels' source) under tests/fixtures/ncu/<name>/ and
write tests/harness/profile_expected/<name>.toml like the ones there (root = "fixtures"). Every test
over `CASES` then checks it.
"""

from __future__ import annotations

import importlib.util
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

import ncu_report

from kernelblaster.harness.analysis.ncu_reader import read_report
from kernelblaster.harness.profile.ncu import QUICK_SECTIONS
from kernelblaster.harness.protocol.records import ProfileReport


def _root_conftest() -> ModuleType:
    """tests/conftest.py, loaded by path: `import conftest` may find a subdirectory's conftest
    (pytest imports each under that same name)."""
    path = Path(__file__).resolve().parents[1] / "conftest.py"
    spec = importlib.util.spec_from_file_location("kernelblaster_tests_root_conftest", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_CONFTEST = _root_conftest()
EXPECTED = Path(__file__).resolve().parent / "profile_expected"
ROOTS = {"fixtures": _CONFTEST.FIXTURES}


@dataclass(frozen=True)
class KernelExpectation:
    name: str
    bottleneck: str
    state: str
    findings: frozenset[str]
    absent: frozenset[str]
    roof: str | None
    lines: dict[str, str]  # finding id -> text every blamed source line contains


@dataclass(frozen=True)
class ReportCase:
    name: str
    report: Path
    source: Path | None  # the kernels' source, where the report has line markers
    recorded_source: str | None  # that source's path as the report records it
    kernels: tuple[KernelExpectation, ...]

    def __str__(self) -> str:
        return self.name


def _case(path: Path) -> ReportCase:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    root = ROOTS[data["root"]]
    return ReportCase(
        name=path.stem,
        report=root / data["report"],
        source=root / data["source"] if "source" in data else None,
        recorded_source=data.get("recorded_source"),
        kernels=tuple(
            KernelExpectation(
                name=kernel["name"],
                bottleneck=kernel["bottleneck"],
                state=kernel["state"],
                findings=frozenset(kernel.get("findings", [])),
                absent=frozenset(kernel.get("absent", [])),
                roof=kernel.get("roof"),
                lines=kernel.get("lines", {}),
            )
            for kernel in data["kernel"]
        ),
    )


CASES: list[ReportCase] = [_case(path) for path in sorted(EXPECTED.glob("*.toml"))]
KERNEL_CASES: list[tuple[ReportCase, KernelExpectation]] = [
    (case, kernel) for case in CASES for kernel in case.kernels
]


def kernel_case_id(value: object) -> str:
    return value.name if isinstance(value, KernelExpectation) else str(value)


@cache
def load(report: Path) -> ProfileReport:
    """Each report is read once per test session (reading takes ~0.3 s)."""
    return read_report(report)


@cache
def quick_metric_names(report: Path, kernel: str) -> frozenset[str]:
    """The metrics the quick sections show for `kernel` in a full-depth report: what a quick
    pass would have collected (besides QUICK_METRICS and the launch attributes)."""
    context = ncu_report.load_report(str(report))
    names: set[str] = set()
    for range_index in range(context.num_ranges()):
        profiled = context.range_by_idx(range_index)
        for index in range(profiled.num_actions()):
            action = profiled.action_by_idx(index)
            if action.name() != kernel:
                continue
            for section in action.sections():
                if section.identifier() in QUICK_SECTIONS:
                    shown = (*section.header_metrics(), *section.body_metrics())
                    names.update(metric.name() for metric in shown)
    return frozenset(names)
