"""compute-sanitizer runs (memcheck always; racecheck for kernels using shared memory) and the
parsing of their reports into HackFindings pinned to source lines."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from kernelblaster.harness.protocol.processes import run_tool
from kernelblaster.harness.protocol.records import HackFinding, HarnessError
from kernelblaster.settings import Settings

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
