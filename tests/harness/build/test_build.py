"""Real nvcc builds: flags, diagnostics, resources, caching, and the failure kinds."""

import os
import re
import shutil
import stat
from pathlib import Path

import msgspec
import pytest

from kernelblaster.harness.analysis.build_report import format_build_result
from kernelblaster.harness.analysis.cuda_source import kernel_names
from kernelblaster.harness.analysis.ptxas import kernel_base_names
from kernelblaster.harness.build import cache as build_cache
from kernelblaster.harness.build import nvcc as build_module
from kernelblaster.harness.build.nvcc import BuildSpec, build, detect_arch, parse_depfile
from kernelblaster.harness.protocol.records import BuildResult
from kernelblaster.settings import Settings

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "cuda"
SM90 = Settings(arch="sm_90")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Build a fixture once per module (all into one cache)."""
    cache = tmp_path_factory.mktemp("cache")
    results: dict[tuple, BuildResult] = {}

    def get(name: str, kind: str = "shared", *flags: str) -> BuildResult:
        if (name, kind, flags) not in results:
            spec = BuildSpec(source=str(FIXTURES / name), output_kind=kind, flags=list(flags))
            results[name, kind, flags] = build(spec, SM90, cache_dir=cache)
        return results[name, kind, flags]

    return get


def pointers_alike(name: str) -> str:
    """A demangled name with pointers spelled "float*": on the H100 machine (Ubuntu 24.04) both
    ptxas's messages and the demangler's names read "float *"."""
    return re.sub(r"\s+(?=[*&])", "", name)


def entries(cache: Path) -> list[Path]:
    builds = cache / "builds"
    return [p for p in builds.iterdir() if p.name != "manifests"] if builds.is_dir() else []


def copy_fixtures(tmp_path: Path, *names: str) -> Path:
    for name in names:
        shutil.copy(FIXTURES / name, tmp_path / name)
    return tmp_path / names[0]


@pytest.mark.nvcc
def test_good_kernel_builds_a_shared_library_with_the_required_flags(built):
    result = built("good.cu")
    assert result.ok and result.error is None and not result.cached
    artifact = Path(result.artifact)
    header = artifact.read_bytes()[:18]
    assert header[:4] == b"\x7fELF" and header[16] == 3  # ET_DYN: a shared object
    command = result.command
    for flag in ("-lineinfo", "-arch=sm_90", "-O3", "-std=c++17", "-shared"):
        assert flag in command
    assert command[command.index("-Xptxas") + 1] == "-v"
    assert command[command.index("-Xcompiler") + 1] == "-fPIC"
    (kernel,) = result.resources
    assert pointers_alike(kernel.demangled) == "scale(float const*, float*, float, int)"
    assert kernel.registers > 0 and kernel.arch == "sm_90"
    assert (kernel.theoretical_occupancy, kernel.occupancy_block_size) == (1.0, 256)
    assert result.diagnostics == []
    assert len(result.key) == 64
    # where nvcc's time went, per stage (`nvcc --time`)
    stages = result.nvcc_stages_ms
    assert {"cudafe++", "cicc", "ptxas", "gcc (compiling)", "gcc (linking)"} <= set(stages)
    assert all(ms > 0 for ms in stages.values())


@pytest.mark.nvcc
def test_second_build_is_cached_even_without_nvcc(tmp_path):
    source = copy_fixtures(tmp_path, "good.cu")
    spec = BuildSpec(source=str(source), output_kind="shared")
    first = build(spec, SM90, cache_dir=tmp_path / "cache")
    assert first.ok and not first.cached
    no_nvcc = Settings(arch="sm_90", nvcc=str(tmp_path / "nonexistent" / "nvcc"))
    second = build(spec, no_nvcc, cache_dir=tmp_path / "cache")
    assert second.cached and second.ok and second.nvcc_stages_ms == {}  # nothing compiled
    assert (second.key, second.artifact, second.resources) == (
        first.key,
        first.artifact,
        first.resources,
    )
    assert second.seconds < first.seconds
    # a changed source needs nvcc again, and says how to get it
    source.write_text(source.read_text() + "// edited\n")
    missing = build(spec, no_nvcc, cache_dir=tmp_path / "cache")
    assert not missing.ok and missing.error.kind == "nvcc_missing"
    assert "CUDA toolkit" in missing.error.fix and "`nvcc` setting" in missing.error.fix


@pytest.mark.nvcc
def test_editing_an_included_header_rebuilds(tmp_path):
    source = copy_fixtures(tmp_path, "with_header.cu", "x.cuh")
    cache = tmp_path / "cache"
    spec = BuildSpec(source=str(source), output_kind="shared")
    first = build(spec, SM90, cache_dir=cache)
    assert first.ok and not first.cached
    deps = msgspec.json.decode((Path(first.artifact).parent / "deps.json").read_bytes())
    assert str(tmp_path / "x.cuh") in deps and str(source) in deps
    header = tmp_path / "x.cuh"
    header.write_text(header.read_text().replace("0.5f", "0.25f"))
    second = build(spec, SM90, cache_dir=cache)
    assert second.ok and not second.cached and second.key != first.key
    third = build(spec, SM90, cache_dir=cache)
    assert third.cached and third.key == second.key
    # both header versions stay cached: reverting hits the first entry
    header.write_text(header.read_text().replace("0.25f", "0.5f"))
    assert build(spec, SM90, cache_dir=cache).key == first.key


@pytest.mark.nvcc
def test_compile_errors_fail_with_diagnostics_and_are_not_cached(tmp_path):
    source = copy_fixtures(tmp_path, "broken.cu")
    result = build(BuildSpec(source=str(source), output_kind="shared"), SM90, cache_dir=tmp_path)
    assert not result.ok and result.artifact is None
    assert result.error.kind == "build_failed"
    assert [(d.line, d.severity) for d in result.diagnostics] == [(4, "error"), (11, "error")]
    assert all(d.file == str(source) for d in result.diagnostics)
    assert "undefined_thing" in result.error.log
    assert entries(tmp_path) == []


@pytest.mark.nvcc
def test_instantiation_error_and_host_warning(built):
    result = built("instantiation.cu")
    assert not result.ok
    warning, error = result.diagnostics
    assert (warning.line, warning.severity, warning.code) == (6, "warning", "177-D")
    assert (error.line, error.column, error.severity) == (3, 42, "error")
    assert "detected during instantiation" in error.message and "at line 7" in error.message


@pytest.mark.nvcc
def test_warnings_do_not_fail_the_build(built):
    result = built("warnings.cu")
    assert result.ok
    assert [(d.line, d.code) for d in result.diagnostics] == [(3, "177-D"), (4, "550-D")]


@pytest.mark.nvcc
def test_spills_registers_and_launch_bounds(built):
    result = built("spills.cu")
    assert result.ok
    kernels = {k.demangled.split("(")[0]: k for k in result.resources}
    spiller = kernels["spiller"]
    assert spiller.registers == 32  # 64K registers / (2 blocks x 1024 threads)
    assert spiller.spill_store_bytes > 0 and spiller.spill_load_bytes > 0
    assert spiller.stack_bytes > 0
    assert (spiller.max_threads_per_block, spiller.occupancy_block_size) == (1024, 1024)
    assert spiller.theoretical_occupancy == 1.0
    hog = kernels["register_hog"]
    assert hog.registers > 32 and hog.max_threads_per_block is None
    assert hog.occupancy_limiter == "registers" and hog.theoretical_occupancy < 1.0
    (spill_warning,) = result.diagnostics
    assert (spill_warning.line, spill_warning.severity) == (3, "warning")
    assert "spilled to local memory in function 'spiller(" in spill_warning.message


@pytest.mark.nvcc
def test_static_shared_memory_and_template_launch_bounds(built):
    (transpose,) = built("shared_mem.cu").resources
    assert transpose.shared_bytes == 32 * 33 * 4
    bounds = {pointers_alike(k.demangled): k for k in built("launch_bounds.cu").resources}
    assert bounds["bounded(float const*, float*, int)"].max_threads_per_block == 128
    templated = bounds["void templated<64>(float const*, float*)"]
    assert (templated.max_threads_per_block, templated.occupancy_block_size) == (64, 64)


@pytest.mark.nvcc
def test_too_much_shared_memory_points_at_the_kernel(built):
    result = built("too_much_shared.cu")
    assert not result.ok and result.error.kind == "build_failed"
    (error,) = result.diagnostics
    assert (error.line, error.severity) == (2, "error")
    assert "greedy(float*)' uses too much shared data" in pointers_alike(error.message)
    (greedy,) = result.resources
    assert greedy.shared_bytes == 256 * 1024
    assert (greedy.theoretical_occupancy, greedy.occupancy_limiter) == (0.0, "shared_memory")


@pytest.mark.nvcc
def test_inline_asm_errors_point_at_the_asm_line(built):
    result = built("inline_asm_error.cu")
    assert not result.ok
    assert {(d.line, d.severity) for d in result.diagnostics} == {(4, "error")}
    assert any("bogus" in d.message for d in result.diagnostics)


@pytest.mark.nvcc
def test_missing_include_and_unresolved_symbols(built):
    (missing,) = built("missing_include.cu").diagnostics
    assert (missing.line, missing.column) == (1, 10)
    assert "does_not_exist.cuh" in missing.message
    (ptxas,) = built("unresolved.cu").diagnostics
    assert ptxas.message == "ptxas: Unresolved extern function 'helper(float)'"
    assert ptxas.line == 3  # the call; line 2 declares it
    (nvlink,) = built("unresolved.cu", "shared", "-rdc=true").diagnostics
    assert nvlink.message == "nvlink: Undefined reference to 'helper(float)'"
    assert nvlink.line == 3


@pytest.mark.nvcc
def test_executable_with_an_extra_source_tracks_both_sources_headers(tmp_path):
    main = copy_fixtures(tmp_path, "standalone.cu", "with_header.cu", "x.cuh")
    spec = BuildSpec(
        source=str(main), output_kind="executable", extra_sources=[str(tmp_path / "with_header.cu")]
    )
    result = build(spec, SM90, cache_dir=tmp_path / "cache")
    assert result.ok
    artifact = Path(result.artifact)
    assert artifact.name == "standalone" and os.stat(artifact).st_mode & stat.S_IXUSR
    assert {k.demangled.split("(")[0] for k in result.resources} == {"fill", "halve_all"}
    (tmp_path / "x.cuh").write_text((tmp_path / "x.cuh").read_text() + "// edited\n")
    assert not build(spec, SM90, cache_dir=tmp_path / "cache").cached


def split_library(tmp_path: Path, *flags: str) -> BuildSpec:
    main = copy_fixtures(tmp_path, "split_kernels.cu", "split_host.cpp", "split.h")
    return BuildSpec(
        source=str(main),
        output_kind="shared",
        extra_sources=[str(tmp_path / "split_host.cpp")],
        flags=list(flags),
    )


def step_files(result: BuildResult) -> dict[str, tuple[bool, str, int]]:
    """Each step's source name (or "link"): whether it was cached, its artifact and its mtime."""
    return {
        Path(step.what).name: (step.cached, step.artifact, os.stat(step.artifact).st_mtime_ns)
        for step in result.steps
    }


