"""A stand-in for ncu that records the command line it was given and writes no report: what
`profile_target` asks ncu to run, seen without a GPU."""

from __future__ import annotations

import stat
from pathlib import Path

import msgspec

from kernelblaster.harness.profile.profile import profile_target
from kernelblaster.harness.protocol.records import BuildResult, HarnessError
from kernelblaster.harness.target.targets import Target
from kernelblaster.settings import Settings


def executable_script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def recording_ncu(folder: Path) -> Path:
    return executable_script(folder / "ncu", 'echo "$@" > "$(dirname "$0")/argv"\nexit 0\n')


def recorded_argv(ncu: Path) -> list[str]:
    return (ncu.parent / "argv").read_text().split()


def profile_quick(
    target: Target, built: BuildResult, settings: Settings
) -> tuple[HarnessError, list[str]]:
    """Profile at the quick depth through the recording ncu (`settings.ncu_path`): the error
    (there is no report) and the progress messages."""
    messages: list[str] = []
    report, error = profile_target(
        target,
        built,
        msgspec.structs.replace(settings, native_profile_driver=True),
        depth="quick",
        progress=lambda phase, message, *_: messages.append(message),
    )
    # the recording ncu writes no report: that is the error, after the command was formed
    assert report is None and error is not None and error.kind == "crash"
    return error, messages
