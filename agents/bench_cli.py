"""`kernelblaster bench kernelbench PATH...`: the KernelBench runner (agents/kernelbench/runner.py)
from the command line; `kernelblaster bench report` renders the Markdown report and plot
from results files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from kernelblaster.folders import made_folder
from kernelblaster.settings import SettingsError, load_settings

# In the folder the command runs in: the product writes nowhere of its own repository's.
RESULTS = Path("kernelbench-results")


def register(subparsers) -> None:
    bench = subparsers.add_parser("bench", help="benchmarks: KernelBench")
    commands = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")
    run = commands.add_parser(
        "kernelbench",
        help="init, optimize and time every KernelBench problem of a folder; resumable",
        description="For each problem: a first kernel (written by the LLM with `init`, or "
        "<problem>.cu beside it or in --start), the optimization loop with one knowledge base "
        "for the whole run, then a final timing against the faster of PyTorch eager and "
        "torch.compile. Writes RESULTS/kernelbench-<gpu>-<level>.json after every problem (a "
        "rerun skips the problems it holds) and kernelbench-<gpu>.md with a plot at the end.",
    )
    run.add_argument("paths", nargs="+", type=Path, help="problem folders (e.g. level1) or files")
    run.add_argument("--level", help="the name results are filed under (default: the folder's)")
    run.add_argument("--only", help="problem numbers or names to run, e.g. 1,19,23_Softmax")
    run.add_argument("--limit", type=int, help="only the first N problems")
    run.add_argument("--start", type=Path, help="a folder of <problem>.cu kernels to start from")
    run.add_argument("--rollouts", type=int, help="per problem (default: settings.rollouts)")
    run.add_argument("--depth", type=int, help="steps per rollout (default: settings.depth)")
    run.add_argument(
        "--init-attempts", type=int, help="LLM replies for each first kernel (default: settings)"
    )
    run.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        help=f"the folder of the results files (default: ./{RESULTS})",
    )
    run.add_argument(
        "--work", type=Path, help="where each problem's kernels go (default: in the cache)"
    )
    run.add_argument("--kb", help="the knowledge base the run shares (default: the user's)")
    run.add_argument(
        "--mechanics",
        action="store_true",
        help="label the results as a mechanics run: the endpoint is a scripted test server, "
        "so they say nothing of a model's performance",
    )
    run.add_argument("--note", default="", help="a note for the report (e.g. reduced sizes)")
    run.add_argument("--seed", type=int, help="seed for technique sampling")
    run.add_argument(
        "--restart", action="store_true", help="start over instead of continuing the results"
    )
    run.set_defaults(func=cmd_kernelbench)

    report = commands.add_parser(
        "report", help="write kernelbench-<gpu>.md and its plot from results files"
    )
    report.add_argument(
        "files", nargs="*", type=Path, help="results files (default: RESULTS/kernelbench-*.json)"
    )
    report.add_argument("--results", type=Path, default=RESULTS, help=f"default: ./{RESULTS}")
    report.set_defaults(func=cmd_report)


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def cmd_report(args: argparse.Namespace) -> int:
    from kernelblaster.agents.kernelbench.report import write_report

    files = args.files or sorted(args.results.glob("kernelbench-*.json"))
    if not files:
        return _error(f"no results files: none given and no kernelbench-*.json in {args.results}")
    try:
        print(f"wrote {write_report(files, files[0].parent)}")
    except ValueError as exc:
        return _error(str(exc))
    return 0


def cmd_kernelbench(args: argparse.Namespace) -> int:
    # Imported here: the LLM stack and the loop are heavy, and every command shares start-up.
    from kernelblaster.agents.kernelbench.problems import ProblemsError, discover, level_name
    from kernelblaster.agents.kernelbench.records import RunConfig
    from kernelblaster.agents.kernelbench.report import results_name, slug, write_report
    from kernelblaster.agents.kernelbench.runner import (
        ResultsMismatch,
        RunAborted,
        RunServices,
        open_run,
        run_kernelbench,
    )
    from kernelblaster.agents.llm.client import LlmClient, LlmConfig, LlmError
    from kernelblaster.harness.build.gpu_arch import detect_arch
    from kernelblaster.harness.protocol.worker_client import keep_spare_workers
    from kernelblaster.kb.fallback import open_or_fallback
    from kernelblaster.kb.schema import KBError
    from kernelblaster.kb.store import default_path

    try:
        problems = discover(
            args.paths,
            start_dir=args.start,
            only=args.only.split(",") if args.only else None,
            limit=args.limit,
        )
        level = args.level or level_name(args.paths)
        settings = load_settings(args.paths[0].resolve())
        client = LlmClient(LlmConfig.from_settings(settings))
    except (ProblemsError, SettingsError, LlmError) as exc:
        return _error(str(exc))
    gpu = detect_arch(msgspec.structs.replace(settings, arch=None))  # the name, whatever arch
    device = gpu.gpu_name
    if device is None:
        return _error(f"KernelBench needs a GPU: {gpu.note}")
    config = RunConfig(
        rollouts=args.rollouts or settings.rollouts,
        depth=args.depth or settings.depth,
        top_k=settings.top_k,
        init_attempts=args.init_attempts or settings.init_attempts,
        model=settings.llm_model,
        mechanics=args.mechanics,
    )
    results_path = args.results / results_name(device, level)
    try:
        run = open_run(
            results_path,
            device=device,
            level=level,
            config=config,
            note=args.note,
            restart=args.restart,
        )
    except ResultsMismatch as exc:
        return _error(str(exc))
    if args.work:
        work = made_folder(args.work, fix="Pass --work a folder you can write")
    else:
        work = settings.cache_folder("kernelbench", f"{slug(device)}-{slug(level)}")
    try:
        kb, kb_message = open_or_fallback(default_path(args.kb or settings.kb_path))
    except KBError as exc:
        return _error(str(exc))
    if kb_message:
        print(kb_message, file=sys.stderr)
    print(
        f"KernelBench {level}: {len(problems)} problem(s) on {device} with {config.model}; "
        f"results in {results_path}",
        flush=True,
    )
    services = RunServices(
        settings=settings, client=client, kb=kb, work_dir=work.resolve(), seed=args.seed
    )
    # One set of spare workers for the whole run: each evaluation (init, the loop, the final
    # timing; ~6 a problem) starts in a worker that prewarmed meanwhile.
    with kb, keep_spare_workers():
        try:
            run = run_kernelbench(
                problems,
                run,
                results_path=results_path,
                services=services,
                on_line=lambda line: print(line, flush=True),
            )
        except RunAborted as exc:
            print(f"stopped: {exc}", file=sys.stderr)
            return 1
    summary = run.summary
    if summary is not None:
        print(
            f"{level}: {summary.verified}/{summary.problems} valid, geomean "
            f"{summary.geomean_speedup or 0:.3f}x over the valid ones, fast_1 "
            f"{summary.fast_p.get('1', 0):.0%}"
        )
    same_gpu = sorted(args.results.glob(f"kernelbench-{slug(device)}-*.json"))
    report = write_report(same_gpu, args.results)
    print(f"wrote {results_path} and {report}")
    return 0