@pytest.mark.nvcc
def test_several_sources_build_in_parts_and_an_edit_recompiles_only_its_part(tmp_path):
    spec = split_library(tmp_path)
    cache = tmp_path / "cache"
    first = build(spec, SM90, cache_dir=cache)
    assert first.ok and not first.cached, first.diagnostics
    assert Path(first.artifact).read_bytes()[:4] == b"\x7fELF"
    assert [Path(step.what).name for step in first.steps] == [
        "split_kernels.cu",
        "split_host.cpp",
        "link",
    ]
    assert not any(step.cached for step in first.steps)
    assert [pointers_alike(k.demangled) for k in first.resources] == ["scale(float*, float, int)"]
    assert first.nvcc_stages_ms["cicc"] > 0 and first.nvcc_stages_ms["gcc (linking)"] > 0
    before = step_files(first)

    kernels = tmp_path / "split_kernels.cu"
    kernels.write_text(kernels.read_text().replace("(n + 255) / 256, 256", "(n + 127) / 128, 128"))
    edited = build(spec, SM90, cache_dir=cache)
    after = step_files(edited)
    assert edited.ok and not edited.cached
    # the host object is reused: the same file, untouched; the kernels' object is new
    assert after["split_host.cpp"] == (True, *before["split_host.cpp"][1:])
    assert not after["split_kernels.cu"][0]
    assert after["split_kernels.cu"][1] != before["split_kernels.cu"][1]
    assert not after["link"][0] and edited.artifact != first.artifact

    again = build(spec, SM90, cache_dir=cache)
    assert again.cached and again.artifact == edited.artifact
    assert all(step.cached for step in again.steps)
    report = format_build_result(edited)
    assert "parts: split_kernels.cu " in report and "; split_host.cpp cached; link " in report

    host = tmp_path / "split_host.cpp"
    host.write_text(host.read_text().replace("2.0f", "3.0f"))
    host_edit = step_files(build(spec, SM90, cache_dir=cache))
    assert host_edit["split_kernels.cu"] == (True, *after["split_kernels.cu"][1:])
    assert not host_edit["split_host.cpp"][0]


