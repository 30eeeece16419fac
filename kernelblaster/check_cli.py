"""`kernelblaster build` and `kernelblaster check`: the harness from the command line. Both run
the work in a worker process, so a hanging or crashing kernel can't take the CLI down."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from kernelblaster.harness.protocol.records import BuildResult
from kernelblaster.harness.protocol.worker_client import run_harness_sync
from kernelblaster.harness.protocol.worker_protocol import (
    WorkerProgress,
    WorkerRequest,
    WorkerResponse,
    WorkerTask,
)
from kernelblaster.input_files import file_problem
from kernelblaster.settings import SettingsError, load_settings


def _progress_to_stderr(message: WorkerProgress) -> None:
    print(f"[{message.phase}] {message.message}", file=sys.stderr, flush=True)


def run_task(args: argparse.Namespace, task: WorkerTask) -> WorkerResponse | None:
    source = Path(args.file).resolve()
    if problem := file_problem(args.file):
        print(f"error: {problem}", file=sys.stderr)
        return None
    try:
        settings = load_settings(source)
        if getattr(args, "arch", None):
            settings = settings.merged({"arch": args.arch})
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    request = WorkerRequest(
        task=task,
        source=str(source),
        settings=settings,
        depth="full" if getattr(args, "full", False) else settings.ncu_depth,
        reference=str(Path(args.reference).resolve()) if getattr(args, "reference", None) else None,
        sanitize=getattr(args, "sanitize", False),
    )
    quiet = args.json
    return run_harness_sync(
        request, settings, on_progress=(lambda _: None) if quiet else _progress_to_stderr
    )


def _print_json(value) -> None:
    sys.stdout.write(msgspec.json.format(msgspec.json.encode(value).decode(), indent=2) + "\n")


def cmd_build(args: argparse.Namespace) -> int:
    from kernelblaster.harness.analysis.build_report import format_build_result
    from kernelblaster.harness.analysis.check_report import format_error

    response = run_task(args, "build")
    if response is None:
        return 2
    build, error = response.build, response.error
    if error is not None and (error.kind == "no_reference" or (build and error == build.error)):
        error = None  # not a build's concern, or already in the build's own report
    if args.json:
        _print_json(build if build is not None else response)
    else:
        if build is not None:
            print(format_build_result(build))
        if error is not None:
            print(format_error(error))
    if build is not None and build.ok and error is None and defines_no_kernel(build):
        print(
            f"error: {Path(build.source).name} defines no kernel (__global__ function): nothing "
            "to report; pass the file that holds your kernels",
            file=sys.stderr,
        )
        return 1
    return 0 if build is not None and build.ok and error is None else 1


def defines_no_kernel(build: BuildResult) -> bool:
    """A build with nothing to report: no kernel's resources, and no `__global__` in the source
    (a KernelBench solution's kernels are in load_inline's strings, which report none)."""
    if build.resources:
        return False
    try:
        return "__global__" not in Path(build.source).read_text(errors="replace")
    except OSError:
        return False


def cmd_check(args: argparse.Namespace) -> int:
    from kernelblaster.harness.analysis.build_report import format_build_result
    from kernelblaster.harness.analysis.check_report import format_check_result, format_error

    response = run_task(args, "check")
    if response is None:
        return 2
    if args.json:
        _print_json(response)
    else:
        if response.check is not None:
            print(format_check_result(response.check))
        elif response.build is not None:
            print(format_build_result(response.build))
        if response.error is not None:
            print(format_error(response.error))
    check = response.check
    passed = check is not None and (check.verify is None or check.verify.ok)
    return 0 if passed and response.error is None else 1


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the .cu file (or a KernelBench solution .py)")
    parser.add_argument("--reference", help="reference .py (default: FILE's stem + .py beside it)")
    parser.add_argument("--arch", help="target architecture, e.g. sm_90 (default: the GPU's)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def register(subparsers) -> None:
    build = subparsers.add_parser(
        "build", help="compile with nvcc: diagnostics, registers, spills, occupancy (no GPU needed)"
    )
    add_target_arguments(build)
    build.set_defaults(func=cmd_build)
    check = subparsers.add_parser(
        "check", help="build, verify against the reference on fresh inputs, and time"
    )
    add_target_arguments(check)
    check.add_argument(
        "--sanitize", action="store_true", help="also run compute-sanitizer (memcheck/racecheck)"
    )
    check.set_defaults(func=cmd_check)
