"""Theoretical occupancy of a kernel from its resource usage, per GPU architecture, by the CUDA
occupancy calculator's arithmetic (`cuda_occupancy.h`). The per-SM limits are the CUDA
programming guide's, cross-checked with ptxas 13.0's `__launch_bounds__` checks."""

from __future__ import annotations

import re
from typing import Literal

import msgspec

Limiter = Literal["registers", "shared_memory", "block_size", "warps"]

WARP_SIZE = 32
KIB = 1024


class SmLimits(msgspec.Struct, frozen=True, kw_only=True):
    max_warps: int  # resident warps per SM
    max_blocks: int  # resident blocks per SM
    max_threads_per_block: int = 1024
    registers: int = 64 * KIB  # 32-bit registers per SM
    max_registers_per_block: int = 64 * KIB
    max_registers_per_thread: int = 255
    register_unit: int = 256  # registers are allocated per warp in multiples of this
    sub_partitions: int = 4
    shared_per_sm: int  # bytes, largest carveout
    shared_per_block: int  # bytes, opt-in maximum for one block
    shared_reserved_per_block: int  # bytes the system keeps per resident block
    shared_unit: int  # shared-memory allocation granularity, bytes


_VOLTA = SmLimits(
    max_warps=64,
    max_blocks=32,
    shared_per_sm=96 * KIB,
    shared_per_block=96 * KIB,
    shared_reserved_per_block=0,
    shared_unit=256,
)
_TURING = SmLimits(
    max_warps=32,
    max_blocks=16,
    shared_per_sm=64 * KIB,
    shared_per_block=64 * KIB,
    shared_reserved_per_block=0,
    shared_unit=256,
)
_A100 = SmLimits(
    max_warps=64,
    max_blocks=32,
    shared_per_sm=164 * KIB,
    shared_per_block=163 * KIB,
    shared_reserved_per_block=KIB,
    shared_unit=128,
)
_GA10X = SmLimits(
    max_warps=48,
    max_blocks=16,
    shared_per_sm=100 * KIB,
    shared_per_block=99 * KIB,
    shared_reserved_per_block=KIB,
    shared_unit=128,
)
_ORIN = msgspec.structs.replace(_GA10X, shared_per_sm=164 * KIB, shared_per_block=163 * KIB)
_ADA = msgspec.structs.replace(_GA10X, max_blocks=24)
_HOPPER = msgspec.structs.replace(_A100, shared_per_sm=228 * KIB, shared_per_block=227 * KIB)
_THOR = msgspec.structs.replace(_HOPPER, max_warps=48, max_blocks=24)

# Keyed by the numeric part of "sm_XY" (family suffixes such as sm_90a or sm_100f share it).
SM_LIMITS: dict[int, SmLimits] = {
    70: _VOLTA,
    72: _VOLTA,
    75: _TURING,
    80: _A100,
    86: _GA10X,
    87: _ORIN,
    89: _ADA,
    90: _HOPPER,
    100: _HOPPER,
    101: _THOR,  # renamed sm_110 in CUDA 13
    103: _HOPPER,
    110: _THOR,
    120: _ADA,  # consumer Blackwell has Ada's per-SM limits
    121: _ADA,
}

_ARCH = re.compile(r"^(?:sm|compute)_(\d+)[a-z]?$")


def sm_limits(arch: str) -> SmLimits:
    """The per-SM limits of `arch` ("sm_90", "sm_90a", ...). ValueError for an unknown arch."""
    match = _ARCH.match(arch)
    if match is None:
        raise ValueError(f"{arch!r} is not a GPU architecture name like 'sm_90'")
    limits = SM_LIMITS.get(int(match.group(1)))
    if limits is None:
        known = ", ".join(f"sm_{n}" for n in SM_LIMITS)
        raise ValueError(f"no occupancy limits known for {arch} (known: {known})")
    return limits


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def _blocks_by_registers(limits: SmLimits, registers: int, warps_per_block: int) -> int:
    if registers > limits.max_registers_per_thread:
        return 0
    per_warp = _round_up(max(registers, 1) * WARP_SIZE, limits.register_unit)
    # The hardware check assumes each block's warps are spread over all sub-partitions.
    assumed_per_block = per_warp * _round_up(warps_per_block, limits.sub_partitions)
    if max(assumed_per_block, per_warp * warps_per_block) > limits.max_registers_per_block:
        return 0
    warps_per_partition = limits.registers // limits.sub_partitions // per_warp
    return warps_per_partition * limits.sub_partitions // warps_per_block


def _blocks_by_shared(limits: SmLimits, shared_bytes: int) -> int:
    if shared_bytes > limits.shared_per_block:
        return 0
    per_block = _round_up(shared_bytes + limits.shared_reserved_per_block, limits.shared_unit)
    # No more than the SM holds at all: without shared memory ncu says 32 on sm_90, not the
    # 228 one-KiB reservations that would fit.
    return (
        min(limits.shared_per_sm // per_block, limits.max_blocks)
        if per_block
        else limits.max_blocks
    )


def block_limits(
    arch: str, *, registers: int, shared_bytes: int, block_size: int
) -> dict[Limiter, int]:
    """Resident blocks per SM that each resource allows (as ncu's launch__occupancy_limit_*)."""
    if block_size < 1:
        raise ValueError(f"block size must be positive, got {block_size}")
    limits = sm_limits(arch)
    warps_per_block = -(-block_size // WARP_SIZE)
    return {
        "warps": limits.max_warps // warps_per_block,
        "block_size": limits.max_blocks if block_size <= limits.max_threads_per_block else 0,
        "registers": _blocks_by_registers(limits, registers, warps_per_block),
        "shared_memory": _blocks_by_shared(limits, shared_bytes),
    }


def theoretical_occupancy(
    arch: str, *, registers: int, shared_bytes: int, block_size: int
) -> tuple[float, Limiter]:
    """Resident warps per SM over the SM's maximum, and what limits it (`shared_bytes`: per block,
    static plus dynamic). The limiter is "warps", "block_size", "registers" or "shared_memory"; a
    tie names the earlier, since relieving registers or shared memory won't help while a hardware
    cap binds as tightly. An impossible launch has occupancy 0 and names the resource at fault."""
    bounds = block_limits(
        arch, registers=registers, shared_bytes=shared_bytes, block_size=block_size
    )
    blocks = min(bounds.values())
    limiter = next(name for name, bound in bounds.items() if bound == blocks)
    warps_per_block = -(-block_size // WARP_SIZE)
    return blocks * warps_per_block / sm_limits(arch).max_warps, limiter