@pytest.mark.nvcc
def test_a_shared_header_or_other_flags_rebuild_every_part(tmp_path):
    spec = split_library(tmp_path)
    cache = tmp_path / "cache"
    assert build(spec, SM90, cache_dir=cache).ok
    header = tmp_path / "split.h"
    header.write_text(header.read_text() + "// edited\n")
    edited = build(spec, SM90, cache_dir=cache)
    assert edited.ok and not any(step.cached for step in edited.steps)
    flagged = build(split_library(tmp_path, "-DKB_FLAG=1"), SM90, cache_dir=cache)
    assert flagged.ok and not any(step.cached for step in flagged.steps)


@pytest.mark.nvcc
@pytest.mark.parametrize(
    ("broken", "old", "line", "parts"),
    [  # an error in the main source stops the build before the other parts
        ("split_kernels.cu", "y[i] *= s;", 6, ["split_kernels.cu"]),
        ("split_host.cpp", "return 0;", 7, ["split_kernels.cu", "split_host.cpp"]),
    ],
)
def test_a_compile_error_in_a_part_names_its_file_and_line(tmp_path, broken, old, line, parts):
    spec = split_library(tmp_path)
    edited = tmp_path / broken
    edited.write_text(edited.read_text().replace(old, "undefined_name;"))
    result = build(spec, SM90, cache_dir=tmp_path / "cache")
    assert not result.ok and result.error.kind == "build_failed"
    assert result.source == spec.source
    assert [Path(step.what).name for step in result.steps] == parts
    assert not any(step.cached for step in result.steps)
    (error,) = [d for d in result.diagnostics if d.severity == "error"]
    assert (Path(error.file).name, error.line) == (broken, line)
    assert "undefined_name" in error.message


