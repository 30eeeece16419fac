"""Facts about tensors that verification's runtime checks rest on: whether two tensors share
memory, whether they hold the same bits, and a small signature that tells whether an output is
the same as an earlier one without keeping the earlier one. Pure torch (CPU or GPU)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

SAMPLE_ELEMENTS = 4096
CHUNK_BYTES = 1 << 24

_SAME_SIZE_INTEGER = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def byte_range(tensor: torch.Tensor) -> tuple[int, int]:
    """[first, last) bytes the tensor's elements occupy (its strides, not its storage)."""
    low = tensor.data_ptr()
    if tensor.numel() == 0:
        return low, low
    extents = zip(tensor.shape, tensor.stride(), strict=True)
    span = sum((size - 1) * stride for size, stride in extents)
    return low, low + (span + 1) * tensor.element_size()


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors share any byte of memory on the same device."""
    if a.device != b.device or a.numel() == 0 or b.numel() == 0:
        return False
    (a_low, a_high), (b_low, b_high) = byte_range(a), byte_range(b)
    return a_low < b_high and b_low < a_high


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The same elements as integers of the same size (complex: as bytes)."""
    integer = _SAME_SIZE_INTEGER.get(tensor.element_size(), torch.uint8)
    return tensor.detach().view(integer)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Exact equality that also holds for NaN (the harness's poison) in the same places.
    Contiguous tensors are compared CHUNK_BYTES at a time, counted on the device and read
    once: torch.equal on a GPU first makes an element-wise mask as large as the tensor (a
    quarter of an fp32 output: 1.6 GB beside a 6.4 GB one, issue 32)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    x, y = _bits(a), _bits(b)
    if not (x.is_contiguous() and y.is_contiguous()):
        return torch.equal(x, y)
    x, y = x.reshape(-1), y.reshape(-1)
    step = max(1, CHUNK_BYTES // x.element_size())
    differing = torch.zeros((), dtype=torch.int64, device=x.device)
    for start in range(0, x.numel(), step):
        differing += (x[start : start + step] != y[start : start + step]).sum()
    return int(differing) == 0


@dataclass(frozen=True)
class Signature:
    """A tensor's bytes summed, plus an evenly spread sample of its elements' bits: equal
    tensors have equal signatures; two outputs for different inputs practically never do."""

    shape: tuple[int, ...]
    byte_sum: int
    sample: tuple[int, ...]

    @classmethod
    def of(cls, tensor: torch.Tensor) -> Signature:
        flat = _bits(tensor.contiguous()).reshape(-1)
        raw = flat.view(torch.uint8)
        byte_sum = sum(
            int(raw[start : start + CHUNK_BYTES].sum(dtype=torch.int64))
            for start in range(0, raw.numel(), CHUNK_BYTES)
        )
        step = max(1, flat.numel() // SAMPLE_ELEMENTS)
        sample = tuple(flat[::step].cpu().tolist())
        return cls(shape=tuple(tensor.shape), byte_sum=byte_sum, sample=sample)
