"""nvcc's steps run with the host front end beside the device compile (harness/build/nvcc_steps.py),
against nvcc itself: the same bytes, the same output, the same files read, on real builds."""

import re
import shutil
import subprocess
from pathlib import Path

import psutil
import pytest

from kernelblaster.harness.build import nvcc_steps
from kernelblaster.harness.build.nvcc import parse_depfile
from kernelblaster.harness.build.nvcc_steps import run_nvcc

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cuda"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
OUTPUT_KIND = {"shared": ["-shared", "-Xcompiler", "-fPIC"], "object": ["-c"], "executable": []}
ARTIFACT = {"shared": "out.so", "object": "out.o", "executable": "out"}
# ptxas reports its own running time
_PTXAS_TIME = re.compile(r"^ptxas info\s*: Compile time = .*$", re.MULTILINE)

pytestmark = pytest.mark.nvcc


def _command(source: Path, kind: str, *flags: str) -> list[str]:
    return [
        "nvcc",
        "-arch=sm_90",
        "-O3",
        "-std=c++17",
        "-lineinfo",
        "-Xptxas",
        "-v",
        *OUTPUT_KIND[kind],
        *flags,
        "-keep",
        "-keep-dir=keep",
        "-o",
        ARTIFACT[kind],
        source.name,
    ]


class Built:
    """One way of running a command, in its own directory: what came out of it."""

    def __init__(self, directory: Path, ran: nvcc_steps.NvccRun, kind: str):
        self.ran = ran
        self.output = _PTXAS_TIME.sub("", ran.output)
        artifact = directory / ARTIFACT[kind]
        self.artifact = artifact.read_bytes() if artifact.is_file() else None
        keep = directory / "keep"
        self.kept = {path.name: path.read_bytes() for path in sorted(keep.iterdir())}
        depfile = directory / "deps.d"
        self.deps = (
            set(parse_depfile(depfile.read_text(), directory)) if depfile.is_file() else None
        )