@pytest.mark.nvcc
def test_a_link_error_is_a_diagnostic_of_the_link(tmp_path):
    main = copy_fixtures(tmp_path, "split_kernels.cu", "split.h")  # nothing defines scale_twice
    (tmp_path / "main.cpp").write_text(
        'extern "C" int scale_twice(float* y, int n);\nint main() { return scale_twice(0, 0); }\n'
    )
    spec = BuildSpec(
        source=str(main), output_kind="executable", extra_sources=[str(tmp_path / "main.cpp")]
    )
    result = build(spec, SM90, cache_dir=tmp_path / "cache")
    assert not result.ok and result.steps[-1].what == "link"
    # at -O3 main() is in .text.startup: "main.cpp:(.text.startup+0x5): undefined reference"
    (error,) = [d for d in result.diagnostics if "undefined reference" in d.message]
    assert "scale_twice" in error.message and error.file == str(main)


@pytest.mark.nvcc
def test_object_output_and_user_flags_replace_defaults(built):
    result = built("good.cu", "object", "-O2", "-std=c++20")
    assert result.ok and result.artifact.endswith("good.o")
    assert "-c" in result.command and "-shared" not in result.command
    assert "-O2" in result.command and "-O3" not in result.command
    assert "-std=c++20" in result.command and "-std=c++17" not in result.command
    assert not any("incompatible redefinition" in d.message for d in result.diagnostics)


