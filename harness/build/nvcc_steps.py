"""One nvcc compilation run as nvcc's own steps, the host front end beside the device compile.

nvcc runs the steps of a `.cu` one after another: the host preprocessor and cudafe++ (which
splits the host code from the device code), then the device preprocessor, cicc, ptxas and
fatbinary, then the host compiler and the link. The two front ends read nothing of each
other's but the module id, a hash of the translation unit that cudafe++ writes and cicc reads;
cicc can compute it too (it does for `nvcc -cubin`). On the H100 machine's host cudafe++ takes
0.25-0.3 s and cicc 0.2-0.3 s of a 1.0-1.2 s build. So `run_nvcc` asks nvcc for its steps
(`--dryrun`, ~10 ms), runs the host chain and the device chain at once, checks that the two
module ids agree, and runs the remaining steps in nvcc's order: the examples then build in
0.66-0.81 s (bench/build_steps.py). Every intermediate and the artifact are byte-identical to
nvcc's own (tests/harness/test_nvcc_steps.py builds both ways), and the output is the one nvcc
prints: its own warnings, then each step's, in nvcc's order, up to the first step that fails.

A command whose steps have another shape (several architectures, a link of objects, a host
compiler's preprocessing pass this module does not know) runs as one nvcc command, as do
commands without `-keep` (nvcc's temporary files are its to remove); a split whose module ids
disagree, or whose cicc fails on a source cudafe++ passed, runs again whole, so that nvcc
itself says whether the source or the split is at fault. Torch-free."""

from __future__ import annotations

import csv
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from kernelblaster.harness.protocol.processes import kill_tree, run_tool

__all__ = ["NvccRun", "run_nvcc"]

_DRYRUN_TIMEOUT_S = 30.0
_ASSIGNMENT = re.compile(r"([A-Za-z_]\w*)=(.*)")
_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
_HOST_CHAIN = ("gcc (preprocessing 4)", "cudafe++")
_DEVICE_CHAIN = ("gcc (preprocessing 1)", "cicc", "ptxas", "fatbinary")


class NvccRun(NamedTuple):
    output: str  # what nvcc prints (stdout and stderr together)
    returncode: int
    # milliseconds per step, named as `nvcc --time` names them (a stage run twice is summed)
    stages_ms: dict[str, float]
    split: bool  # whether the host front end ran beside the device compile


class _Step(NamedTuple):
    order: int  # its place in nvcc's order (the output is shown in it)
    stage: str  # `nvcc --time`'s phase name, or "rm"
    words: list[str]  # the command, its variables expanded
    environment: dict[str, str]  # nvcc's for its tools (its PATH first)


class _Plan(NamedTuple):
    said: str  # nvcc's own messages (a warning about its options), printed before any step's
    before: list[_Step]  # nvcc's removals of stale files from an earlier run
    host: list[_Step]
    device: list[_Step]
    rest: list[_Step]
    module_ids: tuple[Path, Path]  # cudafe++'s, and the one cicc writes for itself here


class _StepRun(NamedTuple):
    order: int  # the step's place in nvcc's order
    output: str
    returncode: int

    @property
    def failed(self) -> bool:
        return self.returncode != 0


def run_nvcc(
    command: list[str],
    *,
    cwd: Path,
    timeout: float,
    deps: Path,
    split: bool = True,
    temporary: Path | None = None,
) -> NvccRun:
    """Run nvcc's `command` (which must not ask for dependencies or `--time` itself), writing
    the files it read as a make rule to `deps`, as `nvcc -MD -MF` does; split where it can be,
    unless `split` is False (nvcc as one command, as the benchmark compares). Raises
    subprocess.TimeoutExpired (with the output so far) when it takes longer than `timeout`;
    every tool it started is killed first. `temporary`: the TMPDIR of nvcc and its tools (a
    failing cicc leaves its `<stem>-<hash>..lgenfe.bc` there), default the caller's."""
    began = time.perf_counter()
    environment = dict(os.environ)
    if temporary is not None:
        environment["TMPDIR"] = str(temporary)
    splits = split and "-keep" in command
    plan = (
        _plan(command, cwd=cwd, deps=deps, timeout=timeout, environment=environment)
        if splits
        else None
    )
    planned_ms = (time.perf_counter() - began) * 1000.0
    if plan is not None:
        ran = _run_split(plan, cwd=cwd, deadline=began + timeout, command=command)
        if ran is not None:
            stages = dict(ran.stages_ms)
            stages["nvcc (driver)"] = round(planned_ms, 1)
            return ran._replace(stages_ms=stages)
    left = timeout - (time.perf_counter() - began)
    return _run_whole(command, cwd=cwd, timeout=left, deps=deps, environment=environment)


def _run_whole(
    command: list[str], *, cwd: Path, timeout: float, deps: Path, environment: dict[str, str]
) -> NvccRun:
    stage_times = deps.with_name("stages.csv")
    whole = [*command, "-MD", f"-MF={deps}", f"--time={stage_times}"]
    if timeout <= 0:  # spent on the dry run
        raise subprocess.TimeoutExpired(whole, timeout, output="")
    done = run_tool(whole, cwd=cwd, timeout=timeout, env=environment)
    return NvccRun(done.stdout, done.returncode, _stage_times(stage_times), split=False)


