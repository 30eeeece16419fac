"""nvcc, host-compiler, ptxas and linker messages as SourceDiagnostics: real nvcc runs on broken
fixtures, and recorded output for the formats a run here can't easily provoke."""

import shutil
import subprocess
from pathlib import Path

import pytest

from kernelblaster.harness.analysis.nvcc_output import parse_nvcc_output
from kernelblaster.harness.protocol.records import SourcePosition

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "cuda"


def nvcc_output(source: Path, *flags: str) -> str:
    out = subprocess.run(
        [
            "nvcc",
            "-arch=sm_90",
            "-std=c++17",
            "-c",
            "-o",
            str(source.with_suffix(".o")),
            *flags,
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode != 0 or "warning" in out.stdout + out.stderr
    return out.stdout + out.stderr


def failed_link_output(source: Path, *flags: str) -> str:
    """nvcc's output for compiling and linking `source` into a program, which must fail."""
    out = subprocess.run(
        ["nvcc", "-arch=sm_90", *flags, "-o", str(source.with_suffix("")), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode != 0
    return out.stdout + out.stderr


@pytest.mark.nvcc
def test_real_front_end_errors_have_lines_columns_and_no_excerpt(tmp_path):
    source = tmp_path / "broken.cu"
    shutil.copy(FIXTURES / "broken.cu", source)
    diagnostics = parse_nvcc_output(nvcc_output(source), source=str(source))
    assert [(d.line, d.severity) for d in diagnostics] == [(4, "error"), (11, "error")]
    undefined, bad_init = diagnostics
    assert undefined.file == str(source)
    assert undefined.message == 'identifier "undefined_thing" is undefined'
    # EDG prints `__device__` as `__attribute__((device))`; the column is the real file's
    assert undefined.column == 38
    line = source.read_text().splitlines()[3]
    assert line[undefined.column - 1 :].startswith("undefined_thing")
    assert bad_init.column == 16 and "cannot be used to initialize" in bad_init.message


@pytest.mark.nvcc
def test_real_warnings_carry_their_codes(tmp_path):
    source = tmp_path / "warnings.cu"
    shutil.copy(FIXTURES / "warnings.cu", source)
    diagnostics = parse_nvcc_output(nvcc_output(source), source=str(source))
    assert [(d.line, d.column, d.severity, d.code) for d in diagnostics] == [
        (3, 9, "warning", "177-D"),
        (4, 9, "warning", "550-D"),
    ]
    assert diagnostics[0].message == 'variable "unused" was declared but never referenced'


@pytest.mark.nvcc
def test_real_error_in_included_header_is_shown_at_the_include_line(tmp_path):
    # EDG names no include chain: the source's #include that reaches the header is found
    shutil.copy(FIXTURES / "with_header.cu", tmp_path / "with_header.cu")
    (tmp_path / "x.cuh").write_text(
        "#pragma once\n__device__ inline float halve(float v) { return 0.5f * missing; }\n"
    )
    source = tmp_path / "with_header.cu"
    (diagnostic,) = parse_nvcc_output(nvcc_output(source), source=str(source))
    column = len("__device__ inline float halve(float v) { return 0.5f * ") + 1
    assert (diagnostic.file, diagnostic.line, diagnostic.column) == (str(source), 2, 0)
    assert source.read_text().splitlines()[1] == '#include "x.cuh"'
    assert diagnostic.severity == "error"
    assert diagnostic.message == f'x.cuh:2:{column}: identifier "missing" is undefined'
    assert diagnostic.reported_at == SourcePosition(
        file=str(tmp_path / "x.cuh"), line=2, column=column
    )


@pytest.mark.nvcc
def test_real_error_in_a_header_reached_through_another_is_at_the_first_include(tmp_path):
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "outer.cuh").write_text('#pragma once\n#include "inner.cuh"\n')
    (tmp_path / "inc" / "inner.cuh").write_text(
        "#pragma once\n\n__device__ inline float f(float v) { return v * missing; }\n"
    )
    source = tmp_path / "main.cu"
    source.write_text(
        "#include <cstdio>\n"
        '#include "inc/outer.cuh"\n'
        "__global__ void k(float* p) { p[0] = f(p[0]); }\n"
    )
    (diagnostic,) = parse_nvcc_output(nvcc_output(source), source=str(source))
    assert (diagnostic.file, diagnostic.line) == (str(source), 2)
    assert diagnostic.message.startswith("inc/inner.cuh:3:")
    assert diagnostic.reported_at is not None
    assert (diagnostic.reported_at.file, diagnostic.reported_at.line) == (
        str(tmp_path / "inc" / "inner.cuh"),
        3,
    )


@pytest.mark.nvcc
def test_real_error_in_a_header_template_is_at_its_instantiation_in_the_source(tmp_path):
    (tmp_path / "util.cuh").write_text(
        "#pragma once\ntemplate <typename T>\n__device__ T thrice(T x) { return x.bogus * 3; }\n"
    )
    source = tmp_path / "main.cu"
    source.write_text(
        '#include "util.cuh"\n'
        "template <typename T>\n"
        "__global__ void k(T* p) { p[0] = thrice(p[0]); }\n"
        "void launch(float* p) {\n"
        "  k<<<1, 1>>>(p);\n"
        "}\n"
    )
    (diagnostic,) = parse_nvcc_output(nvcc_output(source), source=str(source))
    # EDG names thrice's instantiation at line 3, then k's at line 5: the first is the nearest
    assert "at line 3 of" in diagnostic.message and "at line 5 of" in diagnostic.message
    assert (diagnostic.file, diagnostic.line, diagnostic.severity) == (str(source), 3, "error")
    assert diagnostic.message.startswith("util.cuh:3:")
    assert diagnostic.reported_at is not None and diagnostic.reported_at.line == 3


@pytest.mark.nvcc
def test_real_host_compiler_error_in_a_header_follows_the_include_chain(tmp_path):
    # gcc names the chain ("In file included from a.cuh:2, from main.cu:3:")
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "a.cuh").write_text('#pragma once\n#include "b.cuh"\n')
    (tmp_path / "inc" / "b.cuh").write_text("#pragma once\n#include <no_such_header.h>\n")
    source = tmp_path / "main.cu"
    source.write_text('#include <cstdio>\n// line 2\n#include "a.cuh"\nint main() {}\n')
    output = nvcc_output(source, f"-I{tmp_path / 'inc'}")
    assert "In file included from" in output
    (missing,) = parse_nvcc_output(output, source=str(source))
    assert (missing.file, missing.line, missing.severity) == (str(source), 3, "error")
    assert missing.message == "inc/b.cuh:2:10: no_such_header.h: No such file or directory"
    assert missing.reported_at == SourcePosition(
        file=str(tmp_path / "inc" / "b.cuh"), line=2, column=10
    )


@pytest.mark.nvcc
def test_real_warnings_in_headers_found_through_an_include_folder(tmp_path):
    # a header found through -I is not beside its includer: a file the output names stands in
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "a.cuh").write_text(
        '#pragma once\n#include "b.cuh"\ninline int first(int a) { int unused1; return a; }\n'
    )
    (tmp_path / "inc" / "b.cuh").write_text(
        "#pragma once\ninline int second(int a) { int unused2; return a; }\n"
    )
    source = tmp_path / "main.cu"
    source.write_text(
        '#include <cstdio>\n// line 2\n#include "a.cuh"\nint main() { return first(second(1)); }\n'
    )
    diagnostics = parse_nvcc_output(
        nvcc_output(source, f"-I{tmp_path / 'inc'}"), source=str(source)
    )
    assert [(d.file, d.line, d.severity) for d in diagnostics] == [(str(source), 3, "warning")] * 2
    assert [d.message.split(": ")[0] for d in diagnostics] == [
        f"inc/b.cuh:2:{len('inline int second(int a) { int ') + 1}",
        f"inc/a.cuh:3:{len('inline int first(int a) { int ') + 1}",
    ]


def test_instantiation_context_belongs_to_the_error(tmp_path):
    source = tmp_path / "inst.cu"
    source.write_text(
        "#include <cstdio>\ntemplate <typename T>\n"
        "__global__ void apply(T* out) { out[0] = out[0].nope(); }\n"
    )
    output = (
        f'{source}(3): error: expression must have class type but it has type "float"\n'
        "  __attribute__((global)) void apply(T* out) { out[0] = out[0].nope(); }\n"
        "                                                        ^\n"
        '          detected during instantiation of "void apply(T *) [with T=float]" at line 6\n'
        "\n"
        f'1 error detected in the compilation of "{source}".\n'
    )
    (diagnostic,) = parse_nvcc_output(output, source=str(source))
    assert diagnostic.line == 3
    assert diagnostic.column == 42  # the second `out` after the `{`, in the real line
    assert diagnostic.message.splitlines() == [
        'expression must have class type but it has type "float"',
        'detected during instantiation of "void apply(T *) [with T=float]" at line 6',
    ]


def test_notes_in_system_headers_keep_their_own_path(tmp_path):
    source = tmp_path / "h.cu"
    source.write_text('#include <vector>\nvoid f() { std::vector<int> v; v.push_back("s"); }\n')
    output = (
        f'{source}(2): error: no instance of overloaded function "std::vector<int>::push_back" '
        "matches the argument list\n"
        "            argument types are: (const char [2])\n"
        '  void f() { std::vector<int> v; v.push_back("s"); }\n'
        "                                   ^\n"
        '/usr/include/c++/12/bits/stl_vector.h(1293): note #3326-D: function "push_back" does '
        "not match because argument #1 does not match parameter\n"
        "        push_back(value_type&& __x)\n"
        "        ^\n"
    )
    error, note = parse_nvcc_output(output, source=str(source))
    assert (error.line, error.column, error.severity) == (2, 34, "error")
    assert source.read_text().splitlines()[1][error.column - 1 :].startswith("push_back")
    assert error.message.endswith("\nargument types are: (const char [2])")
    assert note.file == "/usr/include/c++/12/bits/stl_vector.h"
    assert (note.line, note.severity, note.code) == (1293, "info", "3326-D")


def test_host_compiler_messages(tmp_path):
    source = tmp_path / "m.cu"
    source.write_text('#include "nope.cuh"\n')
    output = (
        f"{source}:1:10: fatal error: nope.cuh: No such file or directory\n"
        '    1 | #include "nope.cuh"\n'
        "      |          ^~~~~~~~~~\n"
        "compilation terminated.\n"
        f"In file included from {source}:1:\n"
        f"{tmp_path}/a.h:3:7: warning: unused variable 'x' [-Wunused-variable]\n"
        "    3 |   int x;\n"
        "      |       ^\n"
    )
    missing, unused = parse_nvcc_output(output, source=str(source))
    assert (missing.line, missing.column, missing.severity) == (1, 10, "error")
    assert missing.message == "nope.cuh: No such file or directory"
    assert missing.reported_at is None  # in the source: as the compiler said
    assert (unused.file, unused.line, unused.column) == (str(source), 1, 0)
    assert unused.reported_at == SourcePosition(file=f"{tmp_path}/a.h", line=3, column=7)
    assert unused.code == "-Wunused-variable"
    assert unused.message == "a.h:3:7: unused variable 'x'"


@pytest.mark.nvcc
def test_real_host_compiler_notes_belong_to_the_warning_they_explain(tmp_path):
    # gcc's "note: declared here" (here in the user's file; for a deprecated CUDA runtime call,
    # in cuda_runtime_api.h) was a diagnostic of its own, one saying "declared here" alone
    source = tmp_path / "deprecated.cu"
    source.write_text(
        "__global__ void k(float* x) { x[0] = 1; }\n"
        '[[deprecated("use new_api")]] void old_api() {}\n'
        "void host() {\n"
        "  old_api();\n"
        "}\n"
    )
    (warning,) = parse_nvcc_output(nvcc_output(source), source=str(source))
    assert (warning.file, warning.line, warning.column) == (str(source), 4, 8)
    assert warning.code == "-Wdeprecated-declarations"
    first, note = warning.message.splitlines()
    assert "old_api()" in first and "deprecated" in first
    assert note == f"{source}:2:36: note: declared here"


def test_ptxas_and_nvlink_messages_are_pinned_to_the_kernel(tmp_path):
    source = tmp_path / "k.cu"
    source.write_text(
        "extern __device__ float helper(float);\n"
        "\n"
        "__global__ void\n"
        "greedy(float* out) { __shared__ float t[65536]; t[0] = helper(1); out[0] = t[1]; }\n"
    )
    output = (
        "ptxas error   : Entry function '_Z6greedyPf' uses too much shared data "
        "(0x40000 bytes, 0xc000 max)\n"
        "ptxas info    : 0 bytes gmem\n"
        "nvlink error   : Undefined reference to '_Z6helperf' in '/tmp/tmpxft_0000_11_k.o'\n"
    )
    shared, link = parse_nvcc_output(output, source=str(source))
    assert (shared.line, shared.severity) == (4, "error")  # the kernel's name line
    assert shared.message.startswith("ptxas: Entry function 'greedy(float*)' uses too much")
    assert link.line == 4  # where helper is called (line 1 declares it)
    assert link.message == "nvlink: Undefined reference to 'helper(float)'"
    # with the PTX's definition lines, those win
    (shared,) = parse_nvcc_output(
        output.splitlines()[0], source=str(source), kernel_lines={"_Z6greedyPf": (str(source), 3)}
    )
    assert shared.line == 3


@pytest.mark.nvcc
def test_real_spill_warning_of_a_function_two_kernels_call_is_shown_once(tmp_path):
    # ptxas prints "Registers are spilled ... in function '_Z5heavyPKfi'" once per kernel that
    # calls it: the same diagnostic twice at the same line
    source = tmp_path / "spill.cu"
    source.write_text(
        "__device__ __noinline__ float heavy(const float* in, int n) {\n"
        "  float v[24];\n"
        "#pragma unroll\n"
        "  for (int i = 0; i < 24; ++i) v[i] = in[i * n];\n"
        "  float s = 0;\n"
        "#pragma unroll\n"
        "  for (int i = 0; i < 24; ++i)\n"
        "#pragma unroll\n"
        "    for (int j = 0; j < 24; ++j) s += v[i] * v[j] * (i ^ j);\n"
        "  return s;\n"
        "}\n"
        "__global__ void a(const float* in, float* out, int n) { out[0] = heavy(in, n); }\n"
        "__global__ void b(const float* in, float* out, int n) { out[1] = heavy(in, n + 1); }\n"
    )
    output = nvcc_output(source, "-maxrregcount=24", "-Xptxas", "-v", "-Xptxas", "-warn-spills")
    assert output.count("Registers are spilled to local memory in function '_Z5heavyPKfi'") == 2
    diagnostics = parse_nvcc_output(output, source=str(source))
    spills = [d for d in diagnostics if "Registers are spilled" in d.message]
    (spill,) = spills
    assert (spill.line, spill.severity) == (1, "warning")
    assert "in function 'heavy(float const*, int)'" in spill.message


def test_tool_failures_without_position_go_to_line_one(tmp_path):
    source = tmp_path / "k.cu"
    source.write_text("__global__ void k() {}\n")
    (fatal,) = parse_nvcc_output(
        "nvcc fatal   : Unsupported gpu architecture 'sm_50'\n", source=str(source)
    )
    assert (fatal.file, fatal.line, fatal.severity) == (str(source), 1, "error")
    assert fatal.message == "nvcc: Unsupported gpu architecture 'sm_50'"
    (warning,) = parse_nvcc_output(
        "nvcc warning : incompatible redefinition for option 'std', the last value of this "
        "option was used\n",
        source=str(source),
    )
    assert (warning.line, warning.severity) == (1, "warning")


def test_linker_errors_name_the_symbol_and_drop_the_summary(tmp_path):
    source = tmp_path / "p.cu"
    source.write_text("void undefined_host();\nint main() { undefined_host(); }\n")
    output = (
        "/usr/bin/ld: /tmp/tmpxft_0000332c_00000000-11_p.o: in function `main':\n"
        "tmpxft_0000332c_00000000-6_p.cudafe1.cpp:(.text+0x8b): undefined reference to "
        "`undefined_host()'\n"
        "collect2: error: ld returned 1 exit status\n"
    )
    (undefined,) = parse_nvcc_output(output, source=str(source))
    assert undefined.message == "undefined reference to `undefined_host()'"
    assert (undefined.line, undefined.severity) == (
        2,
        "error",
    )  # the call, not line 1's declaration
    (missing_library,) = parse_nvcc_output(
        "/usr/bin/ld: cannot find -lnotexist: No such file or directory\n"
        "collect2: error: ld returned 1 exit status\n",
        source=str(source),
    )
    assert missing_library.message == "ld: cannot find -lnotexist: No such file or directory"


@pytest.mark.nvcc
def test_real_linker_errors_after_the_first_are_as_clean_as_the_first(tmp_path):
    # ld prints "/usr/bin/ld: p.cudafe1.cpp:(.text+0x..): undefined reference to ..." for every
    # undefined symbol of a function but the first: those kept ld's prefix and nvcc's
    # intermediate file name, and the symbol was not looked up
    source = tmp_path / "p.cu"
    source.write_text(
        "void first_missing();\nvoid second_missing();\n"
        "int main() {\n  first_missing();\n  second_missing();\n}\n"
    )
    diagnostics = parse_nvcc_output(failed_link_output(source), source=str(source))
    assert [(d.line, d.severity, d.message) for d in diagnostics] == [
        (4, "error", "undefined reference to `first_missing()'"),
        (5, "error", "undefined reference to `second_missing()'"),
    ]


def test_a_summary_alone_still_explains_the_failure(tmp_path):
    source = tmp_path / "k.cu"
    source.write_text("\n")
    (summary,) = parse_nvcc_output(
        "collect2: error: ld returned 1 exit status\n", source=str(source)
    )
    assert summary.severity == "error" and "ld returned 1" in summary.message


def test_ptxas_error_on_a_ptx_line_maps_through_the_kept_ptx(tmp_path):
    source = tmp_path / "asm.cu"
    source.write_text('__global__ void k(float* o) {\n  asm("bogus;");\n}\n')
    ptx = tmp_path / "asm.ptx"
    ptx.write_text(
        f'.visible .entry _Z1kPf()\n{{\n\t.loc\t1 2 3\n\tbogus;\n}}\n\t.file\t1 "{source}"\n'
    )
    (error,) = parse_nvcc_output(
        f"ptxas {ptx}, line 4; error   : Not a name of any known instruction: 'bogus'\n"
        "ptxas fatal   : Ptx assembly aborted due to errors\n",
        source=str(source),
    )
    assert (error.file, error.line, error.severity) == (str(source), 2, "error")
    assert error.message == "ptxas: Not a name of any known instruction: 'bogus' (PTX line 4)"


@pytest.mark.nvcc
@pytest.mark.parametrize("device", [False, True])
def test_real_undefined_reference_is_at_the_call_not_the_declaration(tmp_path, device):
    # cuda-samples and llm.c declare a helper early and call it far below: the declaration,
    # also the name's first mention, is not where the missing definition is needed
    source = tmp_path / "p.cu"
    source.write_text(
        "// helpers from another file: scale_on_host(), dev_helper()\n"
        "float *scale_on_host(float* data,\n"
        "                     int n);\n"
        "extern __device__ float dev_helper(float);\n"
        "__global__ void k(float* x) {\n"
        f"  x[0] = {'dev_helper(x[0])' if device else '1.0f'};\n"
        "}\n"
        "int main() {\n"
        "  float* p = nullptr;\n"
        "  k<<<1, 1>>>(p);\n"
        f"  return {'0' if device else 'scale_on_host(p, 1) == nullptr'};\n"
        "}\n"
    )
    diagnostics = parse_nvcc_output(failed_link_output(source, "-rdc=true"), source=str(source))
    expected = (
        (6, "nvlink: Undefined reference to 'dev_helper(float)'")
        if device
        else (11, "undefined reference to `scale_on_host(float*, int)'")
    )
    assert [(d.line, d.message) for d in diagnostics] == [expected]