@pytest.mark.nvcc
def test_unsupported_arch_says_which_are_supported(tmp_path):
    spec = BuildSpec(source=str(FIXTURES / "good.cu"), output_kind="shared", arch="sm_50")
    result = build(spec, Settings(), cache_dir=tmp_path)
    assert not result.ok and result.error.kind == "wrong_arch"
    assert "sm_50" in result.error.message
    assert "sm_90" in result.error.fix  # the list nvcc itself gives


def test_bad_arch_name_and_missing_source_need_no_nvcc(tmp_path):
    spec = BuildSpec(source=str(FIXTURES / "good.cu"), output_kind="shared", arch="hopper")
    result = build(spec, Settings(), cache_dir=tmp_path)
    assert result.error.kind == "wrong_arch" and "sm_90" in result.error.fix
    spec = BuildSpec(source=str(tmp_path / "gone.cu"), output_kind="shared", arch="sm_90")
    result = build(spec, Settings(), cache_dir=tmp_path)
    assert result.error.kind == "bad_target" and "gone.cu" in result.error.message


def test_nvcc_missing_on_a_cold_cache(tmp_path):
    spec = BuildSpec(source=str(FIXTURES / "good.cu"), output_kind="shared")
    result = build(spec, Settings(arch="sm_90", nvcc="no-such-nvcc"), cache_dir=tmp_path)
    assert not result.ok and result.error.kind == "nvcc_missing"
    assert "no-such-nvcc" in result.error.message


@pytest.mark.nvcc
def test_timeout_kills_nvcc_and_leaves_no_entry(tmp_path):
    source = copy_fixtures(tmp_path, "spills.cu")
    settings = Settings(arch="sm_90", build_timeout_s=0.05)
    result = build(
        BuildSpec(source=str(source), output_kind="shared"), settings, cache_dir=tmp_path
    )
    assert not result.ok and result.error.kind == "timeout"
    assert "build_timeout_s" in result.error.fix
    assert entries(tmp_path) == []


@pytest.mark.nvcc
@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["-DBIG=" + "x" * 200_000], "longer than this machine accepts"),
        (["-Xcompiler", "-DX=$(id)"], "a shell would expand or run"),
    ],
    ids=["a-200k-character-macro", "a-command-substitution"],
)
def test_a_command_that_cannot_run_is_one_clear_build_error(tmp_path, flags, said):
    """No traceback and no unrelated hint: what is wrong with the flags, and what to do."""
    source = copy_fixtures(tmp_path, "good.cu")
    spec = BuildSpec(source=str(source), output_kind="shared", flags=flags)
    result = build(spec, SM90, cache_dir=tmp_path / "cache")
    assert not result.ok and result.error.kind == "bad_target"
    assert said in result.error.message and "flags" in result.error.fix
    assert entries(tmp_path / "cache") == []