def _stage_times(path: Path) -> dict[str, float]:
    """Milliseconds per stage from `nvcc --time`'s CSV, whose header names the columns
    ("phase name", "metric", "unit", with spaces around them); a stage run twice is summed."""
    try:
        with path.open(newline="") as handle:
            rows = [[field.strip() for field in row] for row in csv.reader(handle)]
    except OSError:
        return {}
    if not rows:
        return {}
    stages: dict[str, float] = {}
    for row in rows[1:]:
        fields = dict(zip(rows[0], row, strict=False))
        name, metric = fields.get("phase name", ""), fields.get("metric", "")
        if name and fields.get("unit") == "ms":
            try:
                stages[name] = round(stages.get(name, 0.0) + float(metric), 1)
            except ValueError:
                continue
    return stages


# --- the plan: nvcc's steps, from --dryrun ---------------------------------------------------


def _plan(
    command: list[str], *, cwd: Path, deps: Path, timeout: float, environment: dict[str, str]
) -> _Plan | None:
    """nvcc's steps for `command` split into the two front-end chains and the rest, or None
    when they don't have the one shape this module runs split."""
    try:
        listed = run_tool(
            [*command, "--dryrun"],
            cwd=cwd,
            timeout=min(timeout, _DRYRUN_TIMEOUT_S),
            env=environment,
        )
    except subprocess.TimeoutExpired:
        return None
    if listed.returncode != 0:
        return None  # nvcc itself refuses the command: run whole, it says why
    lines = [line[3:] for line in listed.stdout.splitlines() if line.startswith("#$ ")]
    said = "".join(
        line for line in listed.stdout.splitlines(keepends=True) if not line.startswith("#$ ")
    )
    variables = dict(environment)  # nvcc's environment for its tools: ours and its own
    steps: list[_Step] = []
    for line in lines:
        assignment = _ASSIGNMENT.fullmatch(line)
        if assignment and not steps:
            name, value = assignment.groups()
            if '"' in value:  # the quoted lists (INCLUDES, LIBRARIES) are nvcc's bookkeeping
                continue
            variables[name] = value
            continue
        step = _step(len(steps), line, variables)
        if step is None:
            return None
        steps.append(step)
    return _chains(steps, deps, said)


def _step(order: int, line: str, variables: dict[str, str]) -> _Step | None:
    """The line as a command to run without a shell, its program found on nvcc's PATH."""
    try:
        words = [_expanded(word, variables) for word in shlex.split(line)]
    except (ValueError, KeyError):
        return None
    stage = _stage(words) if words else None
    program = shutil.which(words[0], path=variables.get("PATH")) if stage else None
    if stage is None or (program is None and stage != "rm"):
        return None
    return _Step(order, stage, words, variables)


def _expanded(word: str, variables: dict[str, str]) -> str:
    return _VARIABLE.sub(lambda m: variables[m.group(1) or m.group(2)], word)


def _stage(words: list[str]) -> str | None:
    """The step's `nvcc --time` phase name; None for one this module doesn't know."""
    program = Path(words[0]).name
    output = words[words.index("-o") + 1] if "-o" in words[:-1] else ""
    if program == "rm":
        return None if any(word.startswith("-") for word in words) else "rm"
    if program in ("cudafe++", "cicc", "ptxas", "fatbinary", "nvlink"):
        return program
    if words[0].startswith("-"):  # nvcc's internal steps ("-- Filter Dependencies --")
        return None
    if "-E" in words:
        for number in ("1", "4"):
            if output.endswith(f".cpp{number}.ii"):
                return f"gcc (preprocessing {number})"
        return None
    return "gcc (compiling)" if "-c" in words else "gcc (linking)"


def _chains(steps: list[_Step], deps: Path, said: str) -> _Plan | None:
    """The host chain, the device chain up to its fatbinary (and that file's removal), and the
    rest; None unless each front-end step occurs once, the host chain wholly before the
    device chain in nvcc's order (so its output comes first), and cicc reads the module id
    cudafe++ writes."""
    stages = [step.stage for step in steps]
    if any(stages.count(stage) != 1 for stage in (*_HOST_CHAIN, *_DEVICE_CHAIN[:-1])):
        return None
    if "fatbinary" not in stages[stages.index("ptxas") :]:
        return None
    end = stages.index("fatbinary", stages.index("ptxas")) + 1  # a link has its own after
    if end < len(steps) and stages[end] == "rm":
        end += 1
    front = steps[:end]
    host = [step for step in front if step.stage in _HOST_CHAIN]
    device = [step for step in front if step.stage in _DEVICE_CHAIN or step.stage == "rm"]
    before = []
    while device and device[0].stage == "rm":
        before.append(device.pop(0))
    if (
        [step.stage for step in host] != list(_HOST_CHAIN)
        or [step.stage for step in device if step.stage != "rm"] != list(_DEVICE_CHAIN)
        or host[-1].order > device[0].order
        or len(before) + len(host) + len(device) != len(front)
    ):
        return None
    module_ids = _own_module_id(host[1], device[1])
    if module_ids is None:
        return None
    cicc, own = module_ids
    device[1] = cicc
    preprocess = device[0]
    device[0] = preprocess._replace(words=[*preprocess.words, "-MD", "-MF", str(deps)])
    return _Plan(said, before, host, device, steps[end:], (Path(own[0]), Path(own[1])))


