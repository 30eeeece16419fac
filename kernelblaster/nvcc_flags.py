"""Which nvcc flags a repository's configuration file may set without the user's trust: an
allow-list of options that change only the code generated and the messages (docs/trust.md, "How
flags are read"). Flags are read as nvcc reads them, `-Xcompiler`/`-Xptxas` values with the host
compiler's and ptxas' own lists, and every word must first be plain (`_PLAIN`): nvcc pastes
`-X...` values unquoted, and `@` starts a response file for gcc and the linker."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple


class Place(NamedTuple):
    """Where a repository's flags are used: the repository (resolved), and the folders nvcc may
    run in, from which it resolves a relative path (the configuration's, the sources')."""

    repository: Path
    bases: tuple[Path, ...]


Check = Callable[[str, Place], bool]  # (one value, where it is used) -> harmless


class Option(NamedTuple):
    names: tuple[str, ...]  # every spelling the tool accepts
    check: Check | None = None  # None: the option takes no value
    listed: bool = False  # the tool splits the value at commas, each part checked
    glued: bool = False  # a one-letter name whose value may follow it directly: -O3


def _matches(pattern: str) -> Check:
    compiled = re.compile(pattern)
    return lambda value, _place: compiled.fullmatch(value) is not None


def _one_of(*choices: str) -> Check:
    return lambda value, _place: value in choices


def _inside(value: str, place: Place) -> bool:
    """A folder in the repository, seen from every folder nvcc may run in, links followed
    (`inc` linking to ~/.ssh is outside); a relative one without `..`, which is unclear."""
    if not _PATH_WORD.fullmatch(value) or value.startswith("-"):
        return False  # nvcc would take `-I -x` as the folder "-x": refused as unclear
    path = Path(value)
    if not path.is_absolute() and ".." in path.parts:
        return False
    seen = [path] if path.is_absolute() else [base / path for base in place.bases]
    return all(where.resolve().is_relative_to(place.repository) for where in seen)


# Printable ASCII but blanks, quotes, backslashes, `$`, backquotes and `@` (the module's doc)
_PLAIN = re.compile(r"[!#%&()*+,\-./0-9:;<=>?A-Z\[\]^_a-z{|}~]*")
_PATH_WORD = re.compile(r"[\w./+%:=-]+")
_ARCH = r"(?:sm|compute|lto)_\d+[af]?"
_NUMBER = _matches(r"\d{1,5}")
_BOOLEAN = _one_of("true", "false")
# -DNAME or -DNAME=VALUE: no quotes, `$`, backquotes or backslashes (nvcc's shell)
_MACRO = _matches(r"[A-Za-z_]\w*(?:=[\w.+\-*/%()<>!~^?:=\[\]{}]*)?")


def _table(*options: Option) -> dict[str, Option]:
    return {name: option for option in options for name in option.names}


# The host compiler's options (gcc or clang) that `-Xcompiler` may pass: warnings, optimization,
# code generation, macros. Not `-Wl,`/`-Wp,`/`-Wa,` (options for the linker, preprocessor,
# assembler), `-fplugin=`, `-specs=`, `@file`, `-include`, `-B`: they load or read files.
HOST_COMPILER = _table(
    Option(("-W",), _matches(r"(?:no-)?[a-z][a-z0-9-]{2,}(?:=\d+)?"), glued=True),
    Option(("-O",), _one_of("0", "1", "2", "3", "s", "g", "z", "fast"), glued=True),
    Option(
        ("-f",),
        _matches(
            r"(?:no-)?(?:openmp|PIC|pic|fast-math|strict-aliasing|exceptions|rtti|"
            r"omit-frame-pointer|unroll-loops|tree-vectorize|inline-functions|math-errno|"
            r"finite-math-only|visibility=(?:hidden|default))"
        ),
        glued=True,
    ),
    Option(
        ("-m",),
        _matches(r"(?:arch|tune|cpu)=[\w.-]+|avx|avx2|avx512f|fma|f16c|bmi2|sse4\.2"),
        glued=True,
    ),
    Option(("-D",), _MACRO, glued=True),
    Option(("-U",), _matches(r"[A-Za-z_]\w*"), glued=True),
    Option(("-std",), _matches(r"(?:c|gnu)\+\+\w{2}")),
    *(Option((name,)) for name in ("-g", "-g1", "-g2", "-g3", "-w", "-pedantic", "-pthread")),
)

# ptxas options that `-Xptxas` may pass: they tune the generated code or its warnings.
PTXAS = _table(
    Option(("--verbose", "-v")),
    Option(("--opt-level", "-O"), _one_of("0", "1", "2", "3"), glued=True),
    Option(("--maxrregcount", "-maxrregcount"), _NUMBER),
    Option(("--def-load-cache", "-dlcm"), _one_of("ca", "cg", "cs", "lu", "cv")),
    Option(("--def-store-cache", "-dscm"), _one_of("wb", "cg", "cs", "wt")),
    Option(("--allow-expensive-optimizations", "-allow-expensive-optimizations"), _BOOLEAN),
    Option(("--fmad", "-fmad"), _BOOLEAN),
    Option(("--warn-on-spills", "-warn-spills")),
    Option(("--warn-on-local-memory-usage", "-warn-lmem-usage")),
    Option(("--warn-on-double-precision-use", "-warn-double-usage")),
    Option(("--warning-as-error", "-Werror")),
    Option(("--disable-warnings", "-w")),
    Option(("--disable-optimizer-constants", "-disable-optimizer-consts")),
    Option(("--suppress-stack-size-warning", "-suppress-stack-size-warning")),
    Option(("--suppress-double-demote-warning", "-suppress-double-demote-warning")),
    Option(("--generate-line-info", "-lineinfo")),
    Option(("--sp-bounds-check", "-sp-bounds-check")),
)


def _passed_to(table: dict[str, Option]) -> Check:
    """The value of -Xcompiler / -Xptxas: each comma-separated word checked as the tool's own,
    self-contained (see the module's docstring)."""
    return lambda value, place: not refused(value.split(","), table, place, separate_values=False)


NVCC = _table(
    # code generation and optimization
    Option(("--optimize", "-O"), _one_of("0", "1", "2", "3"), glued=True),
    Option(("--Ofast-compile", "-Ofc"), _one_of("0", "min", "mid", "max")),
    Option(("--gpu-architecture", "-arch"), _matches(rf"{_ARCH}|native|all|all-major")),
    Option(("--gpu-code", "-code"), _matches(_ARCH), listed=True),
    Option(
        ("--generate-code", "-gencode"),
        _matches(rf"arch={_ARCH},code=(?:{_ARCH}|\[{_ARCH}(?:,{_ARCH})*\])"),
    ),
    Option(("--relocatable-device-code", "-rdc"), _BOOLEAN),
    Option(("--maxrregcount", "-maxrregcount"), _NUMBER),
    Option(("--use_fast_math", "-use_fast_math")),
    Option(("--ftz", "-ftz"), _BOOLEAN),
    Option(("--prec-div", "-prec-div"), _BOOLEAN),
    Option(("--prec-sqrt", "-prec-sqrt"), _BOOLEAN),
    Option(("--fmad", "-fmad"), _BOOLEAN),
    Option(("--extra-device-vectorization", "-extra-device-vectorization")),
    Option(("--restrict", "-restrict")),
    Option(("--dlink-time-opt", "-dlto")),
    Option(("--default-stream", "-default-stream"), _one_of("legacy", "null", "per-thread")),
    Option(("--cudart", "-cudart"), _one_of("none", "shared", "static")),
    Option(("--threads", "-t"), _NUMBER),
    Option(("--split-compile", "-split-compile"), _NUMBER),
    # debugging and line information
    Option(("--generate-line-info", "-lineinfo")),
    Option(("--device-debug", "-G")),
    Option(("--debug", "-g")),
    Option(("--source-in-ptx", "-src-in-ptx")),
    Option(("--keep-device-functions", "-keep-device-functions")),
    # the language
    Option(("--std", "-std"), _one_of("c++03", "c++11", "c++14", "c++17", "c++20")),
    Option(("--x", "-x"), _one_of("cu", "c++", "c")),
    Option(("--extended-lambda", "-extended-lambda")),
    Option(("--expt-extended-lambda", "-expt-extended-lambda")),
    Option(("--expt-relaxed-constexpr", "-expt-relaxed-constexpr")),
    Option(("--no-exceptions", "-noeh")),
    Option(("--ftemplate-depth", "-ftemplate-depth"), _NUMBER),
    Option(("--ftemplate-backtrace-limit", "-ftemplate-backtrace-limit"), _NUMBER),
    Option(("--m64", "-m64")),
    Option(("--machine", "-m"), _one_of("64")),
    # macros, and headers from the repository
    Option(("--define-macro", "-D"), _MACRO, listed=True, glued=True),
    Option(("--undefine-macro", "-U"), _matches(r"[A-Za-z_]\w*"), listed=True, glued=True),
    Option(("--include-path", "-I"), _inside, listed=True, glued=True),
    Option(("--system-include", "-isystem"), _inside, listed=True),
    # a library installed on this machine, by name only (no folder: `-L` needs trust)
    Option(("--library", "-l"), _matches(r"[\w+.-]+"), listed=True, glued=True),
    # messages
    Option(("--disable-warnings", "-w")),
    Option(("--resource-usage", "-res-usage")),
    Option(("--display-error-number", "-err-no")),
    Option(("--no-display-error-number", "-no-err-no")),
    Option(("--Werror", "-Werror"), _matches(r"[a-z-]+"), listed=True),
    Option(("--diag-suppress", "-diag-suppress"), _matches(r"[\w-]+"), listed=True),
    Option(("--diag-error", "-diag-error"), _matches(r"[\w-]+"), listed=True),
    Option(("--diag-warn", "-diag-warn"), _matches(r"[\w-]+"), listed=True),
    *(
        Option((f"--{name}", f"-{name}"))
        for name in (
            "Wreorder",
            "Wdefault-stream-launch",
            "Wmissing-launch-bounds",
            "Wext-lambda-captures-this",
            "Wno-deprecated-declarations",
            "Wno-deprecated-gpu-targets",
        )
    ),
    # what nvcc passes on, checked word by word
    Option(("--compiler-options", "-Xcompiler"), _passed_to(HOST_COMPILER)),
    Option(("--ptxas-options", "-Xptxas"), _passed_to(PTXAS)),
)

# nvcc options whose names begin like a one-letter option with its value glued on: `-ldir`
# is libdevice's folder, not `-l dir`. Read as themselves (and refused, being unlisted).
_NOT_GLUED = frozenset({"-lib", "-link", "-ldir", "-lineinfo", "-lto", "-Ofc"})


def _lookup(word: str, table: dict[str, Option]) -> tuple[Option | None, str | None]:
    """The option `word` spells and the value it carries (None: none in the word itself)."""
    if word in table:
        return table[word], None
    name, equals, value = word.partition("=")
    if equals and name in table:
        return table[name], value
    if name in _NOT_GLUED or word.startswith("--"):
        return None, None
    glued = table.get(word[:2])
    if glued is not None and glued.glued and len(word) > 2:
        return glued, word[2:]
    return None, None


def refused(
    flags: list[str], table: dict[str, Option], place: Place, *, separate_values: bool = True
) -> list[list[str]]:
    """The flags of `flags` that are not known to be harmless, each as its words (the option,
    and its value when that is the next word); empty when all are harmless. `place`: where
    they are used."""
    found: list[list[str]] = []
    position = 0
    while position < len(flags):
        words = [flags[position]]
        position += 1
        if not _PLAIN.fullmatch(words[0]):
            found.append(words)
            continue
        option, value = _lookup(words[0], table)
        if option is None or (option.check is None and value is not None):
            found.append(words)
            continue
        if option.check is None:
            continue
        if value is None:
            if not separate_values or position == len(flags):
                found.append(words)  # its value is elsewhere, or nowhere: nvcc takes the next
                continue
            value = flags[position]
            words.append(value)
            position += 1
            if not _PLAIN.fullmatch(value):
                found.append(words)
                continue
        parts = value.split(",") if option.listed else [value]
        if not all(part and option.check(part, place) for part in parts):
            found.append(words)
    return found


def refused_nvcc_flags(flags: list[str], place: Place) -> list[list[str]]:
    return refused(flags, NVCC, place)


# Where nvcc reads more options from: a file of them, or a comma list of files
_OPTIONS_FILES = _table(Option(("--options-file", "-optf"), _matches(".+"), listed=True))
# Where nvcc writes: its output, intermediate and dependency files, its timing
_OUTPUTS = _table(
    Option(("--output-file", "-o"), _matches(".+")),
    Option(("--output-directory", "-odir"), _matches(".+")),
    Option(("--keep-dir", "-keep-dir"), _matches(".+")),
    Option(("--dependency-output", "-MF"), _matches(".+")),
    Option(("--time", "-time"), _matches(".+")),
    Option(("--fdevice-time-trace", "-fdevice-time-trace"), _matches(".+")),
)


def _values(flags: list[str], table: dict[str, Option]) -> list[str]:
    """The values `flags` give the options of `table`, in every spelling `_lookup` reads
    (comma lists split), as nvcc reads them: a value not in the word is the next word."""
    found: list[str] = []
    position = 0
    while position < len(flags):
        option, value = _lookup(flags[position], table)
        position += 1
        if option is None:
            continue
        if value is None:  # nvcc takes the next word, whatever it is
            if position == len(flags):
                break
            value = flags[position]
            position += 1
        found += [part for part in (value.split(",") if option.listed else [value]) if part]
    return found


def options_files(flags: list[str], folder: Path) -> list[Path]:
    """The files nvcc reads more options from (`--options-file`/`-optf`), relative ones
    resolved from `folder`, nvcc's working directory: what a build's result depends on besides
    its sources and the headers they include."""
    return [folder / path for path in _values(flags, _OPTIONS_FILES)]


def output_values(flags: list[str]) -> list[str]:
    """The places `flags` make nvcc write to (`-o`, `-odir`, `--keep-dir`, `-MF`, `--time`)."""
    return _values(flags, _OUTPUTS)
