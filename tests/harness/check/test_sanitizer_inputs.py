"""Which inputs compute-sanitizer runs a kernel on (harness/check/sanitizer_inputs.py): a
KernelBench-style reference's get_inputs() at a smaller batch where that is the same work with
fewer rows, else as written; and the reference loaded at that batch (what run_once and the
native driver run) is the same model on fewer rows. CPU only: sizes come from the meta device."""

from __future__ import annotations

import pytest
import torch

from kernelblaster.harness.check.sanitizer_inputs import SCALED_ROWS, sanitizer_inputs
from kernelblaster.harness.target.reference import load_reference
from kernelblaster.harness.target.targets import Target

REFERENCE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.gemm(x)


batch_size = {batch}
in_features = 64
out_features = 32


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
"""
KERNEL = '__global__ void k(const float* x, float* y) {}\nextern "C" void launch() {}\n'


def target(tmp_path, reference: str, kernel: str = KERNEL, kind: str = "plain") -> Target:
    (tmp_path / "k.py").write_text(reference)
    (tmp_path / "k.cu").write_text(kernel)
    return Target(
        kind=kind, source=str(tmp_path / "k.cu"), entry="launch", reference=str(tmp_path / "k.py")
    )


@pytest.mark.parametrize(("batch", "scaled"), [(512, 32), (4096, 32), (100, 36), (64, 32)])
def test_the_batch_is_cut_to_a_warp_of_rows_keeping_its_remainder(tmp_path, batch, scaled):
    # a comment naming the size is no indexing (examples/softmax.cu's "4096 threads")
    kernel = f"// {batch} threads leave most of the GPU idle\n/* {batch} rows */\n{KERNEL}"
    chosen = sanitizer_inputs(target(tmp_path, REFERENCE.format(batch=batch), kernel))
    assert chosen.batch_size == scaled and scaled % SCALED_ROWS == batch % SCALED_ROWS
    assert chosen.described == f"get_inputs() at batch_size {scaled} instead of {batch}"


@pytest.mark.parametrize(
    ("reference", "kernel", "why"),
    [
        (REFERENCE.format(batch=40), KERNEL, "batch_size 40 is small already"),
        (REFERENCE.replace("batch_size = {batch}", "rows = 512").replace("batch_size", "rows"),
         KERNEL, "sets no top-level `batch_size = <int>`"),
        (REFERENCE.format(batch=512), KERNEL.replace("{}", "{ if (blockIdx.x < 512) {} }"),
         "the kernel's source names 512"),
        (REFERENCE.format(batch=512).replace(
            "return [in_features, out_features]", "return [in_features, batch_size // 16]"),
         KERNEL, "get_init_inputs() depends on it"),
        (REFERENCE.format(batch=512).replace(
            "super().__init__()", "super().__init__()\n        self.batch_size = batch_size"),
         KERNEL, "Model keeps it"),
        (REFERENCE.format(batch=512).replace(
            "torch.rand(batch_size, in_features)", "torch.rand(512, in_features)"),
         KERNEL, "get_inputs() does not use it"),
        (REFERENCE.format(batch=512).replace(
            "torch.rand(batch_size, in_features)", "torch.rand(batch_size, 2**23)"),
         KERNEL, "2**31 elements or more"),
    ],
    ids=["small", "no_batch_size", "named_in_kernel", "init_uses_it", "model_keeps_it",
         "unused", "index_overflow"],
)  # fmt: skip
def test_where_a_smaller_batch_is_not_the_same_work_the_inputs_are_as_written(
    tmp_path, reference, kernel, why
):
    chosen = sanitizer_inputs(target(tmp_path, reference, kernel))
    assert chosen.batch_size is None
    assert chosen.described.startswith("get_inputs() as written (") and why in chosen.described


def test_a_program_runs_on_its_own_inputs(tmp_path):
    chosen = sanitizer_inputs(target(tmp_path, REFERENCE.format(batch=512), kind="standalone"))
    assert chosen == (None, "the program's own run")


def test_the_reference_at_a_smaller_batch_is_the_same_model_on_fewer_rows(tmp_path):
    """What run_once and the native driver load for the smaller run (load_reference's
    batch_size): the same weights, get_inputs() with batch_size rows, the launcher's
    `batch_size` scalar the copy's."""
    (tmp_path / "k.py").write_text(REFERENCE.format(batch=512))
    cpu = torch.device("cpu")
    full = load_reference(tmp_path / "k.py", cpu)
    small = load_reference(tmp_path / "k.py", cpu, batch_size=32)
    assert full.inputs(1, cpu)[0].shape == (512, 64)
    assert small.inputs(1, cpu)[0].shape == (32, 64)
    assert small.scalar("batch_size") == 32 and full.scalar("batch_size") == 512
    for (name, a), (_, b) in zip(full.tensors(), small.tensors(), strict=True):
        assert torch.equal(a, b), name
    # the rows the smaller set has are the full set's first rows under the same seed
    assert torch.equal(small.inputs(1, cpu)[0], full.inputs(1, cpu)[0][:32])
