"""ptxas -v resource reports and PTX launch bounds, from recorded tool output."""

from pathlib import Path

from kernelblaster.harness.analysis.ptxas import (
    apply_launch_bounds,
    demangle,
    parse_ptx_entries,
    parse_ptxas_resources,
    ptx_source_line,
    short_name,
)

FIVE = Path(__file__).resolve().parents[2] / "fixtures" / "ncu" / "h100-five"

# nvcc 13.0, sm_90: a spilling kernel (with a called __noinline__ device function whose own frame
# must not be taken for the kernel's), a template, a namespaced kernel.
SPILLS = (
    (
        "ptxas warning : Registers are spilled to local memory in function '_Z7spillerPKfPfi', "
        "976 bytes spill stores, 1364 bytes spill loads\n"
    )
    + """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN2ns5innerEPf' for 'sm_90'
ptxas info    : Function properties for _ZN2ns5innerEPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
ptxas info    : Compile time = 1.712 ms
ptxas info    : Compiling entry function '_Z4tmplILi128EEvPf' for 'sm_90'
ptxas info    : Function properties for _Z4tmplILi128EEvPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 1 barriers, 512 bytes smem
ptxas info    : Compile time = 1.359 ms
ptxas info    : Compiling entry function '_Z7spillerPKfPfi' for 'sm_90'
ptxas info    : Function properties for _Z7spillerPKfPfi
    680 bytes stack frame, 976 bytes spill stores, 1364 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 680 bytes cumulative stack size
ptxas info    : Compile time = 86.829 ms
ptxas info    : Function properties for _Z6helperPKfi
    48 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
"""
)

# Older ptxas (CUDA 12, sm_75) also reports constant banks per kernel.
WITH_CMEM = """\
ptxas info    : 0 bytes gmem, 256 bytes cmem[3]
ptxas info    : Compiling entry function '_ZN2ns5innerEPf' for 'sm_75'
ptxas info    : Function properties for _ZN2ns5innerEPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 4 registers, used 0 barriers, 360 bytes cmem[0], 8 bytes cmem[2]
"""

# From `nvcc -keep` with -lineinfo: a templated kernel with __launch_bounds__(N) and a kernel
# with __launch_bounds__(32, 4).
PTX = """\
.visible .entry _Z10multi_lineILi64EEvPKfPf(
\t.param .u64 _Z10multi_lineILi64EEvPKfPf_param_0,
\t.param .u64 _Z10multi_lineILi64EEvPKfPf_param_1
)
.maxntid 64, 1, 1
{
\t.loc\t1 6 0
\tld.param.u64 \t%rd1, [_Z10multi_lineILi64EEvPKfPf_param_0];
\t.loc\t1 10 5
\tmov.u32 \t%r1, %tid.x;
\t.loc\t2 2 38, function_name $L__info_string0, inlined_at 1 10 5
\tmul.f32 \t%f2, %f1, 0f40000000;
\tret;
}
.visible .entry _Z12empty_kernelv()
.maxntid 32, 2, 1
.minnctapersm 4
{
\t.loc\t1 13 0
\tret;
}
\t.file\t1 "/tmp/exp/ml.cu"
\t.file\t2 "/tmp/exp/x.cuh"
"""


def test_fixture_report_from_h100():
    kernels = parse_ptxas_resources((FIVE / "ptxas.txt").read_text(), arch="sm_90")
    by_name = {k.name: k for k in kernels}
    assert len(kernels) == 7
    hog = by_name["_Z12register_hogPKfPfi"]
    assert hog.demangled == "register_hog(float const*, float*, int)"
    assert (hog.registers, hog.arch, hog.shared_bytes) == (56, "sm_90", 0)
    assert (hog.theoretical_occupancy, hog.occupancy_limiter) == (0.5, "registers")
    assert hog.occupancy_block_size == 256 and hog.max_threads_per_block is None
    smem = by_name["_Z15smem_column_sumPKfPfi"]
    assert (smem.registers, smem.shared_bytes) == (28, 4096)
    assert by_name["_Z9fill_halfP6__halfl"].demangled == "fill_half(__half*, long)"


