"""Comparing a candidate's outputs with the reference's: shape, dtype, device, NaN/Inf, and |actual
- expected| <= atol * RMS(expected) + rtol * |expected|, so atol follows each output's own scale
and an all-zeros answer fails a tiny softmax. An all-zero output is compared with an absolute
atol. Compared in float64 chunks, so a huge output needs little extra memory. Worker side:
imports torch."""

from __future__ import annotations

import math

import torch

from kernelblaster.harness.protocol.records import Mismatch
from kernelblaster.harness.target.targets import DEFAULT_TOLERANCES

CHUNK_ELEMENTS = 1 << 24
MEDIAN_SAMPLE = 1 << 20  # elements the median of a large output is estimated from


def tolerances(dtype: torch.dtype, atol: float | None, rtol: float | None) -> tuple[float, float]:
    default_atol, default_rtol = DEFAULT_TOLERANCES.get(str(dtype).removeprefix("torch."), (0, 0))
    return (default_atol if atol is None else atol, default_rtol if rtol is None else rtol)


def describe_layout_mismatch(
    actual: torch.Tensor, *, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
) -> str | None:
    """What differs between `actual` and the layout of an expected output (its shape and
    dtype, and the device verification runs on; the expected output itself may be in
    another process), or None."""
    if tuple(actual.shape) != tuple(shape):
        return f"shape {tuple(actual.shape)}, expected {tuple(shape)}"
    if actual.dtype != dtype:
        return f"dtype {actual.dtype}, expected {dtype}"
    if actual.device != device:
        return f"device {actual.device}, expected {device}"
    return None


def _chunks(tensor: torch.Tensor):
    flat = tensor.detach().reshape(-1)
    for start in range(0, flat.numel(), CHUNK_ELEMENTS):
        yield start, flat[start : start + CHUNK_ELEMENTS].to(torch.float64)


def all_finite(tensor: torch.Tensor) -> bool:
    """Whether every element is finite, a chunk at a time: an isfinite mask of a whole
    multi-gigabyte output would be a quarter of its size again."""
    flat = tensor.detach().reshape(-1)
    nonfinite = torch.zeros((), dtype=torch.int64, device=flat.device)
    for start in range(0, flat.numel(), CHUNK_ELEMENTS):
        nonfinite += (~torch.isfinite(flat[start : start + CHUNK_ELEMENTS])).sum()
    return int(nonfinite) == 0


def output_scale(expected: torch.Tensor) -> float:
    """What atol is multiplied by: the RMS of the expected output's finite values, or 1 for an
    output with no finite non-zero value."""
    return float(_scale(expected))


def _scale(expected: torch.Tensor) -> torch.Tensor:
    """`output_scale` as a float64 scalar on the output's device, read by nobody until the
    comparison's end: no synchronization per chunk."""
    squares = torch.zeros((), dtype=torch.float64, device=expected.device)
    count = torch.zeros((), dtype=torch.int64, device=expected.device)
    for _, chunk in _chunks(expected):
        finite = torch.isfinite(chunk)
        squares += torch.where(finite, chunk, 0.0).pow(2).sum()
        count += finite.sum()
    rms = torch.sqrt(squares / count.clamp_min(1))
    return torch.where((count > 0) & (rms > 0), rms, 1.0)


