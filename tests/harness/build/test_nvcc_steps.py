"""nvcc's steps run without a shell, with the host front end beside the device compile where it
can be (harness/build/nvcc_steps.py), against nvcc itself: the same bytes, the same output, the
same files read, on real builds; and nothing a value holds is read by a shell."""

import csv
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Literal

import psutil
import pytest

from kernelblaster.harness.build import nvcc_steps
from kernelblaster.harness.build.nvcc import parse_depfile
from kernelblaster.harness.build.nvcc_steps import NvccRun, RefusedCommand, run_nvcc

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "cuda"
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
OUTPUT_KIND = {"shared": ["-shared", "-Xcompiler", "-fPIC"], "object": ["-c"], "executable": []}
ARTIFACT = {"shared": "out.so", "object": "out.o", "executable": "out"}
# ptxas reports its own running time
_PTXAS_TIME = re.compile(r"^ptxas info\s*: Compile time = .*$", re.MULTILINE)

pytestmark = pytest.mark.nvcc


def _command(source: Path, kind: str, *flags: str) -> list[str]:
    """nvcc's command as the harness gives it, for sm_90 unless `flags` name architectures."""
    return [
        "nvcc",
        *([] if any(flag.startswith("-gencode") for flag in flags) else ["-arch=sm_90"]),
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


Way = Literal["nvcc", "split", "in order"]


def _nvcc_itself(command: list[str], cwd: Path, deps: Path) -> NvccRun:
    """nvcc running its own steps (through its shell), with the dependencies and `--time`
    stages the harness's run gives: what the harness's runs are compared with."""
    times = cwd / "stages.csv"
    whole = [*command, "-MD", f"-MF={deps}", f"--time={times}"]
    done = subprocess.run(whole, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    stages: dict[str, float] = {}
    with times.open(newline="") as handle:
        rows = [[field.strip() for field in row] for row in csv.reader(handle)]
    for row in rows[1:]:
        fields = dict(zip(rows[0], row, strict=False))
        if fields.get("unit") == "ms":
            name = fields["phase name"]
            stages[name] = stages.get(name, 0.0) + float(fields["metric"])
    times.unlink()
    return NvccRun(done.stdout.decode(errors="replace"), done.returncode, stages, split=False)


def _build(tmp_path: Path, source: Path, kind: str, *flags: str, way: Way) -> Built:
    """`source` built in `tmp_path/work` (the same paths every way: nvcc writes them into what
    it makes), moved aside afterwards."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "keep").mkdir()
    shutil.copy2(source, work / source.name)  # its time is in the line table
    command = _command(work / source.name, kind, *flags)
    if way == "nvcc":
        ran = _nvcc_itself(command, work, work / "deps.d")
    else:
        ran = run_nvcc(command, cwd=work, timeout=120, deps=work / "deps.d", split=way == "split")
    built = Built(work, ran, kind)
    work.rename(tmp_path / way)
    return built


def _both(tmp_path: Path, source: Path, kind: str, *flags: str, way: Way = "split"):
    """nvcc's own build and the harness's, `way`."""
    return (
        _build(tmp_path, source, kind, *flags, way="nvcc"),
        _build(tmp_path, source, kind, *flags, way=way),
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


TWO_ARCHS = ("-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90")


@pytest.mark.parametrize(
    ("source", "kind", "flags"),
    [
        (FIXTURES / "good.cu", "object", TWO_ARCHS),
        (EXAMPLES / "relu.cu", "shared", ("-rdc=true", *TWO_ARCHS)),
    ],
    ids=["two-architectures", "two-architectures-relocatable"],
)
def test_steps_in_nvccs_order_make_nvccs_bytes_output_and_dependencies(
    tmp_path, source, kind, flags
):
    """The way every shape the split doesn't take runs (several architectures, a link)."""
    whole, in_order = _both(tmp_path, source, kind, *flags, way="in order")
    assert not in_order.ran.split and whole.ran.returncode == in_order.ran.returncode == 0
    assert in_order.artifact is not None and in_order.artifact == whole.artifact
    assert in_order.kept == whole.kept
    assert in_order.output == whole.output
    assert in_order.deps == whole.deps
    assert in_order.ran.stages_ms["cicc"] > 0


def test_a_link_of_objects_runs_step_by_step(tmp_path):
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
    assert linked.stages_ms["nvlink"] > 0 and linked.stages_ms["gcc (linking)"] > 0


def test_module_ids_that_disagree_run_the_steps_in_nvccs_order(tmp_path, monkeypatch):
    """cicc's module id compared with cudafe++'s: here a file that holds another one."""
    other = tmp_path / "other.module_id"
    other.write_text("_00000000_7_softmax_cu_00000000")
    planned = nvcc_steps._chains

    def elsewhere(*args, **kwargs):
        plan = planned(*args, **kwargs)
        return plan._replace(module_ids=(plan.module_ids[0], other))

    monkeypatch.setattr(nvcc_steps, "_chains", elsewhere)
    whole, split = _both(tmp_path, EXAMPLES / "softmax.cu", "shared")
    assert not split.ran.split and split.ran.returncode == 0
    assert split.artifact == whole.artifact


def test_cicc_refusing_the_split_runs_the_steps_in_nvccs_order(tmp_path, monkeypatch):
    """A cicc that fails where cudafe++ passed (here on an option it doesn't know, as an older
    one might on the module id it is asked to write): nvcc's own steps decide."""
    planned = nvcc_steps._chains

    def refused(*args, **kwargs):
        plan = planned(*args, **kwargs)
        cicc = plan.device[1]
        plan.device[1] = cicc._replace(words=[*cicc.words, "--no-such-cicc-option"])
        return plan

    monkeypatch.setattr(nvcc_steps, "_chains", refused)
    whole, split = _both(tmp_path, EXAMPLES / "relu.cu", "shared")
    assert not split.ran.split and split.ran.returncode == 0
    assert split.artifact == whole.artifact and split.output == whole.output


# --- nothing a value holds is read by a shell ------------------------------------------------

# Words a shell would act on: each writes a file named in it where a shell reads it. nvcc pastes
# -Xcompiler values into its steps' command lines unquoted.
SHELL_WORDS = ("-DKB_TUNE=>{victim}", "-DB=;>{canary}", "-DC=|tee>{canary}", "-DD=&>{canary}")


@pytest.mark.parametrize(
    ("kind", "archs"),
    [("shared", ()), ("object", TWO_ARCHS), ("shared", TWO_ARCHS)],
    ids=["one-architecture", "two-architectures", "two-architectures-linked"],
)
def test_no_value_reaches_a_shell_in_any_shape_of_build(tmp_path, kind, archs):
    """The issue's case: a redirection in a macro, with two architectures, truncated the
    user's KB through nvcc's /bin/sh. Run as nvcc lists its steps, the words are macros."""
    victim = tmp_path / "kb.sqlite3"
    victim.write_bytes(b"SQLite format 3\x00 the user's knowledge")
    canary = tmp_path / "canary"
    (tmp_path / "keep").mkdir()
    shutil.copy(FIXTURES / "good.cu", tmp_path / "good.cu")
    words = [word.format(victim=victim, canary=canary) for word in SHELL_WORDS]
    flags = [part for word in words for part in ("-Xcompiler", word)]
    command = _command(tmp_path / "good.cu", kind, *flags, *archs)
    ran = run_nvcc(command, cwd=tmp_path, timeout=120, deps=tmp_path / "deps.d")
    assert ran.returncode == 0, ran.output
    assert victim.read_bytes() == b"SQLite format 3\x00 the user's knowledge"
    assert not canary.exists()


@pytest.mark.parametrize(
    "word", ["-DX=$(touch {canary})", "-DX=`touch {canary}`", "-DX=${{HOME}}", "-DX='a"]
)
def test_a_value_only_a_shell_would_read_is_refused(tmp_path, word):
    canary = tmp_path / "canary"
    (tmp_path / "keep").mkdir()
    shutil.copy(FIXTURES / "good.cu", tmp_path / "good.cu")
    flags = ["-Xcompiler", word.format(canary=canary)]
    command = _command(tmp_path / "good.cu", "object", *flags, *TWO_ARCHS)
    with pytest.raises(RefusedCommand, match="a shell would expand or run") as refused:
        run_nvcc(command, cwd=tmp_path, timeout=120, deps=tmp_path / "deps.d")
    assert "without a shell" in refused.value.fix
    assert not canary.exists() and not (tmp_path / "out.o").exists()


def test_a_newline_in_a_value_is_refused_before_nvcc_lists_it(tmp_path):
    """A line of its own in nvcc's listing would be read as one more step."""
    canary = tmp_path / "canary"
    (tmp_path / "keep").mkdir()
    shutil.copy(FIXTURES / "good.cu", tmp_path / "good.cu")
    command = _command(tmp_path / "good.cu", "object", f"-DX=1\n#$ touch {canary}")
    with pytest.raises(RefusedCommand, match="control character"):
        run_nvcc(command, cwd=tmp_path, timeout=120, deps=tmp_path / "deps.d")
    assert not canary.exists()


def test_a_command_line_longer_than_the_machine_takes_is_one_clear_refusal(tmp_path):
    (tmp_path / "keep").mkdir()
    shutil.copy(FIXTURES / "good.cu", tmp_path / "good.cu")
    command = _command(tmp_path / "good.cu", "object", "-DBIG=" + "x" * 200_000)
    with pytest.raises(RefusedCommand, match="longer than this machine accepts") as refused:
        run_nvcc(command, cwd=tmp_path, timeout=120, deps=tmp_path / "deps.d")
    assert "fewer or shorter nvcc flags" in refused.value.fix


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_no_shell_is_started_by_a_build_of_two_architectures(tmp_path):
    """What the canaries above infer, seen directly: no process of the build runs a shell."""
    (tmp_path / "keep").mkdir()
    shutil.copy(FIXTURES / "good.cu", tmp_path / "good.cu")
    command = _command(tmp_path / "good.cu", "object", *TWO_ARCHS)
    script = (
        "import sys, pathlib; from kernelblaster.harness.build.nvcc_steps import run_nvcc; "
        f"ran = run_nvcc({command!r}, cwd=pathlib.Path({str(tmp_path)!r}), timeout=120, "
        f"deps=pathlib.Path({str(tmp_path / 'deps.d')!r})); sys.exit(ran.returncode)"
    )
    trace = tmp_path / "execve.txt"
    subprocess.run(
        ["strace", "-f", "-qq", "-e", "trace=execve", "-o", str(trace), sys.executable, "-c",
         script],
        check=True,
        timeout=300,
    )  # fmt: skip
    started = re.findall(r'execve\("([^"]+)"', trace.read_text())
    assert any(Path(program).name == "cicc" for program in started)
    shells = [p for p in started if Path(p).name in ("sh", "bash", "dash", "zsh")]
    assert shells == []


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
