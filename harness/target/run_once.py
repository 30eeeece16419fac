"""`python -m kernelblaster.harness.target.run_once SPEC.json`: run a target's candidate a few times
on seeded inputs and exit. It is the program compute-sanitizer watches and ncu profiles (except
plain targets, which go through the native driver where it runs, and standalone programs), so it
does nothing else: no verification, no timing."""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec

from kernelblaster.folders import CACHE_FIX, made_folder
from kernelblaster.harness.target.targets import Target

# The input set the profiled (and sanitized) launch runs on, whichever program makes it.
PROFILE_SEED = 1234


class RunOnceSpec(msgspec.Struct, kw_only=True):
    target: Target
    artifact: str | None
    gpu_index: int = 0
    seed: int = PROFILE_SEED
    repeat: int = 1
    # get_inputs() at this batch_size instead of the reference's (compute-sanitizer's run on a
    # smaller set, harness/check/sanitizer_inputs.py); None: as written
    batch_size: int | None = None


def write_spec(spec: RunOnceSpec, directory: Path) -> Path:
    made_folder(directory, fix=CACHE_FIX)
    path = directory / "run_once.json"
    path.write_bytes(msgspec.json.encode(spec))
    return path


def program(spec_path: Path) -> list[str]:
    return [sys.executable, "-m", "kernelblaster.harness.target.run_once", str(spec_path)]


def prepare_call(spec: RunOnceSpec):
    """The candidate and the seeded inputs of the profiled call, on the spec's GPU (made the
    current device): what run_once calls, and what harness/profile/counters.py profiles in the
    worker. Raises ReferenceError_ where the reference and the target don't fit."""
    import torch

    from kernelblaster.harness.target.candidate import load_candidate
    from kernelblaster.harness.target.reference import load_reference

    device = torch.device("cuda", spec.gpu_index)
    torch.cuda.set_device(device)
    reference = load_reference(
        Path(spec.target.reference or ""), device, batch_size=spec.batch_size
    )
    artifact = Path(spec.artifact) if spec.artifact else None
    candidate = load_candidate(spec.target, artifact, reference, device)
    return candidate, reference.inputs(spec.seed, device)


def main(argv: list[str]) -> int:
    import torch

    spec = msgspec.json.decode(Path(argv[0]).read_bytes(), type=RunOnceSpec)
    candidate, inputs = prepare_call(spec)
    device = torch.device("cuda", spec.gpu_index)
    with torch.no_grad():
        for _ in range(spec.repeat):
            candidate(inputs)
    torch.cuda.synchronize(device)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
