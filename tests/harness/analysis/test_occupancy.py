"""Theoretical occupancy against what Nsight Compute measured on an H100, and the limiters."""

from pathlib import Path

import pytest

from kernelblaster.harness.analysis.occupancy import block_limits, sm_limits, theoretical_occupancy
from kernelblaster.harness.analysis.ptxas import parse_ptxas_resources

FIVE = Path(__file__).resolve().parents[2] / "fixtures" / "ncu" / "h100-five"


@pytest.fixture(scope="module")
def ncu_launches() -> dict[str, dict[str, float]]:
    """Per kernel of the h100-five capture: its launch and ncu's occupancy metrics."""
    import ncu_report

    report = ncu_report.load_report(str(FIVE / "five.ncu-rep"))
    names = [
        "launch__block_size",
        "launch__registers_per_thread",
        "launch__shared_mem_per_block_static",
        "launch__occupancy_limit_registers",
        "launch__occupancy_limit_warps",
        "launch__occupancy_limit_blocks",
        "sm__maximum_warps_per_active_cycle_pct",
    ]
    launches = {}
    launch_range = report.range_by_idx(0)
    for index in range(launch_range.num_actions()):
        action = launch_range.action_by_idx(index)
        launches[action.name()] = {n: action.metric_by_name(n).value() for n in names}
    return launches


def test_register_hog_is_half_occupied_by_registers(ncu_launches):
    """ptxas: 56 registers; ncu: 50% theoretical occupancy at its 256-thread blocks."""
    ptxas = {
        k.demangled.split("(")[0]: k
        for k in parse_ptxas_resources((FIVE / "ptxas.txt").read_text(), arch="sm_90")
    }
    hog = ptxas["register_hog"]
    launch = ncu_launches["register_hog"]
    assert hog.registers == 56
    assert launch["launch__block_size"] == 256
    occupancy, limiter = theoretical_occupancy(
        "sm_90", registers=hog.registers, shared_bytes=hog.shared_bytes, block_size=256
    )
    assert occupancy == pytest.approx(launch["sm__maximum_warps_per_active_cycle_pct"] / 100)
    assert occupancy == 0.5
    assert limiter == "registers"


def test_every_kernel_matches_ncu_theoretical_occupancy(ncu_launches):
    resources = {
        k.demangled.split("(")[0]: k
        for k in parse_ptxas_resources((FIVE / "ptxas.txt").read_text(), arch="sm_90")
    }
    compared = 0
    for name, launch in ncu_launches.items():
        kernel = resources[name]
        block = int(launch["launch__block_size"])
        occupancy, _ = theoretical_occupancy(
            "sm_90",
            registers=kernel.registers,
            shared_bytes=kernel.shared_bytes,
            block_size=block,
        )
        assert occupancy == pytest.approx(launch["sm__maximum_warps_per_active_cycle_pct"] / 100)
        # ncu reports the registers the driver allocated (never fewer than 16 here)
        limits = block_limits(
            "sm_90",
            registers=int(launch["launch__registers_per_thread"]),
            shared_bytes=int(launch["launch__shared_mem_per_block_static"]),
            block_size=block,
        )
        assert limits["registers"] == launch["launch__occupancy_limit_registers"], name
        assert limits["warps"] == launch["launch__occupancy_limit_warps"], name
        assert limits["block_size"] == launch["launch__occupancy_limit_blocks"], name
        compared += 1
    assert compared == 5


def test_wmma_gemm_is_limited_by_registers_at_three_quarters():
    # 40 registers, 512 threads: 12 warps fit per sub-partition -> 48 of 64 warps
    assert theoretical_occupancy("sm_90", registers=40, shared_bytes=0, block_size=512) == (
        0.75,
        "registers",
    )


@pytest.mark.parametrize(
    ("arch", "registers", "shared", "block", "expected"),
    [
        ("sm_90", 32, 0, 256, (1.0, "warps")),
        ("sm_90", 32, 0, 32, (0.5, "block_size")),  # 32 blocks x 1 warp of 64
        ("sm_90", 32, 0, 768, (0.75, "warps")),  # 24-warp blocks: two fit in 64 warps
        ("sm_90", 32, 100 * 1024, 256, (0.25, "shared_memory")),  # two 101 KiB blocks in 228
        ("sm_90", 255, 0, 1024, (0.0, "registers")),  # 255 x 1024 > 64K registers per block
        ("sm_90", 16, 0, 2048, (0.0, "block_size")),  # more than 1024 threads per block
        ("sm_90", 16, 300 * 1024, 128, (0.0, "shared_memory")),  # over 227 KiB per block
        ("sm_86", 32, 0, 1024, (2 / 3, "warps")),  # 48 warps per SM on GA10x
        ("sm_89", 16, 0, 32, (0.5, "block_size")),  # 24 blocks of 1 warp, of 48
        ("sm_75", 32, 0, 256, (1.0, "warps")),  # Turing: 32 warps per SM
        ("sm_75", 128, 0, 256, (0.5, "registers")),  # 16 of 32 warps
        ("sm_80", 128, 0, 128, (0.25, "registers")),
        ("sm_120", 32, 0, 1024, (2 / 3, "warps")),
        ("sm_90a", 56, 0, 256, (0.5, "registers")),  # family suffix shares the table
    ],
)
def test_limits_per_arch(arch, registers, shared, block, expected):
    occupancy, limiter = theoretical_occupancy(
        arch, registers=registers, shared_bytes=shared, block_size=block
    )
    assert (occupancy, limiter) == (pytest.approx(expected[0]), expected[1])


def test_reserved_shared_memory_counts_per_block():
    # sm_90 keeps 1 KiB per block: 7 blocks of 31 KiB + 1 KiB fit in 228 KiB, not 7 of 31.
    limits = block_limits("sm_90", registers=16, shared_bytes=31 * 1024, block_size=64)
    assert limits["shared_memory"] == 228 // 32
    # Volta reserves nothing: 96 KiB / 32 KiB = 3
    limits = block_limits("sm_70", registers=16, shared_bytes=32 * 1024, block_size=64)
    assert limits["shared_memory"] == 3


def test_unknown_arch_and_bad_block_size_are_errors():
    with pytest.raises(ValueError, match="no occupancy limits known for sm_61"):
        sm_limits("sm_61")
    with pytest.raises(ValueError, match="not a GPU architecture"):
        sm_limits("hopper")
    with pytest.raises(ValueError, match="block size must be positive"):
        theoretical_occupancy("sm_90", registers=16, shared_bytes=0, block_size=0)