def _build(tmp_path: Path, source: Path, kind: str, *flags: str, split: bool) -> Built:
    """`source` built in `tmp_path/work` (the same paths both ways: nvcc writes them into what
    it makes), moved aside afterwards."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "keep").mkdir()
    shutil.copy2(source, work / source.name)  # its time is in the line table
    command = _command(work / source.name, kind, *flags)
    ran = run_nvcc(command, cwd=work, timeout=120, deps=work / "deps.d", split=split)
    built = Built(work, ran, kind)
    work.rename(tmp_path / ("split" if split else "whole"))
    return built


def _both(tmp_path: Path, source: Path, kind: str, *flags: str) -> tuple[Built, Built]:
    return (
        _build(tmp_path, source, kind, *flags, split=False),
        _build(tmp_path, source, kind, *flags, split=True),
    )


@pytest.mark.parametrize(
    ("source", "kind", "flags"),
    [
        (EXAMPLES / "softmax.cu", "shared", ()),
        (EXAMPLES / "saxpy_program.cu", "executable", ()),
        (FIXTURES / "split_kernels.cu", "object", ("-Xcompiler", "-fPIC", f"-I{FIXTURES}")),
        (FIXTURES / "warnings.cu", "shared", ("--use_fast_math", "-DSCALE=2")),
        (EXAMPLES / "relu.cu", "shared", ("-rdc=true",)),  # relocatable: nvlink links for real
    ],
    ids=["shared", "executable", "object", "warnings-and-flags", "relocatable"],
)
def test_split_build_makes_nvccs_bytes_output_and_dependencies(tmp_path, source, kind, flags):
    whole, split = _both(tmp_path, source, kind, *flags)
    assert split.ran.split and not whole.ran.split
    assert whole.ran.returncode == split.ran.returncode == 0
    assert split.artifact is not None and split.artifact == whole.artifact
    assert split.kept.keys() == whole.kept.keys()  # cicc's own module id is not left behind
    assert [name for name in whole.kept if split.kept[name] != whole.kept[name]] == []
    assert split.output == whole.output
    assert split.deps == whole.deps and str(tmp_path / "work" / source.name) in split.deps
    # the same stages as `nvcc --time` names them (nvcc (driver): here, the dry run)
    assert split.ran.stages_ms.keys() == whole.ran.stages_ms.keys()


@pytest.mark.parametrize(
    ("fixture", "failing"),
    [
        ("broken.cu", "error"),  # both front ends reject it; nvcc stops at cudafe++
        ("missing_include.cu", "fatal error"),  # the preprocessor
        ("too_much_shared.cu", "ptxas error"),  # the device chain fails, the host chain passed
        ("unresolved.cu", "ptxas"),
    ],
)
def test_a_failing_step_gives_nvccs_output(tmp_path, fixture, failing):
    whole, split = _both(tmp_path, FIXTURES / fixture, "shared")
    assert split.ran.split
    assert whole.ran.returncode != 0 and split.ran.returncode != 0
    assert failing in split.output
    assert split.output == whole.output
    assert split.artifact is None


def test_nvccs_own_warnings_come_first_as_nvcc_prints_them(tmp_path):
    # (-G's artifacts differ, but not through the split: nvcc records `--time`'s file, which
    # only the whole run is given, in nvlink's tool notes when it links for the debugger)
    whole, split = _both(tmp_path, EXAMPLES / "relu.cu", "shared", "-G")
    assert split.ran.split
    assert split.output.startswith("nvcc warning : '--device-debug (-G)' overrides")
    assert split.output == whole.output


def test_two_architectures_run_as_one_nvcc_command(tmp_path):
    (tmp_path / "keep").mkdir()
    shutil.copy(FIXTURES / "good.cu", tmp_path / "good.cu")
    command = [part for part in _command(tmp_path / "good.cu", "object") if part != "-arch=sm_90"]
    two = ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90"]
    ran = run_nvcc([*command, *two], cwd=tmp_path, timeout=120, deps=tmp_path / "deps.d")
    assert not ran.split and ran.returncode == 0
    assert ran.stages_ms["cicc"] > 0  # from `nvcc --time`
    assert (tmp_path / "out.o").is_file() and (tmp_path / "deps.d").is_file()


def test_a_link_of_objects_runs_as_one_nvcc_command(tmp_path):
    (tmp_path / "keep").mkdir()
    shutil.copy(FIXTURES / "good.cu", tmp_path / "good.cu")
    compiled = run_nvcc(
        _command(tmp_path / "good.cu", "object", "-Xcompiler", "-fPIC"),
        cwd=tmp_path,
        timeout=120,
        deps=tmp_path / "deps.d",
    )
    assert compiled.split and compiled.returncode == 0
    link = ["nvcc", "-arch=sm_90", "-shared", "-keep", "-keep-dir=keep", "-o", "out.so", "out.o"]
    linked = run_nvcc(link, cwd=tmp_path, timeout=120, deps=tmp_path / "link.d")
    assert not linked.split and linked.returncode == 0 and (tmp_path / "out.so").is_file()


def test_module_ids_that_disagree_run_nvcc_whole(tmp_path, monkeypatch):
    """cicc's module id compared with cudafe++'s: here a file that holds another one."""
    other = tmp_path / "other.module_id"
    other.write_text("_00000000_7_softmax_cu_00000000")
    planned = nvcc_steps._plan

    def elsewhere(*args, **kwargs):
        plan = planned(*args, **kwargs)
        return plan._replace(module_ids=(plan.module_ids[0], other))

    monkeypatch.setattr(nvcc_steps, "_plan", elsewhere)
    whole, split = _both(tmp_path, EXAMPLES / "softmax.cu", "shared")
    assert not split.ran.split and split.ran.returncode == 0
    assert split.artifact == whole.artifact


def test_cicc_refusing_the_split_runs_nvcc_whole(tmp_path, monkeypatch):
    """A cicc that fails where cudafe++ passed (here on an option it doesn't know, as an older
    one might on the module id it is asked to write): nvcc's own run decides."""
    planned = nvcc_steps._plan

    def refused(*args, **kwargs):
        plan = planned(*args, **kwargs)
        cicc = plan.device[1]
        plan.device[1] = cicc._replace(words=[*cicc.words, "--no-such-cicc-option"])
        return plan

    monkeypatch.setattr(nvcc_steps, "_plan", refused)
    whole, split = _both(tmp_path, EXAMPLES / "relu.cu", "shared")
    assert not split.ran.split and split.ran.returncode == 0
    assert split.artifact == whole.artifact and split.output == whole.output


def test_timeout_kills_every_step_and_keeps_the_output_so_far(tmp_path):
    source = tmp_path / "spills.cu"
    shutil.copy(FIXTURES / "spills.cu", source)
    (tmp_path / "keep").mkdir()
    # Only what the build started counts: an earlier test in this process may have left a
    # child that lives as long as the process (multiprocessing's resource tracker, started by
    # the clean reference process's `spawn`).
    before = set(psutil.Process().children(recursive=True))
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        run_nvcc(_command(source, "shared"), cwd=tmp_path, timeout=0.4, deps=tmp_path / "d")
    assert raised.value.cmd[0] == "nvcc" and isinstance(raised.value.output, str)
    assert set(psutil.Process().children(recursive=True)) - before == set()


def test_the_tools_are_found_on_nvccs_path(tmp_path, monkeypatch):
    """nvcc named by its full path (the `nvcc` setting), its directory not on PATH: its steps
    run with the environment nvcc gives its tools."""
    nvcc = shutil.which("nvcc")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    (tmp_path / "keep").mkdir()
    shutil.copy(EXAMPLES / "relu.cu", tmp_path / "relu.cu")
    command = [nvcc, *_command(tmp_path / "relu.cu", "shared")[1:]]
    ran = run_nvcc(command, cwd=tmp_path, timeout=120, deps=tmp_path / "deps.d")
    assert ran.split and ran.returncode == 0 and (tmp_path / "out.so").is_file()
