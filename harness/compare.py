"""Comparing a candidate's outputs with the reference's: shape, dtype, device, NaN/Inf, and
dtype-aware tolerances. Worker side: imports torch."""

from __future__ import annotations

import math

import torch

from kernelblaster.harness.records import Mismatch
from kernelblaster.harness.targets import DEFAULT_TOLERANCES


def tolerances(dtype: torch.dtype, atol: float | None, rtol: float | None) -> tuple[float, float]:
    default_atol, default_rtol = DEFAULT_TOLERANCES.get(str(dtype).removeprefix("torch."), (0, 0))
    return (default_atol if atol is None else atol, default_rtol if rtol is None else rtol)


def describe_layout_mismatch(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
    if tuple(actual.shape) != tuple(expected.shape):
        return f"shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype}, expected {expected.dtype}"
    if actual.device != expected.device:
        return f"device {actual.device}, expected {expected.device}"
    return None


def compare(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    atol: float,
    rtol: float,
    output: int,
    trial: int,
    seed: int,
) -> Mismatch | None:
    """None when `actual` matches; else where and by how much it doesn't.

    |actual - expected| <= atol * scale + rtol * |expected|, scale = max(1, RMS(expected)),
    and a non-finite value passes only where the reference has the same non-finite value."""
    a = actual.detach().to(torch.float64)
    e = expected.detach().to(torch.float64)
    diff = (a - e).abs()
    scale = max(1.0, float(e[torch.isfinite(e)].pow(2).mean().sqrt()) if e.numel() else 1.0)
    finite_ok = torch.isfinite(a) == torch.isfinite(e)
    same_nonfinite = ~torch.isfinite(e) & ((a == e) | (torch.isnan(a) & torch.isnan(e)))
    close = torch.where(
        torch.isfinite(e), finite_ok & (diff <= atol * scale + rtol * e.abs()), same_nonfinite
    )
    bad = ~close
    bad_count = int(bad.sum())
    if bad_count == 0:
        return None
    finite = torch.isfinite(diff)
    rel = diff / e.abs().clamp_min(1e-12)
    first = torch.nonzero(bad)[0].tolist() if bad.dim() else []
    index = tuple(first)
    return Mismatch(
        output=output,
        trial=trial,
        seed=seed,
        max_abs_error=float(diff[finite].max()) if finite.any() else None,
        max_rel_error=float(rel[finite].max()) if finite.any() else None,
        first_bad_index=list(first),
        expected=finite_or_none(float(e[index])),
        actual=finite_or_none(float(a[index])),
        bad_elements=bad_count,
        total_elements=e.numel(),
        nonfinite=int((~torch.isfinite(a)).sum()),
    )


def finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _number(value: float | None) -> str:
    return "NaN/Inf" if value is None else f"{value:.6g}"


def describe(m: Mismatch) -> str:
    where = f"[{', '.join(map(str, m.first_bad_index))}]"
    unwritten = (
        f"; {m.nonfinite} NaN/Inf (elements never written show up as NaN)" if m.nonfinite else ""
    )
    return (
        f"output {m.output} differs in {m.bad_elements} of {m.total_elements} elements "
        f"(trial {m.trial}, seed {m.seed}): first at {where} expected {_number(m.expected)} got "
        f"{_number(m.actual)}; max abs error {_number(m.max_abs_error)}, max rel error "
        f"{_number(m.max_rel_error)}{unwritten}"
    )
