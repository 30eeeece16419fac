"""One nvcc compilation run as nvcc's own steps (from `--dryrun`), never through a shell: nvcc
pastes option values unquoted into `/bin/sh` command lines (docs/trust.md, "No shell").

Where the steps are one architecture's compile, the host front end (cudafe++) runs beside the
device one (cicc), ~0.4 s sooner on an H100 host; their module ids must agree, else the steps run
in nvcc's order. Either way the artifact and output are byte-identical to nvcc's own
(tests/harness/build/test_nvcc_steps.py). Torch-free."""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from kernelblaster.harness.protocol.processes import kill_tree, run_tool

__all__ = ["NvccRun", "RefusedCommand", "run_nvcc"]

_DRYRUN_TIMEOUT_S = 30.0
_ASSIGNMENT = re.compile(r"([A-Za-z_]\w*)=(.*)")
_NAME = re.compile(r"\{([A-Za-z_]\w*)\}|([A-Za-z_]\w*)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_HOST_CHAIN = ("gcc (preprocessing 4)", "cudafe++")
_DEVICE_CHAIN = ("gcc (preprocessing 1)", "cicc", "ptxas", "fatbinary")
_SOURCE_SUFFIXES = frozenset({".cu", ".cpp", ".cc", ".cxx", ".c"})


class NvccRun(NamedTuple):
    output: str  # what nvcc prints (stdout and stderr together)
    returncode: int
    # milliseconds per step, named as `nvcc --time` names them (a stage run twice is summed)
    stages_ms: dict[str, float]
    split: bool  # whether the host front end ran beside the device compile


class RefusedCommand(Exception):
    """A command whose steps can't be run as they stand: a word with a control character, a
    step only a shell could run, more than the machine takes on one command line."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


class _Step(NamedTuple):
    order: int  # its place in nvcc's order (the output is shown in it)
    stage: str  # `nvcc --time`'s phase name, or "rm"
    words: list[str]  # the command, its variables expanded
    environment: dict[str, str]  # nvcc's for its tools (its PATH first)


class _Listing(NamedTuple):
    said: str  # nvcc's own messages (a warning about its options), printed before any step's
    steps: list[_Step]


class _Plan(NamedTuple):
    said: str
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
    """Run nvcc's `command` (which must have `-keep`) as its steps, writing the files it read as a
    make rule to `deps` like `nvcc -MD -MF`; `split=False` runs one step at a time. Raises
    RefusedCommand when a step needs a shell or too long a command line,
    subprocess.TimeoutExpired after `timeout` (every tool killed first). `temporary`: the TMPDIR
    of nvcc and its tools."""
    if "-keep" not in command:
        raise ValueError("run_nvcc runs nvcc's steps itself: the command must have -keep")
    began = time.perf_counter()
    environment = dict(os.environ)
    if temporary is not None:
        environment["TMPDIR"] = str(temporary)
    try:
        listing = _listing(command, cwd=cwd, timeout=timeout, environment=environment)
        if isinstance(listing, NvccRun):
            return listing  # nvcc refused the command itself, and said why
        planned_ms = round((time.perf_counter() - began) * 1000.0, 1)
        deadline = began + timeout
        plan = _chains(listing, deps) if split else None
        ran = None
        if plan is not None:
            ran = _run_split(plan, cwd=cwd, deadline=deadline, command=command)
        if ran is None:
            ran = _run_in_order(listing, cwd=cwd, deadline=deadline, deps=deps, command=command)
    except OSError as exc:
        if exc.errno != errno.E2BIG:
            raise
        raise RefusedCommand(
            f"the build's command line is longer than this machine accepts ({exc.strerror}): "
            f"{len(command)} words, {sum(map(len, command)):,} characters",
            "Use fewer or shorter nvcc flags (one word may be at most 128 KiB on Linux, the "
            "whole command line a few MiB).",
        ) from None
    return ran._replace(stages_ms={**ran.stages_ms, "nvcc (driver)": planned_ms})


# --- nvcc's steps, from --dryrun ---------------------------------------------------------


def _listing(
    command: list[str], *, cwd: Path, timeout: float, environment: dict[str, str]
) -> _Listing | NvccRun:
    """nvcc's steps for `command`, or nvcc's own answer when it refuses the command."""
    for word in command:
        if _CONTROL.search(word):
            raise RefusedCommand(
                f"the nvcc flag or path {word!r} holds a control character (a newline, a tab)",
                "Remove it: nvcc lists its steps one a line, and such a word would change them.",
            )
    try:
        listed = run_tool(
            [*command, "--dryrun"],
            cwd=cwd,
            timeout=min(timeout, _DRYRUN_TIMEOUT_S),
            env=environment,
        )
    except subprocess.TimeoutExpired as exc:
        raise subprocess.TimeoutExpired(command, exc.timeout, output="") from exc
    if listed.returncode != 0:
        return NvccRun(listed.stdout, listed.returncode, {}, split=False)
    said = "".join(
        line for line in listed.stdout.splitlines(keepends=True) if not line.startswith("#$ ")
    )
    lines = [line[3:] for line in listed.stdout.splitlines() if line.startswith("#$ ")]
    environ = dict(environment)  # nvcc's environment for its tools: ours and its own
    own: dict[str, str] = {}  # the variables nvcc sets, the only ones its steps may name
    steps: list[_Step] = []
    for line in lines:
        assignment = _ASSIGNMENT.fullmatch(line)
        if assignment and not steps:
            name, value = assignment.groups()
            if '"' not in value:  # the quoted lists (INCLUDES, LIBRARIES) are nvcc's bookkeeping
                own[name] = environ[name] = value
            continue
        steps.append(_step(len(steps), line, own, environ, cwd))
    return _Listing(said, steps)


def _step(
    order: int, line: str, own: Mapping[str, str], environ: dict[str, str], cwd: Path
) -> _Step:
    """The line as a command to run without a shell in `cwd`, its program found on nvcc's
    PATH (or, named with a folder, `-ccbin`'s, from `cwd`)."""
    words = _words(line, own)
    stage = _stage(words) if words else None
    if stage is None:
        raise RefusedCommand(
            f"nvcc lists a step that only a shell or nvcc itself could run: {line[:300]}",
            "Remove the flag that asks for it (e.g. -M, -MD: the build records the files it "
            "reads itself).",
        )
    program = cwd / words[0] if "/" in words[0] else words[0]
    if stage != "rm" and shutil.which(program, path=environ.get("PATH")) is None:
        raise RefusedCommand(
            f"nvcc's step runs {words[0]}, which is not on nvcc's PATH",
            "Install it, or set the host compiler nvcc uses (-ccbin) to one that is installed.",
        )
    return _Step(order, stage, words, dict(environ))


def _words(line: str, own: Mapping[str, str]) -> list[str]:
    """The words of one listed step, split and unquoted as the shell would (blanks separate,
    quotes and backslashes quote), `$NAME`/`${NAME}` expanded for nvcc's own variables. Any
    other `$` or a backquote would make a shell run or read something: RefusedCommand. The
    shell's operators (`>`, `;`, `|`, `(`) stay plain characters of their word."""
    words: list[str] = []
    word: list[str] = []
    quote = ""  # "", "'" or '"'
    pending = False  # a word has begun (an empty quoted word is a word)
    position = 0
    while position < len(line):
        char = line[position]
        position += 1
        if quote == "'":
            if char == "'":
                quote = ""
            else:
                word.append(char)
            continue
        if char == "\\":
            escaped = line[position : position + 1]
            if not escaped:
                raise _unreadable(line, "a backslash at its end")
            if quote and escaped not in '"\\$`':
                word.append(char)  # inside double quotes only those are escaped
            else:
                word.append(escaped)
                position += 1
            pending = True
        elif char in "'\"" and (not quote or char == quote):
            quote = "" if quote else char
            pending = True
        elif char == "$":
            name = _NAME.match(line, position)
            value = own.get(name.group(1) or name.group(2)) if name else None
            if name is None or value is None:
                raise _unreadable(line, f"`{line[position - 1 : position + 12]}`")
            word.append(value)
            position = name.end()
            pending = True
        elif char == "`":
            raise _unreadable(line, "a backquote")
        elif char in " \t" and not quote:
            if word or pending:
                words.append("".join(word))
            word, pending = [], False
        else:
            word.append(char)
            pending = True
    if quote:
        raise _unreadable(line, "an unclosed quote")
    if word or pending:
        words.append("".join(word))
    return words


def _unreadable(line: str, what: str) -> RefusedCommand:
    return RefusedCommand(
        f"nvcc lists a step with {what}, which a shell would expand or run: {line[:300]}",
        "Remove `$`, backquotes and unbalanced quotes from the nvcc flags and paths: nvcc's "
        "steps are run here without a shell.",
    )


def _stage(words: list[str]) -> str | None:
    """The step's `nvcc --time` phase name; None for one that no program runs (nvcc's own
    "-- Filter Dependencies --"), or a removal with options."""
    program = Path(words[0]).name
    output = words[words.index("-o") + 1] if "-o" in words[:-1] else ""
    if program == "rm":
        return None if any(word.startswith("-") for word in words) else "rm"
    if program in ("cudafe++", "cicc", "ptxas", "fatbinary", "nvlink"):
        return program
    if words[0].startswith("-"):
        return None
    if "-E" in words:
        for number in ("1", "4"):
            if output.endswith(f".cpp{number}.ii"):
                return f"gcc (preprocessing {number})"
        return "gcc (preprocessing)"
    return "gcc (compiling)" if "-c" in words else "gcc (linking)"


def _chains(listing: _Listing, deps: Path) -> _Plan | None:
    """The host chain, the device chain up to its fatbinary (and that file's removal), and the
    rest; None unless each front-end step occurs once, the host chain wholly before the
    device chain in nvcc's order (so its output comes first), and cicc reads the module id
    cudafe++ writes."""
    steps = listing.steps
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
    device[0] = _writing_deps(device[0], deps)
    plan = _Plan(listing.said, before, host, device, steps[end:], (Path(own[0]), Path(own[1])))
    return plan


def _writing_deps(step: _Step, deps: Path) -> _Step:
    """A preprocessing step that also writes the files it read to `deps`, as a make rule."""
    return step._replace(words=[*step.words, "-MD", "-MF", str(deps)])


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
    """The plan's result as nvcc would give it; None when the build must run again step by step:
    the two module ids differ, or cicc failed on a source cudafe++ passed."""
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
            # nvcc's own steps, in its order, say whether the source or the split is at fault.
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


def _run_in_order(
    listing: _Listing, *, cwd: Path, deadline: float, deps: Path, command: list[str]
) -> NvccRun:
    """Every step in nvcc's order, one at a time, up to the first that fails; what the host
    compiler's passes over the command's sources read (the preprocessing passes of a `.cu`, the
    compile of a `.cpp`; not nvcc's own intermediates) is gathered into `deps`."""
    runner = _Runner(cwd=cwd, deadline=deadline)
    sources = {word for word in command if Path(word).suffix in _SOURCE_SUFFIXES}
    parts = {
        step.order: deps.with_name(f"{deps.name}.{step.order}")
        for step in listing.steps
        if step.stage.startswith("gcc (") and sources & set(step.words)
    }
    steps = [
        _writing_deps(step, parts[step.order]) if step.order in parts else step
        for step in listing.steps
    ]
    runs = [_StepRun(-1, listing.said, 0)]
    try:
        runs += runner.chain(steps)
    except subprocess.TimeoutExpired as exc:
        raise subprocess.TimeoutExpired(command, exc.timeout, output=_output(runs)) from exc
    read = list(parts.values())
    failed = [run for run in sorted(runs) if run.failed]
    if not failed:
        _gather(read, deps)
    for part in read:
        part.unlink(missing_ok=True)
    return NvccRun(
        _output(runs), failed[0].returncode if failed else 0, runner.stages_ms, split=False
    )


def _gather(parts: list[Path], deps: Path) -> None:
    """The make rules of several passes as one: the prerequisites of all (nothing written when
    a pass wrote none, so the build is known not to know what it read)."""
    try:
        texts = [part.read_text() for part in parts]
    except OSError:
        return
    if texts:
        prerequisites = [text.replace("\\\n", " ").partition(": ")[2].strip() for text in texts]
        deps.write_text(f"{deps.stem}: " + " \\\n ".join(prerequisites) + "\n")


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
