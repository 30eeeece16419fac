"""`kernelblaster optimize FILE.cu`: the optimization loop from the command line. Prints each
step (technique, predicted vs measured, verdict) and the result; writes the best candidate
beside the file (or, with --apply, over it, atomically) and prints the diff."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from kernelblaster.atomic_files import write_atomically
from kernelblaster.input_files import file_problem
from kernelblaster.settings import Settings, SettingsError, TargetConfig, load_settings

if TYPE_CHECKING:
    from kernelblaster.harness.protocol.optimize_protocol import OptimizeResult


def with_reference(settings: Settings, source: Path, reference: Path) -> Settings:
    """`settings` with `reference` as `source`'s reference: its [[targets]] entry's replaced,
    or a new entry with the settings' tolerances, as a file paired by name gets. Through the
    settings it reaches every harness worker the loop starts, on any GPU or host."""
    targets = [t for t in settings.targets if Path(t.source).resolve() != source]
    configured = [t for t in settings.targets if Path(t.source).resolve() == source]
    entry = (
        configured[0]
        if configured
        else TargetConfig(
            source=str(source),
            atol=settings.atol,
            rtol=settings.rtol,
            allow_library_calls=settings.allow_library_calls,
        )
    )
    entry = msgspec.structs.replace(entry, source=str(source), reference=str(reference))
    return msgspec.structs.replace(settings, targets=[*targets, entry])


def _print_result(result: OptimizeResult, original: str, source: Path, apply: bool) -> None:
    from kernelblaster.agents.loop.run import optimized_copy_path  # loaded with the loop

    for step in result.steps:
        measured = f"{step.measured_speedup:.2f}x" if step.measured_speedup else "-"
        print(
            f"  r{step.rollout + 1}.{step.depth + 1} {step.technique:<32} predicted "
            f"{step.predicted_speedup:.2f}x measured {measured:>6}  {step.outcome}"
            + (f" → {step.state_after}" if step.state_after else "")
        )
    print(f"tokens: {result.prompt_tokens} prompt, {result.completion_tokens} completion")
    for passed in result.passed_over:
        print(f"passed over: {passed.summary}")
    if not result.improved or result.best_source is None:
        print(result.error or "no verified candidate beat the original")
        return
    versus = [f"{result.speedup:.2f}x vs the original"]
    if result.speedup_vs_eager:
        versus.append(f"{result.speedup_vs_eager:.2f}x vs PyTorch eager")
    if result.speedup_vs_compile:
        versus.append(f"{result.speedup_vs_compile:.2f}x vs torch.compile")
    print(f"best: {', '.join(versus)} via {' → '.join(result.techniques)}")
    if result.sanitizer is not None and result.sanitizer.status == "passed":
        print(f"memory: {result.sanitizer.summary} ({result.sanitizer.seconds:.1f} s)")
    else:
        # offered all the same: verified on fresh inputs, unchecked for a reason not its own
        memory = result.sanitizer.summary if result.sanitizer else "not checked for memory errors"
        print(f"warning: {memory}")
    target = source if apply else optimized_copy_path(source)
    write_atomically(target, result.best_source)
    print(f"{'applied to' if apply else 'written to'} {target}")
    sys.stdout.writelines(
        difflib.unified_diff(
            original.splitlines(keepends=True),
            result.best_source.splitlines(keepends=True),
            fromfile=str(source),
            tofile=str(target),
        )
    )


def cmd_optimize(args: argparse.Namespace) -> int:
    # Imported here: the openai client and the loop are heavy, and every other command (the
    # language server among them) shares this process's start-up.
    from kernelblaster.agents.llm.client import LlmClient, LlmConfig
    from kernelblaster.agents.loop.rollout_runners import runner_for
    from kernelblaster.agents.loop.run import OptimizeRun, optimized_copy_path, run_optimization
    from kernelblaster.harness.protocol.optimize_protocol import OptimizeRequest
    from kernelblaster.harness.protocol.worker_client import keep_spare_workers
    from kernelblaster.kb.fallback import open_or_fallback
    from kernelblaster.kb.schema import KBError
    from kernelblaster.kb.store import default_path

    source = Path(args.file).resolve()
    if problem := file_problem(args.file):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        settings = load_settings(source)
        if args.gpus:
            settings = settings.merged({"gpu_index": args.gpus.split(",")})
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.reference:
        reference = Path(args.reference).resolve()
        if not reference.is_file():
            print(
                f"error: the reference {args.reference} does not exist: pass the PyTorch "
                "module (class Model, get_inputs()) the kernel must match",
                file=sys.stderr,
            )
            return 2
        settings = with_reference(settings, source, reference)
    if args.ray:
        try:
            from kernelblaster.agents.loop.ray_rollouts import on_ray
        except ImportError:
            print("error: --ray needs ray: pip install 'kernelblaster[ray]'", file=sys.stderr)
            return 2
        run_rollouts = on_ray(args.ray)
    else:
        run_rollouts = runner_for(settings)
    if not settings.llm_base_url and not settings.llm_api_key():
        print(
            "error: no LLM endpoint: set KERNELBLASTER_LLM_BASE_URL (any OpenAI-compatible "
            f"server) and KERNELBLASTER_LLM_MODEL, with the key in ${settings.llm_api_key_env}",
            file=sys.stderr,
        )
        return 2
    original = source.read_text(encoding="utf-8")
    try:
        kb, kb_message = open_or_fallback(default_path(settings.kb_path))
    except KBError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if kb_message:
        print(kb_message, file=sys.stderr)

    def progress(step: int, total: int, message: str, best: float | None) -> None:
        if not args.json:
            best_text = f" (best so far {best:.2f}x)" if best else ""
            print(f"[{step}/{total}] {message}{best_text}", file=sys.stderr, flush=True)

    request = OptimizeRequest(
        source=str(source),
        source_text=original,
        kernel=args.kernel or _only_kernel(original),
        technique=args.technique,
        rollouts=args.rollouts or settings.rollouts,
        depth=args.depth or settings.depth,
        top_k=settings.top_k,
        seed=args.seed,
        proposals=max(args.proposals, 0),
        settings=settings,
    )
    with kb, keep_spare_workers():  # the run's evaluations start in prewarmed workers
        result = run_optimization(
            OptimizeRun(
                request=request,
                client=LlmClient(LlmConfig.from_settings(settings)),
                kb=kb,
                on_progress=progress,
                run_rollouts=run_rollouts,
            )
        )
    if args.json:
        sys.stdout.write(msgspec.json.encode(result).decode() + "\n")
        if result.improved and result.best_source is not None:
            target = source if args.apply else optimized_copy_path(source)
            write_atomically(target, result.best_source)
    else:
        _print_result(result, original, source, args.apply)
    return 0 if result.error is None or result.improved else 1


def _only_kernel(text: str) -> str:
    from kernelblaster.harness.analysis.cuda_source import global_kernels

    names = [k.name for k in global_kernels(text)]
    if len(names) != 1:
        raise SystemExit(f"error: pass --kernel (the file defines {', '.join(names) or 'none'})")
    return names[0]


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "optimize", help="have the LLM apply KB-ranked optimizations; keep only verified, faster"
    )
    parser.add_argument("file", help="the .cu file")
    parser.add_argument(
        "--kernel", help="the __global__ kernel to optimize (default: the only one)"
    )
    parser.add_argument("--rollouts", type=int, help="trajectories (default: settings.rollouts)")
    parser.add_argument("--depth", type=int, help="steps per trajectory (default: settings.depth)")
    parser.add_argument(
        "--reference",
        metavar="PATH",
        help="the PyTorch reference (.py) to verify against, when it is not FILE's namesake "
        "beside it (e.g. softmax.better.cu against softmax.py)",
    )
    parser.add_argument("--technique", help="force this KB technique for the first step")
    parser.add_argument(
        "--proposals",
        type=int,
        default=3,
        help="new techniques the LLM may propose at once for a state the KB has none left for "
        "(0: never; default 3)",
    )
    parser.add_argument("--seed", type=int, help="seed for technique sampling")
    parser.add_argument(
        "--gpus",
        help="run rollouts at once, one per GPU, on these (e.g. 0,1; default: gpuIndex)",
    )
    parser.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run each rollout as a Ray task needing one GPU, on the cluster at ADDRESS "
        "(auto, HOST:PORT, or ray://HOST:PORT)",
    )
    parser.add_argument("--apply", action="store_true", help="replace FILE with the best result")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=cmd_optimize)