def test_spills_stack_and_templates():
    kernels = {k.name: k for k in parse_ptxas_resources(SPILLS, arch="sm_90")}
    assert list(kernels) == ["_ZN2ns5innerEPf", "_Z4tmplILi128EEvPf", "_Z7spillerPKfPfi"]
    spiller = kernels["_Z7spillerPKfPfi"]
    # the helper's properties, printed after the kernel's, are not the kernel's
    assert (spiller.spill_store_bytes, spiller.spill_load_bytes) == (976, 1364)
    assert spiller.stack_bytes == 680
    assert spiller.registers == 32
    template = kernels["_Z4tmplILi128EEvPf"]
    assert template.demangled == "void tmpl<128>(float*)"
    assert (template.shared_bytes, template.registers) == (512, 12)
    assert kernels["_ZN2ns5innerEPf"].demangled == "ns::inner(float*)"
    assert kernels["_ZN2ns5innerEPf"].stack_bytes == 0


def test_constant_banks_are_summed_and_arch_taken_from_ptxas():
    (kernel,) = parse_ptxas_resources(WITH_CMEM, arch="sm_90")
    assert kernel.arch == "sm_75"
    assert kernel.constant_bytes == 368
    assert kernel.registers == 4


def test_unknown_arch_reports_usage_without_occupancy():
    text = WITH_CMEM.replace("sm_75", "sm_61")
    (kernel,) = parse_ptxas_resources(text, arch="sm_61")
    assert kernel.registers == 4
    assert kernel.theoretical_occupancy is None and kernel.occupancy_limiter is None


def test_ptx_entries_give_launch_bounds_and_definition_lines():
    entries = parse_ptx_entries(PTX)
    multi = entries["_Z10multi_lineILi64EEvPKfPf"]
    assert (multi.max_threads, multi.file, multi.line) == (64, "/tmp/exp/ml.cu", 6)
    empty = entries["_Z12empty_kernelv"]
    assert (empty.max_threads, empty.line) == (64, 13)  # 32 x 2 x 1


def test_launch_bounds_set_occupancy_block_size():
    kernels = parse_ptxas_resources(
        "ptxas info    : Compiling entry function '_Z10multi_lineILi64EEvPKfPf' for 'sm_90'\n"
        "ptxas info    : Used 200 registers, used 0 barriers\n",
        arch="sm_90",
    )
    assert kernels[0].occupancy_block_size == 256
    assert kernels[0].theoretical_occupancy == 0.125  # 256 x 200 registers: 1 block of 8 warps
    apply_launch_bounds(kernels, parse_ptx_entries(PTX))
    assert kernels[0].max_threads_per_block == 64
    assert kernels[0].occupancy_block_size == 64
    assert kernels[0].theoretical_occupancy == 0.125  # 2 warps x 4 partitions' worth = 8 warps


def test_ptx_line_maps_back_to_source_through_loc():
    # PTX line 10 is the mov after `.loc 1 10 5`; line 12 follows the inlined header's .loc
    assert ptx_source_line(PTX, 10) == ("/tmp/exp/ml.cu", 10)
    assert ptx_source_line(PTX, 12) == ("/tmp/exp/x.cuh", 2)
    assert ptx_source_line(PTX, 3) is None


def test_demangle_and_short_names():
    names = demangle(["_Z4tmplILi128EEvPf", "not_mangled", "_Zgarbage"])
    assert names["_Z4tmplILi128EEvPf"] == "void tmpl<128>(float*)"
    assert names["_Zgarbage"] == "_Zgarbage"  # left as is
    assert "not_mangled" not in names
    assert short_name("void tmpl<128>(float*)") == "tmpl"
    assert short_name("void ns::k<a<b<c>>, 3>(int)") == "k"
    assert short_name("register_hog(float const*, float*, int)") == "register_hog"
    # torch's kernels live in anonymous namespaces; ncu names this one by its last identifier
    torch_kernel = "void at::native::(anonymous namespace)::fill_kernel<float, 4>(int, float)"
    assert short_name(torch_kernel) == "fill_kernel"
