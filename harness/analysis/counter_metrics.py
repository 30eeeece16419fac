"""The metrics of the in-process quick profile, named as ncu names them, so the classifier reads
them unchanged. Torch-free.

CUPTI counts only the hardware metrics. The launch statistics and theoretical occupancy, which
ncu computes, are computed here from the recorded launch (`launch_metrics`, checked against
committed ncu reports); `derived__*` and SASS-instrumented metrics stay absent, so the findings
built on them report nothing."""

from __future__ import annotations

from kernelblaster.harness.analysis import ncu_metrics as m
from kernelblaster.harness.analysis.occupancy import block_limits, theoretical_occupancy
from kernelblaster.harness.protocol.records import LaunchConfig

_COMPUTED = ("launch__",)
_NOT_COUNTED = ("derived__", "sass__", "smsp__sass_")


def is_hardware_metric(name: str) -> bool:
    """Whether CUPTI's Range Profiler can count `name` (a PerfWorks metric), as opposed to the
    ones ncu computes from the launch or derives or instruments itself."""
    return not name.startswith(_COMPUTED + _NOT_COUNTED) and name != m.THEORETICAL_OCCUPANCY


# What the in-process pass asks CUPTI for: every hardware metric the classifier keeps and every
# stall ratio; a GPU without some collects the rest. No roofline counts (tensor or cache): a
# roofline point needs SASS FLOP counts too, and every counter more may cost another replay.
COUNTER_METRICS: list[str] = sorted(
    {name for name in m.KEPT - m.TENSOR_ROOFLINE - m.CACHE_ROOFLINE if is_hardware_metric(name)}
    | {m.stall_metric(reason) for reason in m.STALL_REASONS}
)

# What `launch_metrics` computes, by ncu's names (a launch too large to run has no waves).
LAUNCH_METRICS: tuple[str, ...] = (
    m.GRID_SIZE,
    m.BLOCK_SIZE,
    *m.GRID_DIMS,
    *m.BLOCK_DIMS,
    m.REGISTERS,
    m.SHARED_STATIC,
    m.SHARED_DYNAMIC,
    m.SM_COUNT,
    m.WAVES,
    m.THEORETICAL_OCCUPANCY,
    *(m.BLOCK_LIMITS[name] for name in ("registers", "shared_memory", "warps", "blocks")),
)

# occupancy.py's names for the resources limiting resident blocks, as ncu's metrics name them
_LIMITS = {
    "registers": m.BLOCK_LIMITS["registers"],
    "shared_memory": m.BLOCK_LIMITS["shared_memory"],
    "warps": m.BLOCK_LIMITS["warps"],
    "block_size": m.BLOCK_LIMITS["blocks"],
}


def launch_metrics(launch: LaunchConfig, *, arch: str, sm_count: int) -> dict[str, float]:
    """ncu's launch statistics and theoretical occupancy for `launch` on a GPU of `arch` with
    `sm_count` SMs. Shared memory is limited as by the largest carveout, which agrees with ncu's
    whenever shared memory is the limiter. ncu's barrier limit is not modelled. A block too large
    to launch has no waves."""
    block_size = launch.block[0] * launch.block[1] * launch.block[2]
    grid_size = launch.grid[0] * launch.grid[1] * launch.grid[2]
    shared = launch.shared_static_bytes + launch.shared_dynamic_bytes
    resources = {"registers": launch.registers_per_thread, "shared_bytes": shared}
    limits = block_limits(arch, block_size=block_size, **resources)
    occupancy, _ = theoretical_occupancy(arch, block_size=block_size, **resources)
    metrics = {
        m.GRID_SIZE: float(grid_size),
        m.BLOCK_SIZE: float(block_size),
        **{name: float(size) for name, size in zip(m.GRID_DIMS, launch.grid, strict=True)},
        **{name: float(size) for name, size in zip(m.BLOCK_DIMS, launch.block, strict=True)},
        m.REGISTERS: float(launch.registers_per_thread),
        m.SHARED_STATIC: float(launch.shared_static_bytes),
        m.SHARED_DYNAMIC: float(launch.shared_dynamic_bytes),
        m.SM_COUNT: float(sm_count),
        m.THEORETICAL_OCCUPANCY: occupancy * 100.0,
        **{_LIMITS[resource]: float(blocks) for resource, blocks in limits.items()},
    }
    blocks_per_sm = min(limits.values())
    if blocks_per_sm > 0 and sm_count > 0:
        metrics[m.WAVES] = grid_size / (blocks_per_sm * sm_count)
    return metrics
