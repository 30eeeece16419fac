"""compute-sanitizer runs (memcheck always, racecheck for kernels using shared memory) and their
reports parsed into HackFindings at source lines. A plain target runs through the native driver
with the `native_sanitizer_driver` setting, else through run_once with every tensor its own
cudaMalloc, so memcheck sees an access past any buffer. A tool that fails gives no verdict: the
kernel is "not checked"."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kernelblaster.folders import CACHE_FIX, FolderError, made_folder, scratch_folder
from kernelblaster.harness.analysis.cuda_source import read_source
from kernelblaster.harness.check.sanitizer_inputs import SanitizerInputs, sanitizer_inputs
from kernelblaster.harness.native.driver_run import driver_command
from kernelblaster.harness.native.native_driver import setup_failed
from kernelblaster.harness.protocol.processes import run_tool
from kernelblaster.harness.protocol.records import (
    BuildResult,
    HackFinding,
    HackKind,
    HarnessError,
    SanitizerRun,
)
from kernelblaster.harness.protocol.setup_errors import folder_error
from kernelblaster.harness.target.run_once import RunOnceSpec, write_spec
from kernelblaster.harness.target.run_once import program as run_once_program
from kernelblaster.harness.target.targets import Target
from kernelblaster.settings import Settings

_log = logging.getLogger(__name__)

_ERROR_EXIT = 86
# e.g. "========= Invalid __global__ write of size 4 bytes"
_MEMCHECK_ERROR = re.compile(r"=+\s+(Invalid __\w+__ (?:read|write)[^\n]*|Misaligned[^\n]*)")
# e.g. "=========     at relu_naive(const float *, float *, int)+0x70 in /src/relu.cu:12"
_LOCATION = re.compile(r"=+\s+at\s+(?:0x[0-9a-f]+\s+in\s+)?(\w+)[^\n]*?\s+in\s+([^\s:]+):(\d+)")
# e.g. "========= Error: Race reported between Write access at k(float*)+0x90 in /src/k.cu:20"
_RACE = re.compile(r"=+\s+(?:Error|Warning): (Race reported between[^\n]*)")
_LINE = re.compile(r"in\s+([^\s:]+):(\d+)")
# compute-sanitizer's own lines that are no finding
_NOT_FINDINGS = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY")

Progress = Callable[..., None]


def _no_progress(*_: object) -> None:
    pass


def parse_report(text: str, *, tool: str, source: str) -> list[HackFinding]:
    """Findings from compute-sanitizer's output; lines only for `source` (the user's file)."""
    findings: list[HackFinding] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if tool == "memcheck" and (m := _MEMCHECK_ERROR.search(line)):
            kernel, where = None, None
            for follow in lines[i + 1 : i + 6]:
                if loc := _LOCATION.search(follow):
                    kernel = loc.group(1)
                    if Path(loc.group(2)).name == Path(source).name:
                        where = int(loc.group(3))
                    break
            findings.append(
                HackFinding(
                    kind="memcheck",
                    message=m.group(1).strip() + (f" in {kernel}" if kernel else ""),
                    line=where,
                )
            )
        elif tool == "racecheck" and (m := _RACE.search(line)):
            where = None
            for place in _LINE.finditer(m.group(1)):
                if Path(place.group(1)).name == Path(source).name:
                    where = int(place.group(2))
                    break
            findings.append(HackFinding(kind="racecheck", message=m.group(1).strip(), line=where))
    return findings


def sanitize_target(
    target: Target, built: BuildResult, settings: Settings, progress: Progress = _no_progress
) -> tuple[list[HackFinding], SanitizerRun, HarnessError | None]:
    """memcheck, and racecheck where the source uses shared memory, at once, on one run of the built
    target on the inputs sanitizer_inputs picks: the findings, what ran, and the error that
    stopped a tool. A finding is a verdict whatever stopped the other tool; an error alone leaves
    the kernel not checked, never failed."""
    began = time.perf_counter()
    shared_memory = "__shared__" in read_source(Path(target.source))
    tools = ["memcheck"] + (["racecheck"] if shared_memory else [])
    chosen = sanitizer_inputs(target)
    described = chosen.described
    progress("sanitize", f"compute-sanitizer {' and '.join(tools)} on {described}")
    try:
        with scratch_folder(settings.cache_folder("work"), "sanitize-", fix=CACHE_FIX) as scratch:
            findings, error, ran = _run_tools(target, built, settings, scratch, tools, chosen)
            if findings and chosen.batch_size is not None:
                progress("sanitize", "confirming its findings at get_inputs()' own size")
                smaller = "; ".join(f.message for f in findings[:2])
                findings, error, ran = _run_tools(target, built, settings, scratch, tools, None)
                described = (
                    f"get_inputs() as written (at batch_size {chosen.batch_size} it reported "
                    f"{smaller}; the kernel was verified at get_inputs()' own size)"
                )
    except FolderError as exc:
        findings, error, ran = [], folder_error(exc), []
    run = SanitizerRun(
        status="failed" if findings else "not_run" if error else "passed",
        reason="; ".join(_said(f) for f in findings[:3]) or (error.message if error else ""),
        fix=error.fix if error and not findings else "",
        tools=ran,
        inputs=described,
        seconds=round(time.perf_counter() - began, 4),
    )
    return findings, run, error


def _said(finding: HackFinding) -> str:
    return finding.message + (f" (line {finding.line})" if finding.line else "")


def _run_tools(
    target: Target,
    built: BuildResult,
    settings: Settings,
    scratch: Path,
    tools: list[str],
    chosen: SanitizerInputs | None,
) -> tuple[list[HackFinding], HarnessError | None, list[str]]:
    """Every tool at once on one program (the native driver's, falling back to run_once's
    where the driver can't set the call up), on `chosen`'s inputs (None: as written); the
    findings, the first error, and the tools that ran to their verdict."""
    batch_size = chosen.batch_size if chosen is not None else None
    folder = made_folder(scratch / f"batch-{batch_size or 'full'}", fix=CACHE_FIX)
    run, native = _program(target, built, settings, folder, batch_size)
    outcomes = _each_tool(run, tools, target, settings)
    why = next((setup_failed(e.log) for _, e in outcomes if native and e is not None), None)
    if why is not None:
        run = _run_once(target, built, settings, folder, batch_size, why)
        outcomes = _each_tool(run, tools, target, settings)
    error = next((e for _, e in outcomes if e is not None), None)
    ran = [tool for tool, (_, e) in zip(tools, outcomes, strict=True) if e is None]
    return [f for found, _ in outcomes for f in found], error, ran


def _each_tool(
    run: list[str], tools: list[str], target: Target, settings: Settings
) -> list[tuple[list[HackFinding], HarnessError | None]]:
    """`sanitize` with each tool, the tools at once: their runs are separate processes, and a
    shared-memory kernel's racecheck need not wait for its memcheck."""
    with ThreadPoolExecutor(max_workers=len(tools), thread_name_prefix="sanitize") as pool:
        return list(
            pool.map(
                lambda tool: sanitize(run, tool=tool, source=target.source, settings=settings),
                tools,
            )
        )


def _program(
    target: Target, built: BuildResult, settings: Settings, folder: Path, batch_size: int | None
) -> tuple[list[str], bool]:
    """The command compute-sanitizer runs, and whether it is the native driver's."""
    if target.kind == "standalone":
        return [str(built.artifact), *target.args], False
    if target.kind == "plain" and settings.native_sanitizer_driver:
        command, why = driver_command(target, built, settings, folder, batch_size=batch_size)
        if command is not None:
            return command, True
        return _run_once(target, built, settings, folder, batch_size, why), False
    return _run_once(target, built, settings, folder, batch_size), False


def _run_once(
    target: Target,
    built: BuildResult,
    settings: Settings,
    folder: Path,
    batch_size: int | None,
    instead: str = "",
) -> list[str]:
    """run_once's command; `instead`: why the native driver could not be used, logged."""
    if instead:
        _log.warning("sanitizing %s through run_once: %s", Path(target.source).name, instead)
    spec = RunOnceSpec(
        target=target, artifact=built.artifact, gpu_index=settings.gpu, batch_size=batch_size
    )
    return run_once_program(write_spec(spec, folder))


def sanitize(
    program: list[str], *, tool: str, source: str, settings: Settings
) -> tuple[list[HackFinding], HarnessError | None]:
    command = [
        settings.compute_sanitizer_path,
        "--tool",
        tool,
        "--error-exitcode",
        str(_ERROR_EXIT),
        "--print-limit",
        "20",
        *program,
    ]
    # PyTorch's caching allocator carves tensors out of large segments, so an access past the
    # end of one tensor stays inside its segment and memcheck can't see it. Without caching,
    # every tensor is its own cudaMalloc and out-of-bounds accesses are caught.
    env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    try:
        done = run_tool(command, timeout=settings.profile_timeout_s, env=env, merge_stderr=False)
    except OSError as exc:  # not there, not executable
        return [], HarnessError(
            kind="sanitizer_missing",
            message=f"compute-sanitizer could not be started ({settings.compute_sanitizer_path}: "
            f"{exc.strerror or exc}).",
            fix="Install the CUDA toolkit's compute-sanitizer (it comes with nvcc), or set "
            "compute_sanitizer_path (computeSanitizerPath in the editor) to it.",
        )
    except subprocess.TimeoutExpired:
        return [], HarnessError(
            kind="sanitizer_failed",
            message=f"compute-sanitizer {tool} took over {settings.profile_timeout_s:.0f} s "
            "and was stopped.",
            fix="Raise profile_timeout_s (profileTimeoutS), or make get_inputs() smaller.",
        )
    output = done.stdout + done.stderr
    findings = parse_report(output, tool=tool, source=source)
    if done.returncode == _ERROR_EXIT and not findings:
        # It reported errors this parser does not know the form of: still the kernel's.
        kind: HackKind = "racecheck" if tool == "racecheck" else "memcheck"
        findings = [HackFinding(kind=kind, message=_first_report_line(output, tool))]
    if done.returncode not in (0, _ERROR_EXIT) and not findings:
        return [], HarnessError(
            kind="sanitizer_failed",
            message=f"compute-sanitizer {tool} ended ({_exit(done.returncode)}) without a "
            "report on the kernel.",
            fix="See the log: the program it ran failed to start or set up (e.g. out of "
            "memory under the tool, or a driver the tool does not support).",
            log=output[-2000:],
        )
    return findings, None


def _first_report_line(output: str, tool: str) -> str:
    """The first of compute-sanitizer's own lines that says what it found."""
    for line in output.splitlines():
        text = line.lstrip("= ").strip()
        if line.startswith("=") and text and not text.startswith(_NOT_FINDINGS):
            return f"{tool}: {text[:300]}"
    return f"{tool} reported errors"


def _exit(returncode: int) -> str:
    return f"exit {returncode}" if returncode >= 0 else f"killed by signal {-returncode}"
