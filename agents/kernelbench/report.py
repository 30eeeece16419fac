"""The readable report of KernelBench runs on one GPU: a Markdown file with each level's summary
beside the paper's anchors, a table of every problem, and a plot of the speedups per level.
Without matplotlib the report says so, and `kernelblaster bench report` draws it later."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from kernelblaster.agents.kernelbench.metrics import (
    FAST_P_THRESHOLDS,
    PAPER_ANCHOR_SOURCE,
    PAPER_ANCHORS,
    p_key,
    verified_speedups,
)
from kernelblaster.agents.kernelbench.records import KernelBenchRun, ProblemResult, Summary

MECHANICS_BANNER = (
    "**Mechanics run, not a model's performance.** The LLM endpoint was the scripted "
    "OpenAI-compatible test server (bench/openai_server.py) answering from prepared kernels: "
    "these numbers show that init, the optimization loop, the shared knowledge base and the "
    "final timing work end to end on this GPU, not what any model achieves."
)


def slug(text: str) -> str:
    """A name as a file-name part: "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"."""
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


def results_name(device: str, level: str) -> str:
    return f"kernelbench-{slug(device)}-{slug(level)}.json"


def load_runs(paths: list[Path]) -> list[KernelBenchRun]:
    runs = [msgspec.json.decode(p.read_bytes(), type=KernelBenchRun) for p in paths]
    return sorted(runs, key=lambda run: run.level)


def _number(value: float | None, suffix: str = "x") -> str:
    return "–" if value is None else f"{value:.2f}{suffix}"


def _share(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def _summary_row(run: KernelBenchRun, summary: Summary) -> str:
    anchor = PAPER_ANCHORS.get(run.level)
    paper = f"{anchor.geomean_speedup:.3f}x, {anchor.valid_rate:.0%} valid" if anchor else "–"
    fast = " | ".join(_share(summary.fast_p.get(p_key(p))) for p in FAST_P_THRESHOLDS)
    tokens = summary.prompt_tokens + summary.completion_tokens
    level = f"{run.level} (mechanics)" if run.config.mechanics else run.level
    return (
        f"| {level} | {summary.problems} | {_share(summary.valid_rate)} | "
        f"{_number(summary.geomean_speedup)} | {_number(summary.median_speedup)} | {fast} | "
        f"{tokens / 1000:.1f}k | {summary.wall_s / 60:.1f} min | {paper} |"
    )


def _problem_row(result: ProblemResult) -> str:
    techniques = " → ".join(result.techniques) or "–"
    detail = result.detail.replace("|", "/").replace("\n", " ")[:160]
    tokens = (result.prompt_tokens + result.completion_tokens) / 1000
    return (
        f"| {result.problem} | {result.status} | {result.started_from}"
        f"{f' ({result.init_replies})' if result.started_from == 'init' else ''} | "
        f"{_number(result.initial_speedup)} | {_number(result.speedup)} "
        f"{result.baseline or ''} | {_number(result.optimize_speedup)} | {techniques} | "
        f"{_memory_check(result)} | {tokens:.1f}k | {result.wall_s:.0f} s | {detail} |"
    )


def _memory_check(result: ProblemResult) -> str:
    """The compute-sanitizer column: its verdict on the offered kernel, and the faster
    candidates passed over."""
    run = result.sanitizer
    said = "–" if run is None else f"{run.status.replace('_', ' ')}, {run.seconds:.1f} s"
    if run is not None and run.status == "not_run":
        said = f"not checked: {run.reason}"
    elif run is not None and run.inputs:
        said += f", {run.inputs}"
    notes = [said, *(p.summary for p in result.passed_over)]
    return "; ".join(notes).replace("|", "/").replace("\n", " ")[:300]


def render_markdown(runs: list[KernelBenchRun], plot: str | None, plot_note: str = "") -> str:
    device = runs[0].device if runs else "?"
    out = [f"# KernelBench on {device}", ""]
    if any(run.config.mechanics for run in runs):
        out += [MECHANICS_BANNER, ""]
    notes = sorted({run.note for run in runs if run.note})
    out += [f"Note: {note}" for note in notes]
    if notes:
        out.append("")
    fast_heads = " | ".join(f"fast_{p_key(p)}" for p in FAST_P_THRESHOLDS)
    out += [
        "Speedup = the faster of PyTorch eager and torch.compile over the final kernel's time. "
        "Valid = the final kernel verified (numerics on fresh inputs and the reward-hack "
        "checks). Geomean and median over the valid problems; fast_p = the share of all "
        "problems that are valid and faster than p× (KernelBench's definition). Problems "
        "whose inputs don't fit in GPU memory or whose reference output is degenerate count "
        "as not valid."
        + (
            " Tokens are estimated (characters / 4): the endpoint sent no usage."
            if any(run.estimated_tokens for run in runs)
            else ""
        ),
        "",
        f"| level | problems | valid | geomean | median | {fast_heads} | tokens | wall | "
        "paper (H100) |",
        "|---" * (8 + len(FAST_P_THRESHOLDS)) + "|",
    ]
    out += [_summary_row(run, run.summary) for run in runs if run.summary is not None]
    out += ["", f"Paper anchors: {PAPER_ANCHOR_SOURCE}.", ""]
    for run in runs:
        config = run.config
        out += [
            f"## {run.level}" + (" (mechanics run)" if config.mechanics else ""),
            "",
            f"Model `{config.model}`, {config.rollouts} rollout(s) × depth {config.depth}, "
            f"top-{config.top_k}, up to {config.init_attempts} init replies; one knowledge base "
            "for the whole run.",
            "",
            "| problem | status | start (init replies) | first kernel | final | optimize gain "
            "| techniques | memory check | tokens | wall | detail |",
            "|---" * 11 + "|",
        ]
        out += [_problem_row(result) for result in run.problems]
        out.append("")
    if plot:
        out += [f"![Speedup distribution per level]({plot})", ""]
    elif plot_note:
        out += [plot_note, ""]
    return "\n".join(out)


def draw_plot(runs: list[KernelBenchRun], path: Path) -> str | None:
    """The speedup of every valid problem, per level, on a log scale with 1x marked; None
    when it was drawn, else why not."""
    try:
        import matplotlib
    except ImportError:
        return (
            "The plot was not drawn here: matplotlib is not installed. Draw it with "
            "`kernelblaster bench report` where it is (`pip install matplotlib`)."
        )
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator

    speedups = [verified_speedups(run.problems) for run in runs]
    figure, axes = plt.subplots(figsize=(max(5.5, 2.2 * len(runs)), 4.5))
    for position, (run, values) in enumerate(zip(runs, speedups, strict=True), start=1):
        if values:
            axes.boxplot([values], positions=[position], widths=0.5, showfliers=False)
            jitter = [position + 0.06 * ((i % 5) - 2) for i in range(len(values))]
            axes.scatter(jitter, values, s=18, alpha=0.7, zorder=3)
        anchor = PAPER_ANCHORS.get(run.level)
        if anchor:
            axes.plot([position - 0.3, position + 0.3], [anchor.geomean_speedup] * 2, "r--", lw=1)
    axes.axhline(1.0, color="grey", lw=0.8)
    axes.set_yscale("log")
    axes.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}x"))
    axes.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
    labels = [
        f"{run.level}\n{len(values)} of {len(run.problems)} valid"
        for run, values in zip(runs, speedups, strict=True)
    ]
    axes.set_xticks(range(1, len(runs) + 1), labels)
    axes.set_ylabel("speedup vs the faster of eager / torch.compile")
    mechanics = any(run.config.mechanics for run in runs)
    axes.set_title(
        f"KernelBench, {runs[0].device if runs else '?'}\n"
        f"{'mechanics run (scripted endpoint); ' if mechanics else ''}red dashes: the paper's "
        "geomean",
        fontsize=9,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return None


def write_report(results: list[Path], out_dir: Path) -> Path:
    """kernelbench-<gpu>.md (and .png) in `out_dir` for the runs in `results`, one GPU's."""
    runs = load_runs(results)
    devices = {run.device for run in runs}
    if len(devices) != 1:
        raise ValueError(
            f"the results are from {len(devices)} GPUs ({', '.join(sorted(devices))}); "
            "report one GPU's at a time"
        )
    stem = f"kernelbench-{slug(devices.pop())}"
    plot_path = out_dir / f"{stem}.png"
    problem = draw_plot(runs, plot_path)
    markdown = render_markdown(runs, None if problem else plot_path.name, problem or "")
    report = out_dir / f"{stem}.md"
    report.write_text(markdown + "\n", encoding="utf-8")
    return report
