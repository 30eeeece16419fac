"""A BuildResult for people: diagnostics as compilers print them, then a resource table."""

from __future__ import annotations

from pathlib import Path

from kernelblaster.harness.protocol.records import BuildResult, KernelResources

_COLUMNS = ("kernel", "regs", "spills (st/ld)", "smem", "stack", "occupancy", "limiter")


def _size(num_bytes: int) -> str:
    if num_bytes >= 1024 and num_bytes % 1024 == 0:
        return f"{num_bytes // 1024} KiB"
    return f"{num_bytes} B"


def _row(kernel: KernelResources) -> tuple[str, ...]:
    if kernel.theoretical_occupancy is None:
        occupancy = "n/a"
    else:
        occupancy = f"{kernel.theoretical_occupancy:.0%} @ {kernel.occupancy_block_size}"
        occupancy += " (bounds)" if kernel.max_threads_per_block else ""
    spills = (
        f"{kernel.spill_store_bytes}/{kernel.spill_load_bytes} B"
        if kernel.spill_store_bytes or kernel.spill_load_bytes
        else "-"
    )
    return (
        kernel.demangled,
        str(kernel.registers),
        spills,
        _size(kernel.shared_bytes),
        _size(kernel.stack_bytes),
        occupancy,
        (kernel.occupancy_limiter or "-").replace("_", " "),
    )


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for number, row in enumerate(rows):
        cells = [
            cell.ljust(width) if column == 0 else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if number == 0:
            lines.append("  ".join("-" * width for width in widths))
    return lines


def format_build_result(result: BuildResult) -> str:
    lines: list[str] = []
    for diagnostic in result.diagnostics:
        position = f"{diagnostic.file}:{diagnostic.line}"
        position += f":{diagnostic.column}" if diagnostic.column else ""
        code = f" [{diagnostic.code}]" if diagnostic.code else ""
        first, *rest = diagnostic.message.splitlines() or [""]
        lines.append(f"{position}: {diagnostic.severity}: {first}{code}")
        lines += [f"    {line}" for line in rest]
    name = Path(result.source).name
    # a KernelBench solution's build has no arch unless one was asked for
    arch = f" for {result.arch}" if result.arch else ""
    if result.ok:
        how = "cached" if result.cached else f"{result.seconds:.2f} s"
        artifact = f": {result.artifact}" if result.artifact else ""  # none for load_inline
        lines.append(f"built {name}{arch} ({how}){artifact}")
    else:
        lines.append(f"build of {name}{arch} failed")
    if result.steps:  # built in parts: which ones were compiled again
        lines.append(
            "parts: "
            + "; ".join(
                f"{Path(step.what).name} {'cached' if step.cached else f'{step.seconds:.2f} s'}"
                for step in result.steps
            )
        )
    if result.arch_note:
        lines.append(f"arch: {result.arch_note}")
    if result.error is not None:
        lines.append(f"{result.error.kind}: {result.error.message}")
        if result.error.fix:
            lines.append(f"fix: {result.error.fix}")
    if result.resources:
        lines.append("")
        lines += _table([_COLUMNS, *(_row(kernel) for kernel in result.resources)])
        lines.append(
            "occupancy: theoretical, at the block size the kernel's __launch_bounds__ allows "
            "(bounds), else at 256 threads"
        )
    return "\n".join(lines)
