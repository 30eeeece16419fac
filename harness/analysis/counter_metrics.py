"""The metrics of the in-process quick profile (harness/profile/counters.py), named as ncu names
them, so that the classifier reads them unchanged. Torch-free.

Of the metrics the classifier reads (harness/analysis/ncu_metrics.py), only the hardware ones are
counted by CUPTI's Range Profiler: PerfWorks counters and the ratios and throughputs built on them
(speed of light, duration, pipe utilizations, achieved occupancy, issue activity, stall ratios,
threads per instruction, bank conflicts and wavefronts, hit rates, DRAM bytes). The others are
not measured by the hardware at all:

- `launch__*` (grid and block, registers, shared memory, SM count, waves, each resource's limit
  on resident blocks) and `sm__maximum_warps_per_active_cycle_pct` (theoretical occupancy):
  ncu computes them from the launch and its occupancy calculator. `launch_metrics` computes
  them from the recorded launch with harness/analysis/occupancy.py, the project's one calculator;
  the committed ncu reports check it (tests/harness/analysis/test_counter_metrics.py);
- `derived__*` (computed by ncu's section scripts) and `sass__*`/`smsp__sass_*` (counted by
  instrumenting the kernel's SASS): left absent, and the findings built on them (global
  coalescing, register spills, FLOP-based headroom) report nothing, as on any profile
  without them.
"""

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


# What the in-process pass asks CUPTI for: every hardware metric the classifier keeps, and the
# stall ratio of every reason ncu reports. A GPU without one of them (the sm_90-only tensor-pipe
# and gmma metrics elsewhere) collects the others; harness/check/cupti.py says which were left out.
# Not the tensor or cache roofline's counts: a roofline point needs the SASS FLOP counts too,
# which this pass cannot have, and every counter more can cost the save another replay.
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
    `sm_count` SMs (`launch.waves_per_sm` is not read: it is computed here).

    The shared-memory limit is the one of the largest carveout, where ncu reports the carveout
    the driver picked for the launch: both agree whenever shared memory is what limits the
    kernel (the driver then picks the largest); otherwise ours is larger and limits nothing.
    ncu's barrier limit is not modelled and stays absent. A block too large to launch at all
    has no waves."""
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
