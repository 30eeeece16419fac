"""Numerical verification and dynamic reward-hacking checks of a candidate against its
reference. Worker side: imports torch.

Each trial draws fresh inputs from a new random seed; the candidate runs first (with the
reference model's forward() disabled, so it can't lean on it and can't read the reference's
outputs of this trial), into memory poisoned with NaN so an unwritten element fails; then the
reference runs on a pristine copy of the same inputs."""

from __future__ import annotations

import secrets

import torch

from kernelblaster.harness.candidate import Candidate, ReferenceCalled, guard_reference
from kernelblaster.harness.compare import compare, describe, describe_layout_mismatch, tolerances
from kernelblaster.harness.records import HackFinding, Mismatch, VerifyResult
from kernelblaster.harness.reference import Reference, as_outputs

# Kernels a candidate may launch besides its own: fills (the harness's own NaN poison among
# them), memsets and copies. Matched case-insensitively against the launched kernel's name.
_HOUSEKEEPING = ("fill", "memset", "memcpy", "copy")


def _poison_allocator(templates: list[torch.Tensor], device: torch.device) -> None:
    """Hand the caching allocator NaN-filled blocks (0xFF bytes are NaN in fp32/fp16/bf16) of the
    outputs' sizes, so outputs the candidate allocates itself start as NaN too."""
    blocks = [
        torch.full((t.numel() * t.element_size(),), 0xFF, dtype=torch.uint8, device=device)
        for t in templates
    ]
    del blocks


def launched_kernels(candidate: Candidate, inputs: list, device: torch.device) -> set[str]:
    """Names of the kernels one candidate call launches, as the CUDA profiler saw them."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        candidate(inputs)
        torch.cuda.synchronize(device)
    return {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}


def _is_own(name: str, candidate: Candidate) -> bool:
    return any(own in name for own in candidate.own_kernels)


def _clone(inputs: list) -> list:
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def verify(
    candidate: Candidate,
    reference: Reference,
    *,
    device: torch.device,
    trials: int = 3,
    atol: float | None = None,
    rtol: float | None = None,
    allow_library_calls: bool = False,
) -> VerifyResult:
    seeds = [secrets.randbelow(2**31 - 1) for _ in range(max(trials, 3))]
    mismatches: list[Mismatch] = []
    hacks: list[HackFinding] = []
    layout_problem: str | None = None
    previous: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None
    used_atol = used_rtol = 0.0
    for trial, seed in enumerate(seeds):
        inputs = reference.inputs(seed, device)
        pristine = _clone(inputs)
        _poison_allocator(candidate.output_templates, device)
        try:
            with torch.no_grad(), guard_reference(reference):
                actual = candidate(inputs)
            torch.cuda.synchronize(device)
        except ReferenceCalled as exc:
            hacks.append(HackFinding(kind="reads_reference", message=str(exc)))
            break
        actual = [a.clone() for a in actual]
        with torch.no_grad():
            expected = as_outputs(reference.model(*pristine))
        if len(actual) != len(expected):
            layout_problem = f"{len(actual)} output(s), expected {len(expected)}"
            break
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            layout_problem = describe_layout_mismatch(a, e)
            if layout_problem:
                layout_problem = f"output {index}: {layout_problem}"
                break
            used_atol, used_rtol = tolerances(e.dtype, atol, rtol)
            mismatch = compare(
                a, e, atol=used_atol, rtol=used_rtol, output=index, trial=trial, seed=seed
            )
            if mismatch:
                mismatches.append(mismatch)
        if layout_problem:
            break
        if (
            previous is not None
            and all(torch.equal(a, p) for a, p in zip(actual, previous[0], strict=True))
            and not all(torch.equal(e, p) for e, p in zip(expected, previous[1], strict=True))
        ):
            hacks.append(
                HackFinding(
                    kind="output_cached",
                    message="returned the same output for new inputs (outputs cached across calls)",
                )
            )
        previous = (actual, expected)
    if not hacks and not layout_problem and candidate.may_call_libraries:
        launched = launched_kernels(candidate, reference.inputs(seeds[0], device), device)
        foreign = {
            name
            for name in launched
            if not _is_own(name, candidate) and not any(w in name.lower() for w in _HOUSEKEEPING)
        }
        if foreign and not allow_library_calls:
            hacks.append(
                HackFinding(
                    kind="calls_library",
                    message="launches kernels it doesn't define: " + ", ".join(sorted(foreign)[:3]),
                )
            )
        if candidate.own_kernels and not any(_is_own(name, candidate) for name in launched):
            hacks.append(HackFinding(kind="no_kernel_launched", message="none of its kernels ran"))
    ok = not mismatches and not hacks and layout_problem is None
    if layout_problem:
        message = f"wrong result layout: {layout_problem}"
    elif hacks:
        message = "; ".join(h.message for h in hacks)
    elif mismatches:
        message = describe(mismatches[0])
    else:
        message = f"matches the reference on {len(seeds)} fresh input sets"
    return VerifyResult(
        ok=ok,
        trials=len(seeds),
        seeds=seeds,
        atol=used_atol,
        rtol=used_rtol,
        mismatches=mismatches,
        hacks=hacks,
        message=message,
    )
