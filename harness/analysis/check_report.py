"""Human-readable rendering of a CheckResult (the CLI's non-JSON output)."""

from __future__ import annotations

from kernelblaster.harness.protocol.records import CheckResult, HarnessError, Timing


def format_error(error: HarnessError) -> str:
    lines = [f"error ({error.kind}): {error.message}"]
    if error.fix:
        lines.append(f"  fix: {error.fix}")
    if error.log:
        lines.append("  log (tail):")
        lines.extend("    " + line for line in error.log.strip().splitlines()[-15:])
    return "\n".join(lines)


def _timing_row(label: str, timing: Timing | None, speedup: float | None = None) -> str:
    if timing is None:
        return f"  {label:<16} -"
    spread = f"[p20 {timing.p20_ms:.4f} .. p80 {timing.p80_ms:.4f}]"
    ratio = f"  (kernel is {speedup:.2f}x faster)" if speedup is not None else ""
    return f"  {label:<16} {timing.median_ms:10.4f} ms  {spread}  n={timing.repetitions}{ratio}"


def format_check_result(result: CheckResult) -> str:
    lines = [
        f"{result.source} ({result.target_kind}) on {result.gpu or 'no GPU'} {result.arch or ''}"
    ]
    if result.verify is not None:
        verdict = "PASS" if result.verify.ok else "FAIL"
        lines.append(f"verify: {verdict}: {result.verify.message}")
        lines.extend(
            f"  {hack.kind}: {hack.message}" + (f" (line {hack.line})" if hack.line else "")
            for hack in result.verify.hacks
        )
        lines.extend(
            f"  warning {warning.kind}: {warning.message}"
            + (f" (line {warning.line})" if warning.line else "")
            for warning in result.verify.warnings
        )
    if result.sanitizer is not None:
        lines.append(f"sanitizer: {result.sanitizer.summary} ({result.sanitizer.seconds:.1f} s)")
    if result.timing is not None:
        lines.append("time (median of CUDA-event trials, L2 flushed):")
        lines.append(_timing_row("kernel", result.timing))
        lines.append(_timing_row("pytorch eager", result.eager, result.speedup_vs_eager))
        lines.append(_timing_row("torch.compile", result.compiled, result.speedup_vs_compile))
    if result.phase_seconds:
        lines.append(
            "phases: " + ", ".join(f"{k} {v:.2f}s" for k, v in result.phase_seconds.items())
        )
    return "\n".join(lines)