def _close(a: torch.Tensor, e: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    finite_e = torch.isfinite(e)
    same_nonfinite = ~finite_e & ((a == e) | (torch.isnan(a) & torch.isnan(e)))
    within = torch.isfinite(a) & ((a - e).abs() <= bound)
    return torch.where(finite_e, within, same_nonfinite)


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
    """None when `actual` matches `expected` under the rule above; else where and by how much
    it doesn't. Everything is reduced on the device and read once at the end (one
    synchronization, not several per chunk: this runs after every call verification makes)."""
    scale = _scale(expected)
    device = expected.device
    bad_count = torch.zeros((), dtype=torch.int64, device=device)
    nonfinite = torch.zeros((), dtype=torch.int64, device=device)
    # -1 stays where no difference is finite: the error is then unknown (None)
    max_abs = torch.full((), -1.0, dtype=torch.float64, device=device)
    max_rel = torch.full((), -1.0, dtype=torch.float64, device=device)
    for (_, e), (_, a) in zip(_chunks(expected), _chunks(actual), strict=True):
        diff = (a - e).abs()
        bad_count += (~_close(a, e, atol * scale + rtol * e.abs())).sum()
        nonfinite += (~torch.isfinite(a)).sum()
        finite = torch.isfinite(diff)
        max_abs = torch.maximum(max_abs, torch.where(finite, diff, -1.0).max())
        relative = diff / e.abs().clamp_min(1e-12)
        max_rel = torch.maximum(max_rel, torch.where(finite, relative, -1.0).max())
    totals = torch.stack([bad_count.double(), nonfinite.double(), max_abs, max_rel]).tolist()
    bad_elements, nonfinite_elements, largest_abs, largest_rel = totals
    if bad_elements == 0:
        return None
    first_bad = _first_bad(actual, expected, atol * scale, rtol)
    index = [int(i) for i in torch.unravel_index(torch.tensor(first_bad), expected.shape)]
    flat_e, flat_a = expected.detach().reshape(-1), actual.detach().reshape(-1)
    return Mismatch(
        output=output,
        trial=trial,
        seed=seed,
        max_abs_error=largest_abs if largest_abs >= 0 else None,
        max_rel_error=largest_rel if largest_rel >= 0 else None,
        first_bad_index=index,
        expected=finite_or_none(float(flat_e[first_bad])),
        actual=finite_or_none(float(flat_a[first_bad])),
        bad_elements=int(bad_elements),
        total_elements=expected.numel(),
        nonfinite=int(nonfinite_elements),
    )


def _first_bad(
    actual: torch.Tensor, expected: torch.Tensor, absolute: torch.Tensor, rtol: float
) -> int:
    """The flat index of the first element outside the bound (there is one)."""
    for (start, e), (_, a) in zip(_chunks(expected), _chunks(actual), strict=True):
        bad = ~_close(a, e, absolute + rtol * e.abs())
        if bool(bad.any()):
            return start + int(torch.nonzero(bad)[0])
    raise AssertionError("compare counted a bad element that is not there")


def degenerate_fractions(
    expected: torch.Tensor, *, atol: float, rtol: float
) -> tuple[float, float]:
    """How weak a reference output is as a test: the shares of its elements that all zeros, and one
    constant (its median), would match under `compare`'s rule. A ReLU after subtracting 2 from
    standard-normal inputs scores ~0.98 on both. A single value counts only zero."""
    if expected.numel() == 0:
        return 0.0, 0.0
    flat = expected.detach().reshape(-1)
    step = max(1, flat.numel() // MEDIAN_SAMPLE)
    sample = flat[::step].to(torch.float64)
    sample = sample[torch.isfinite(sample)]
    median = float(sample.median()) if sample.numel() else 0.0
    scale = output_scale(expected)
    zeros = constants = 0
    for _, e in _chunks(expected):
        bound = atol * scale + rtol * e.abs()
        zeros += int(_close(torch.zeros_like(e), e, bound).sum())
        constants += int(_close(torch.full_like(e, median), e, bound).sum())
    if expected.numel() == 1:
        constants = zeros
    return zeros / expected.numel(), constants / expected.numel()


def finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _number(value: float | None) -> str:
    return "NaN/Inf" if value is None else f"{value:.6g}"


def describe(m: Mismatch) -> str:
    where = f"[{', '.join(map(str, m.first_bad_index))}]"
    unwritten = (
        f"; {m.nonfinite} NaN/Inf (elements never written show up as NaN)" if m.nonfinite else ""
    )
    scaled = (
        f" on inputs scaled by {m.input_scale:g} (the reference is degenerate on get_inputs())"
        if m.input_scale is not None
        else ""
    )
    return (
        f"output {m.output} differs in {m.bad_elements} of {m.total_elements} elements "
        f"(trial {m.trial}, seed {m.seed}){scaled}: first at {where} expected "
        f"{_number(m.expected)} got {_number(m.actual)}; max abs error "
        f"{_number(m.max_abs_error)}, max rel error {_number(m.max_rel_error)}{unwritten}"
    )
