"""compute-sanitizer runs (memcheck always; racecheck for kernels using shared memory) and the
parsing of their reports into HackFindings pinned to source lines.

What it runs: a standalone program itself; a plain target through the native driver
(harness/native/) with the `native_sanitizer_driver` setting, else, and for the other forms,
run_once (Python and torch, every tensor its own cudaMalloc: PYTORCH_NO_CUDA_MEMORY_CACHING).
The driver's buffers are each their own cudaMalloc too, so memcheck sees an access past any
of them; where it can't be had or can't set the call up, run_once instead, with the reason
logged."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import tempfile
from pathlib import Path

from kernelblaster.harness.analysis.cuda_source import read_source
from kernelblaster.harness.native.driver_run import driver_command
from kernelblaster.harness.native.native_driver import setup_failed
from kernelblaster.harness.protocol.processes import run_tool
from kernelblaster.harness.protocol.records import BuildResult, HackFinding, HarnessError
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
    target: Target, built: BuildResult, settings: Settings, work_dir: Path
) -> tuple[list[HackFinding], HarnessError | None]:
    """memcheck, and racecheck where the source uses shared memory, on one run of the built
    target; the findings, or the error that stopped a run."""
    shared_memory = "__shared__" in read_source(Path(target.source))
    tools = ["memcheck"] + (["racecheck"] if shared_memory else [])
    findings: list[HackFinding] = []
    with tempfile.TemporaryDirectory(prefix="sanitize-", dir=work_dir) as scratch:
        run, native = _program(target, built, settings, work_dir, Path(scratch))
        for tool in tools:
            found, error = sanitize(run, tool=tool, source=target.source, settings=settings)
            if native and error is not None and (why := setup_failed(error.log)) is not None:
                run, native = _run_once(target, built, settings, work_dir, why), False
                found, error = sanitize(run, tool=tool, source=target.source, settings=settings)
            if error is not None:
                return findings, error
            findings.extend(found)
    return findings, None


def _program(
    target: Target, built: BuildResult, settings: Settings, work_dir: Path, scratch: Path
) -> tuple[list[str], bool]:
    """The command compute-sanitizer runs, and whether it is the native driver's."""
    if target.kind == "standalone":
        return [str(built.artifact), *target.args], False
    if target.kind == "plain" and settings.native_sanitizer_driver:
        command, why = driver_command(target, built, settings, scratch)
        if command is not None:
            return command, True
        return _run_once(target, built, settings, work_dir, why), False
    return _run_once(target, built, settings, work_dir), False


def _run_once(
    target: Target, built: BuildResult, settings: Settings, work_dir: Path, instead: str = ""
) -> list[str]:
    """run_once's command; `instead`: why the native driver could not be used, logged."""
    if instead:
        _log.warning("sanitizing %s through run_once: %s", Path(target.source).name, instead)
    spec = RunOnceSpec(target=target, artifact=built.artifact, gpu_index=settings.gpu)
    return run_once_program(write_spec(spec, work_dir))


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
    except FileNotFoundError:
        return [], HarnessError(
            kind="crash",
            message=f"compute-sanitizer not found ({settings.compute_sanitizer_path}).",
            fix="Install the CUDA toolkit's compute-sanitizer or set computeSanitizerPath.",
        )
    except subprocess.TimeoutExpired:
        return [], HarnessError(
            kind="timeout",
            message=f"compute-sanitizer {tool} took over {settings.profile_timeout_s:.0f} s.",
            fix="Use smaller inputs in the reference's get_inputs(), or raise profileTimeoutS.",
        )
    output = done.stdout + done.stderr
    findings = parse_report(output, tool=tool, source=source)
    if done.returncode not in (0, _ERROR_EXIT) and not findings:
        return [], HarnessError(
            kind="crash",
            message=f"compute-sanitizer {tool} failed (exit {done.returncode}).",
            log=output[-2000:],
        )
    return findings, None
