"""`kernelblaster init problem.py`: have the LLM write the first, verified plain-CUDA kernel
for a PyTorch reference, saved as problem.cu beside it (agents/loop/init_kernel.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from kernelblaster.atomic_files import save_file
from kernelblaster.harness.target.pairing import kernel_beside
from kernelblaster.input_files import file_problem
from kernelblaster.settings import SettingsError, load_settings


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "init",
        help="have the LLM write a verified plain-CUDA kernel (problem.cu) for a PyTorch "
        "reference (problem.py)",
    )
    parser.add_argument(
        "file", help="the reference .py (KernelBench format: Model, get_inputs, get_init_inputs)"
    )
    parser.add_argument("--force", action="store_true", help="replace an existing problem.cu")
    parser.add_argument(
        "--attempts",
        type=int,
        help="LLM replies to try, each built and verified (default: settings.init_attempts, 4)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=cmd_init)


def cmd_init(args: argparse.Namespace) -> int:
    # Imported here: the openai client is heavy, and every command shares this start-up.
    from kernelblaster.agents.llm.client import LlmClient, LlmConfig, LlmError
    from kernelblaster.agents.loop.init_kernel import initial_kernel
    from kernelblaster.harness.protocol.worker_client import keep_spare_workers

    reference = Path(args.file).resolve()
    if problem := file_problem(args.file):
        print(f"error: {problem}; pass the reference problem.py", file=sys.stderr)
        return 2
    if reference.suffix != ".py":
        print(
            f"error: {args.file} is not a Python file; pass the reference problem.py "
            "(class Model, get_inputs(), get_init_inputs())",
            file=sys.stderr,
        )
        return 2
    target = kernel_beside(reference)
    if target.exists() and not args.force:
        print(f"error: {target} exists; pass --force to replace it", file=sys.stderr)
        return 2
    if args.attempts is not None and args.attempts < 1:
        print("error: --attempts must be at least 1", file=sys.stderr)
        return 2
    try:
        settings = load_settings(reference)
        client = LlmClient(LlmConfig.from_settings(settings))
    except (SettingsError, LlmError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    attempts = args.attempts or settings.init_attempts

    def report(attempt: int, line: str) -> None:
        if not args.json:
            print(f"[reply {attempt}/{attempts}] {line}", file=sys.stderr, flush=True)

    if not args.json:
        model = client.config.model
        print(f"asking {model} for a CUDA kernel for {reference.name}", file=sys.stderr)
    with keep_spare_workers():  # each reply's check starts in a worker prewarmed meanwhile
        result = initial_kernel(
            reference, settings=settings, client=client, attempts=attempts, on_attempt=report
        )
    if result.source is not None:
        try:
            save_file(target, result.source, force=args.force)
            result.written = str(target)
        except FileExistsError:
            result.error = f"{target} appeared while the kernel was written; not replaced"
    if args.json:
        sys.stdout.write(msgspec.json.encode(result).decode() + "\n")
    else:
        print(_summary(result))
    return 0 if result.written else 1


def _summary(result) -> str:
    tokens = result.usage
    if not result.written:
        return f"error: no {Path(result.target).name} written: {result.error}\n({tokens})"
    lines = [f"wrote {result.target} ({tokens})"]
    check = result.check
    if check is not None and check.verify is not None:
        lines.append(f"verified: {check.verify.message}")
        lines += [f"warning: {w.message}" for w in check.verify.warnings]
    if check is not None and check.timing is not None:
        versus = [
            f"{speedup:.2f}x vs {name}"
            for name, speedup in (
                ("PyTorch eager", check.speedup_vs_eager),
                ("torch.compile", check.speedup_vs_compile),
            )
            if speedup
        ]
        baselines = ", ".join(versus) or "no baseline"
        lines.append(f"time: {check.timing.median_ms:.4f} ms ({baselines})")
    return "\n".join(lines)