def _own_module_id(cudafe: _Step, cicc: _Step) -> tuple[_Step, tuple[str, str]] | None:
    """cicc's step made to write its own module id beside cudafe++'s, and the two files."""
    flag = "--module_id_file_name"
    if (
        "--gen_module_id_file" not in cudafe.words
        or "--gen_module_id_file" in cicc.words
        or flag not in cudafe.words[:-1]
        or flag not in cicc.words[:-1]
    ):
        return None
    written = cudafe.words[cudafe.words.index(flag) + 1]
    position = cicc.words.index(flag)
    if cicc.words[position + 1] != written:
        return None
    own = f"{written}.cicc"
    words = [*cicc.words[:position], "--gen_module_id_file", flag, own]
    return cicc._replace(words=[*words, *cicc.words[position + 2 :]]), (written, own)


# --- running the plan ---------------------------------------------------------------------


class _Runner:
    """Runs steps with a shared deadline; `stop()` kills what is running and refuses what
    would start after it."""

    def __init__(self, *, cwd: Path, deadline: float):
        self._cwd, self._deadline = cwd, deadline
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()
        self._stopped = False
        self.stages_ms: dict[str, float] = {}

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            running = list(self._running)
        for process in running:
            kill_tree(process.pid)

    def chain(self, steps: list[_Step]) -> list[_StepRun]:
        """Each step in turn until one fails."""
        done = []
        for step in steps:
            ran = self._remove(step) if step.stage == "rm" else self._run(step)
            if ran is None:
                break
            done.append(ran)
            if ran.failed:
                break
        return done

    def _remove(self, step: _Step) -> _StepRun:
        """nvcc removes files itself, silently, whether they exist or not."""
        for name in step.words[1:]:
            (self._cwd / name).unlink(missing_ok=True)
        return _StepRun(step.order, "", 0)

    def _run(self, step: _Step) -> _StepRun | None:
        began = time.perf_counter()
        with self._lock:
            if self._stopped:
                return None
            process = subprocess.Popen(
                step.words,
                cwd=self._cwd,
                env=step.environment,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
            )
            self._running.add(process)
        try:
            output, _ = process.communicate(timeout=max(self._deadline - began, 0.01))
        except BaseException:
            kill_tree(process.pid)
            process.communicate()
            raise
        finally:
            with self._lock:
                self._running.discard(process)
        took = (time.perf_counter() - began) * 1000.0
        self.stages_ms[step.stage] = round(self.stages_ms.get(step.stage, 0.0) + took, 1)
        return _StepRun(step.order, output, process.returncode)


def _run_split(plan: _Plan, *, cwd: Path, deadline: float, command: list[str]) -> NvccRun | None:
    """The plan's result as nvcc would give it; None when the build must run whole: the two
    module ids differ, or cicc failed on a source cudafe++ passed."""
    runner = _Runner(cwd=cwd, deadline=deadline)
    runs = [_StepRun(-1, plan.said, 0)]
    try:
        runs += runner.chain(plan.before)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="nvcc-device") as pool:
            device = pool.submit(runner.chain, plan.device)
            try:
                host = runner.chain(plan.host)
                if _failed(host):  # nvcc would not have started the device chain
                    runner.stop()
                devices = device.result()
            except BaseException:
                runner.stop()
                raise
        runs += host + devices
        cicc = plan.device[1]
        if not _failed(host) and any(run.failed and run.order == cicc.order for run in devices):
            # Where cudafe++ passed, cicc seldom fails but on the option this module gave it:
            # nvcc's own run says whether the source or the split is at fault.
            return None
        if not _failed(runs):
            if not _same_module_id(*(cwd / path for path in plan.module_ids)):
                return None
            runs += runner.chain(plan.rest)
    except subprocess.TimeoutExpired as exc:
        raise subprocess.TimeoutExpired(command, exc.timeout, output=_output(runs)) from exc
    failed = [run for run in sorted(runs) if run.failed]
    return NvccRun(
        _output(runs), failed[0].returncode if failed else 0, runner.stages_ms, split=True
    )


def _same_module_id(cudafe_id: Path, cicc_id: Path) -> bool:
    """Whether cicc computed the module id cudafe++ wrote (its own file removed: nvcc's
    intermediates are left as nvcc leaves them)."""
    try:
        same = cudafe_id.read_bytes() == cicc_id.read_bytes()
    except OSError:
        return False
    cicc_id.unlink()
    return same


def _failed(runs: list[_StepRun]) -> bool:
    return any(run.failed for run in runs)


def _output(runs: list[_StepRun]) -> str:
    """The steps' output in nvcc's order, up to the first that failed."""
    shown = []
    for run in sorted(runs):
        shown.append(run.output)
        if run.failed:
            break
    return "".join(shown)