@pytest.mark.nvcc
def test_a_store_interrupted_before_the_rename_leaves_no_entry(tmp_path, monkeypatch):
    source = copy_fixtures(tmp_path, "good.cu")
    spec = BuildSpec(source=str(source), output_kind="shared")

    def killed(*_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(build_cache.os, "rename", killed)
    with pytest.raises(KeyboardInterrupt):
        build(spec, SM90, cache_dir=tmp_path / "cache")
    monkeypatch.undo()
    builds = tmp_path / "cache" / "builds"
    # only the staging directory is left; it is never taken for an entry
    (staging,) = builds.iterdir()
    assert staging.name.startswith(".staging-")
    two_hours_ago = staging.stat().st_mtime - 7200
    os.utime(staging, (two_hours_ago, two_hours_ago))
    again = build(spec, SM90, cache_dir=tmp_path / "cache")
    assert again.ok and not again.cached
    assert not staging.exists()  # abandoned staging is cleared by the next store
    assert build(spec, SM90, cache_dir=tmp_path / "cache").cached


@pytest.mark.nvcc
def test_unknown_dependencies_give_a_usable_but_uncached_artifact(tmp_path, monkeypatch):
    source = copy_fixtures(tmp_path, "good.cu")
    spec = BuildSpec(source=str(source), output_kind="shared")
    monkeypatch.setattr(build_module, "_dependencies", lambda *_args: None)
    first = build(spec, SM90, cache_dir=tmp_path)
    assert first.ok and Path(first.artifact).is_file() and first.key == ""
    assert entries(tmp_path) == [Path(first.artifact).parent]  # the uncached directory only
    assert not build(spec, SM90, cache_dir=tmp_path).cached


def test_depfile_parsing(tmp_path):
    text = (
        "out.so : /src/k.cu \\\n"
        "    /usr/include/stdio.h \\\n"
        "    x.cuh \\\n"
        "    dir\\ with\\ space/y.h\n"
    )
    assert parse_depfile(text, tmp_path) == [
        "/src/k.cu",
        "/usr/include/stdio.h",
        str(tmp_path / "x.cuh"),
        str(tmp_path / "dir with space" / "y.h"),
    ]


def fake_nvidia_smi(directory: Path, script: str) -> None:
    tool = directory / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\n{script}\n")
    tool.chmod(0o755)


def test_detect_arch_reads_the_gpu(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, 'echo "NVIDIA H100 80GB HBM3, 9.0"')
    monkeypatch.setenv("PATH", str(tmp_path))
    choice = detect_arch(Settings())
    assert (choice.arch, choice.detected, choice.gpu_name) == (
        "sm_90",
        True,
        "NVIDIA H100 80GB HBM3",
    )
    assert detect_arch(Settings(arch="sm_80")).arch == "sm_80"
    assert detect_arch(Settings(arch="sm_80")).detected is False


def test_detect_arch_falls_back_to_sm90_with_a_note(tmp_path, monkeypatch):
    fake_nvidia_smi(
        tmp_path,
        'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."; '
        "exit 9",
    )
    monkeypatch.setenv("PATH", str(tmp_path))
    choice = detect_arch(Settings(gpu_index=3))
    assert (choice.arch, choice.detected) == ("sm_90", False)
    assert "couldn't communicate with the NVIDIA driver" in choice.note
    assert "sm_90" in choice.note and "`arch`" in choice.note
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    choice = detect_arch(Settings())
    assert (choice.arch, choice.detected) == ("sm_90", False)
    assert "no GPU found" in choice.note


@pytest.mark.nvcc
def test_report_shows_diagnostics_and_resource_table(built):
    text = format_build_result(built("spills.cu"))
    lines = text.splitlines()
    assert any(
        line.startswith(f"{FIXTURES / 'spills.cu'}:3: warning: ptxas: Registers are spilled")
        for line in lines
    )
    header = next(line for line in lines if line.startswith("kernel"))
    for column in ("regs", "spills", "smem", "stack", "occupancy", "limiter"):
        assert column in header
    hog = next(line for line in lines if line.startswith("register_hog"))
    assert "@ 256" in hog and hog.rstrip().endswith("registers")
    spiller = next(line for line in lines if line.startswith("spiller"))
    assert "100% @ 1024 (bounds)" in spiller
    failed = format_build_result(built("broken.cu"))
    assert f"{FIXTURES / 'broken.cu'}:4:38: error: identifier" in failed
    assert "build_failed" in failed


@pytest.mark.nvcc
def test_editing_an_options_file_rebuilds(tmp_path):
    """nvcc's dependency output lists the headers a source includes, not the options files
    its flags name (`--options-file`, `-optf`): their contents are in the cache's key."""
    source = copy_fixtures(tmp_path, "with_header.cu", "x.cuh")
    options = tmp_path / "nvcc.options"
    options.write_text("-DKB_OPTION=1\n")
    cache = tmp_path / "cache"
    spec = BuildSpec(source=str(source), output_kind="shared", flags=["-optf", options.name])
    first = build(spec, SM90, cache_dir=cache)
    assert first.ok and not first.cached
    assert build(spec, SM90, cache_dir=cache).cached
    options.write_text("-DKB_OPTION=2\n")
    second = build(spec, SM90, cache_dir=cache)
    assert second.ok and not second.cached and second.key != first.key
    spelled = BuildSpec(
        source=str(source), output_kind="shared", flags=[f"--options-file={options}"]
    )
    assert not build(spelled, SM90, cache_dir=cache).cached  # another spelling, another key
    options.write_text("-DKB_OPTION=1\n")
    assert build(spec, SM90, cache_dir=cache).key == first.key


@pytest.mark.nvcc
def test_a_change_to_how_nvcc_output_is_read_rebuilds(tmp_path, monkeypatch):
    """A cached build holds its diagnostics and resources as read when it was built: after a
    change to the modules that read nvcc's output, the same source is built and read again
    instead of keeping its old reading."""
    source = copy_fixtures(tmp_path, "good.cu")
    spec = BuildSpec(source=str(source), output_kind="shared")
    readers = [tmp_path / "nvcc_output.py", tmp_path / "ptxas.py"]
    for reader, module in zip(readers, build_cache._READERS, strict=True):
        shutil.copy(module, reader)
    monkeypatch.setattr(build_cache, "_READERS", tuple(str(r) for r in readers))
    first = build(spec, SM90, cache_dir=tmp_path / "cache")
    assert first.ok and build(spec, SM90, cache_dir=tmp_path / "cache").cached
    readers[1].write_text(readers[1].read_text() + "\n# a reading fixed\n")
    build_cache._readers_digest.cache_clear()  # read once a process: as the next process would
    second = build(spec, SM90, cache_dir=tmp_path / "cache")
    assert second.ok and not second.cached and second.key != first.key


DYNAMIC_PARALLELISM = """__global__ void child(float* p) { p[threadIdx.x] = 1.0f; }
__global__ void parent(float* p) { child<<<1, 32>>>(p); }
extern "C" void launch(float* p) { parent<<<1, 1>>>(p); }
"""


@pytest.mark.nvcc
def test_a_launch_from_device_code_says_to_add_rdc_and_builds_with_it(tmp_path):
    source = tmp_path / "dp.cu"
    source.write_text(DYNAMIC_PARALLELISM)
    failed = build(
        BuildSpec(source=str(source), output_kind="shared"), SM90, cache_dir=tmp_path / "cache"
    )
    assert not failed.ok and failed.error is not None
    (error,) = failed.diagnostics
    assert (error.line, error.severity) == (2, "error")
    assert error.fix.startswith('Add "-rdc=true" to nvcc_flags in kernelblaster.toml')
    assert "libcudadevrt" in error.fix
    assert failed.error.fix == error.fix
    assert f"fix: {error.fix}" in format_build_result(failed)
    # what the fix says: with the flag nvcc links the device runtime itself, nothing else needed
    fixed = build(
        BuildSpec(source=str(source), output_kind="shared", flags=["-rdc=true"]),
        SM90,
        cache_dir=tmp_path / "cache",
    )
    assert fixed.ok and fixed.artifact is not None and not fixed.diagnostics


@pytest.mark.nvcc
def test_a_missing_header_says_to_add_its_folder_and_builds_with_it(tmp_path):
    # cuda-samples include "helper_cuda.h" from their Common folder
    (tmp_path / "Common").mkdir()
    (tmp_path / "Common" / "helper_cuda.h").write_text("#pragma once\n#define CHECKED(x) (x)\n")
    (tmp_path / "sample").mkdir()
    source = tmp_path / "sample" / "k.cu"
    source.write_text(
        "#include <helper_cuda.h>\n__global__ void k(float* p) { p[0] = CHECKED(1.0f); }\n"
    )
    failed = build(
        BuildSpec(source=str(source), output_kind="shared"), SM90, cache_dir=tmp_path / "cache"
    )
    (error,) = failed.diagnostics
    assert (error.line, error.message) == (1, "helper_cuda.h: No such file or directory")
    assert error.fix.startswith(
        "Add the folder that holds helper_cuda.h to nvcc_flags in kernelblaster.toml, "
        'e.g. nvcc_flags = ["-I<folder>"]: a relative folder is relative to the source\'s folder'
    )
    assert failed.error is not None and failed.error.fix == error.fix
    # relative to the source's folder, as the fix says
    fixed = build(
        BuildSpec(source=str(source), output_kind="shared", flags=["-I../Common"]),
        SM90,
        cache_dir=tmp_path / "cache",
    )
    assert fixed.ok


@pytest.mark.nvcc
def test_a_missing_library_header_names_the_toolkit_component(tmp_path):
    source = tmp_path / "gemm.cu"
    source.write_text(
        '#include <cublas_v2.h>\nextern "C" void f() { cublasHandle_t h; (void)h; }\n'
    )
    result = build(
        BuildSpec(source=str(source), output_kind="shared"), SM90, cache_dir=tmp_path / "cache"
    )
    if result.ok:
        pytest.skip("this CUDA toolkit has cuBLAS")
    (error,) = result.diagnostics
    version = re.search(
        r"release (\d+)\.(\d+)", build_cache.nvcc_version(shutil.which("nvcc") or "nvcc")
    )
    assert version is not None
    major, minor = version.groups()
    assert error.fix == (
        "cublas_v2.h is a header of cuBLAS, a CUDA toolkit component not on this nvcc's include "
        f"path: install cuBLAS for CUDA {major}.{minor} (from NVIDIA's package repository: "
        f'libcublas-dev-{major}-{minor}), and link it: nvcc_flags = ["-lcublas"] in '
        "kernelblaster.toml."
    )


MACRO_KERNELS = """
#define SCALE_KERNEL(T) \\
    __global__ void scale_##T(T* x, T a, int n) { \\
        int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }
SCALE_KERNEL(float)
SCALE_KERNEL(double)
template <int B> __global__ void add(float* x, int n) { if (threadIdx.x < n) x[threadIdx.x] += B; }
extern "C" void launch(float* x, double* y, int n) {
    scale_float<<<(n + 255) / 256, 256>>>(x, 2.0f, n);
    scale_double<<<(n + 255) / 256, 256>>>(y, 2.0, n);
    add<1><<<1, 32>>>(x, n);
}
"""


@pytest.mark.nvcc
def test_the_kernels_a_build_compiled_are_named_where_the_source_search_cannot(tmp_path):
    """Kernels a macro defines are not found in the source (nothing names them before the
    preprocessor), but ptxas compiled them: verification's kernel watch counts a launch of
    one as the candidate's own (harness/check/check.py), not as a library's."""
    source = tmp_path / "macro.cu"
    source.write_text(MACRO_KERNELS)
    result = build(BuildSpec(source=str(source), output_kind="shared"), SM90, cache_dir=tmp_path)
    assert result.ok, result.diagnostics
    assert kernel_names(source) == ["add"]  # the macro's kernels are invisible to it
    own = kernel_base_names(result.resources)
    assert own == {"scale_float", "scale_double", "add"}
    launched = ["void scale_float(float*, float, int)", "void add<1>(float*, int)"]
    assert all(any(name in kernel for name in own) for kernel in launched)
