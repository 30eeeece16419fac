"""nvcc's console output as SourceDiagnostics, each pinned to a line of the user's source so that
no message of a failed build goes unseen."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import msgspec

from kernelblaster.harness.analysis.cuda_source import global_kernels
from kernelblaster.harness.analysis.ptxas import demangle, ptx_source_line, short_name
from kernelblaster.harness.protocol.records import Severity, SourceDiagnostic, SourcePosition

# nvcc's output mixes tools, each with its own format:
#   /src/k.cu(12): error: identifier "x" is undefined            (cudafe++, the EDG front end)
#   /src/k.cu:1:10: fatal error: nope.cuh: No such file ...      (the host compiler)
#   ptxas error   : Entry function '_Z3bigPf' uses too much shared data (0x40000 bytes, ...)
#   ptxas /tmp/k.ptx, line 26; error   : Unknown modifier '.instr'
#   nvlink error   : Undefined reference to '_Z6helperf' in '/tmp/tmpxft_..._k.o'
#   /usr/bin/ld: k.cudafe1.cpp:(.text+0x9c): undefined reference to `other_fn()'
_EDG = re.compile(
    r"^(?P<file>\S.*?)\((?P<line>\d+)\): (?P<severity>catastrophic error|internal error|error|"
    r"warning|remark|note)(?: #(?P<code>[\w-]+))?: (?P<message>.*)$"
)
_HOST = re.compile(
    r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:(?P<column>\d+):)? (?P<severity>fatal error|error|"
    r"warning|note): (?P<message>.*?)(?: \[(?P<code>-W[\w=-]+)\])?$"
)
_PTX_LINE = re.compile(
    r"^ptxas (?P<ptx>\S+), line (?P<line>\d+); (?P<severity>error|warning)\s*: (?P<message>.*)$"
)
_TOOL = re.compile(
    r"^(?P<tool>ptxas|nvlink|nvcc|fatbinary|cicc|cudafe\+\+|nvdisasm)\s+(?P<severity>fatal|error|"
    r"warning)\s*: (?P<message>.*)$"
)
_DRIVER = re.compile(  # the host compiler driver and the linker: "cc1plus: fatal error: ..."
    r"^(?P<tool>cc1plus|gcc|g\+\+|c\+\+|clang\+\+|collect2|\S*/ld|ld)(?:\.\w+)?: "
    r"(?:(?P<severity>fatal error|error|warning): )?(?P<message>.*)$"
)
_UNDEFINED_REFERENCE = re.compile(  # ld prefixes all but the first of a function's with its name
    r"^(?:\S*ld(?:\.\w+)?: )?\S+:\(\.[\w.]+(?:\+0x[0-9a-f]+)?\): (?P<message>undefined .*)$"
)

# Lines that only summarise errors already reported; kept only when nothing else explains a
# failure, so a failed build never goes without a diagnostic.
_SUMMARY = re.compile(
    r"(\d+ errors? detected in the compilation of|^compilation terminated\.|"
    r"Ptx assembly aborted due to errors|ld returned \d+ exit status)"
)
_NOISE = re.compile(  # context lines that are not part of any one message
    r"^(Remark: The warnings can be suppressed|ptxas info\s*:|\S.*: In function )"
)
# The host compiler's include chain before a message in a header, innermost first:
# "In file included from a.cuh:3," then "                 from main.cu:2:".
_INCLUDED_FROM = re.compile(
    r"^(?:In file included from|\s+from) (?P<file>\S.*?):(?P<line>\d+)(?::\d+)?[:,]$"
)
# EDG's instantiation context: "detected during instantiation of "f<T>" at line 5 of main.cu"
_INSTANTIATED_AT = re.compile(r"\bat line (?P<line>\d+) of (?P<file>\S.*?)\s*$")
_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](?P<name>[^>"]+)[>"]')
# A declaration or definition: the name follows a type ("void f(", "float* f(", "T> f(")
_DECLARED = re.compile(r"[\w>]\s*[*&]*\s*$")
_NOT_A_TYPE = {"return", "else", "do", "throw", "case", "co_return", "co_await", "new", "delete"}
_LINKER_CONTEXT = re.compile(r": in function `[^']*':$")
_CARET = re.compile(r"^(\s*)\^\s*$")
_HOST_EXCERPT = re.compile(r"^\s*\d*\s+\|")  # gcc's "   12 |   code" and "      |   ^~~"
_MANGLED = re.compile(r"\b_Z\w+")
_UNDEFINED = re.compile(  # ld's and nvlink's, and ptxas' for a device function without -rdc
    r"\bundefined (?:reference|symbol)|\bUnresolved extern function", re.IGNORECASE
)
_QUOTED_SYMBOL = re.compile(r"[`'](?P<name>[^`']+)'")

_SEVERITY: dict[str, Severity] = {
    "catastrophic error": "error",
    "internal error": "error",
    "fatal error": "error",
    "fatal": "error",
    "error": "error",
    "warning": "warning",
    "remark": "info",
    "note": "info",
}


class _SourceIndex:
    """Lines of the files named in the output, and where the user's symbols are defined."""

    def __init__(self, source: str, cwd: Path, kernel_lines: Mapping[str, tuple[str, int]]):
        self.source = source
        self.cwd = cwd
        self.kernel_lines = kernel_lines
        self.named: set[str] = set()  # the files the output names messages in
        self._lines: dict[str, list[str] | None] = {}

    def path(self, name: str) -> str:
        path = Path(name)
        return str(path if path.is_absolute() else (self.cwd / path).resolve())

    def lines(self, path: str) -> list[str] | None:
        if path not in self._lines:
            try:
                self._lines[path] = Path(path).read_text(errors="replace").splitlines()
            except OSError:
                self._lines[path] = None
        return self._lines[path]

    def symbol_position(self, mangled_or_plain: str, *, undefined: bool) -> tuple[str, int]:
        """Where a kernel or function named in a tool message is defined in the user's source;
        for one nothing defines (`undefined`), where it is first called: its first mention is
        usually its declaration."""
        if mangled_or_plain in self.kernel_lines:
            return self.kernel_lines[mangled_or_plain]
        readable = demangle([mangled_or_plain]).get(mangled_or_plain, mangled_or_plain)
        name = short_name(readable)
        source_lines = self.lines(self.source) or []
        text = "\n".join(source_lines)
        for kernel in global_kernels(text):
            if kernel.name == name:
                return self.source, kernel.name_line + 1
        called = _call_line(name, source_lines) if undefined else None
        return self.source, called or _mention_line(name, source_lines)

    def include_line(self, header: str) -> int | None:
        """The line of the source's #include that leads to `header`: one naming it, or one of a
        header (found beside the file including it) whose own includes lead there."""
        for number, name in self._includes(self.source):
            if self._reaches(self.source, name, header, seen=set()):
                return number
        return None

    def _includes(self, path: str) -> list[tuple[int, str]]:
        return [
            (number, match["name"])
            for number, line in enumerate(self.lines(path) or [], start=1)
            if (match := _INCLUDE.match(line))
        ]

    def _reaches(self, including: str, name: str, header: str, seen: set[str]) -> bool:
        found = self._found(including, name)
        if found == header:
            return True
        if found is None or found in seen:
            return False
        seen.add(found)
        return any(self._reaches(found, inner, header, seen) for _, inner in self._includes(found))

    def _found(self, including: str, name: str) -> str | None:
        """The file an #include names: beside the file including it, else a file named in the
        output whose path ends with the spelled name (found through an -I folder)."""
        beside = str((Path(including).parent / name).resolve())
        if self.lines(beside) is not None:
            return beside
        spelled = Path(name).parts
        if ".." in spelled:
            return None
        return next(
            (f for f in sorted(self.named) if Path(f).parts[-len(spelled) :] == spelled), None
        )


def _call_line(name: str, lines: list[str]) -> int | None:
    """The first line calling `name`: the name followed by "(" (or a launch's "<<<"), not
    after a type, as in its declaration or definition, and not in a // comment."""
    call = re.compile(rf"(?<![\w.])(?:\w+::)*{re.escape(name)}\s*(?:\(|<<<)")
    for number, line in enumerate(lines, start=1):
        code = line.split("//", 1)[0]
        for match in call.finditer(code):
            before = code[: match.start()]
            previous = re.search(r"(\w+)\s*$", before)
            if not _DECLARED.search(before) or (previous and previous[1] in _NOT_A_TYPE):
                return number
    return None


def _mention_line(name: str, lines: list[str]) -> int:
    word = re.compile(rf"\b{re.escape(name)}\b")
    return next((number for number, line in enumerate(lines, start=1) if word.search(line)), 1)


class _Pending:
    """A diagnostic whose continuation lines are still being read."""

    def __init__(self, diagnostic: SourceDiagnostic, *, edg: bool):
        self.diagnostic = diagnostic
        self.edg = edg  # EDG shows the source line, then a caret line under the column
        self.lines: list[str] = []

    def finish(self, index: _SourceIndex) -> SourceDiagnostic:
        excerpt_lines: set[int] = set()
        for number, line in enumerate(self.lines):
            caret = _CARET.match(line)
            if self.edg and caret and number > 0:
                excerpt_lines |= {number - 1, number}
                if self.diagnostic.column == 0:
                    self.diagnostic.column = _edg_column(
                        self.diagnostic, self.lines[number - 1], len(caret.group(1)), index
                    )
            elif not self.edg and _HOST_EXCERPT.match(line):
                excerpt_lines.add(number)
        details = [
            line.strip() for number, line in enumerate(self.lines) if number not in excerpt_lines
        ]
        if details:
            self.diagnostic.message += "\n" + "\n".join(details)
        return self.diagnostic


def _edg_column(diagnostic: SourceDiagnostic, excerpt: str, caret: int, index: _SourceIndex) -> int:
    """The 1-based column of the caret in the real source line. EDG prints its own rendering of
    the line (e.g. `__device__` as `__attribute__((device))`), so the token under the caret is
    looked up in the file's line; the excerpt's own position is the fallback."""
    rendered = excerpt[2:] if excerpt.startswith("  ") else excerpt
    position = caret - (len(excerpt) - len(rendered))
    lines = index.lines(diagnostic.file)
    if lines is None or not 0 < diagnostic.line <= len(lines) or position < 0:
        return max(position + 1, 1)
    actual = lines[diagnostic.line - 1]
    if actual == rendered:
        return position + 1
    token = re.match(r"\w+|\S", rendered[position:])
    if token is None:
        return position + 1
    occurrence = rendered[:position].count(token.group(0))
    found = -1
    for _ in range(occurrence + 1):
        found = actual.find(token.group(0), found + 1)
        if found < 0:
            return position + 1
    return found + 1


def parse_nvcc_output(
    text: str,
    *,
    source: str,
    kernel_lines: Mapping[str, tuple[str, int]] | None = None,
    cwd: str | None = None,
) -> list[SourceDiagnostic]:
    """Diagnostics in the order nvcc printed them, continuation lines folded in. `source` is the
    main file; `kernel_lines` maps mangled kernel names to their (file, line); relative paths
    resolve against `cwd` (default: the source's folder). A header's message is shown at the
    source line that leads there, its own position in `reported_at`; one without a position goes
    to the symbol it names, else line 1."""
    index = _SourceIndex(source, Path(cwd or Path(source).parent), kernel_lines or {})
    # each with its continuation lines, which may name where it was instantiated
    diagnostics: list[tuple[SourceDiagnostic, list[str]]] = []
    summaries: list[SourceDiagnostic] = []
    pending: _Pending | None = None
    chain: list[tuple[str, int]] = []  # the host compiler's include chain being read
    # each header in a chain read so far, and the source's #include line it starts at
    included_at: dict[str, int] = {}

    def close() -> None:
        nonlocal pending
        if pending is not None:
            finished = (pending.finish(index), pending.lines)
            # ptxas repeats a called function's spill warning for every kernel that calls it
            if finished not in diagnostics:
                diagnostics.append(finished)
            pending = None

    for line in text.splitlines():
        if not line.strip():
            close()
            continue
        if _NOISE.match(line) or _LINKER_CONTEXT.search(line):
            close()
            continue
        if match := _INCLUDED_FROM.match(line):
            close()
            chain.append((index.path(match["file"]), int(match["line"])))
            continue
        if _SUMMARY.search(line):
            close()
            summaries.append(_at_symbol_or_top(line.strip(), "error", index))
            continue
        if pending is not None and not pending.edg and (note := _host_note(line, index)):
            pending.lines.append(note)  # e.g. "declared here": part of the message before it
            continue
        started = _start(line, index)
        if started is not None:
            close()
            pending = started
            if chain:
                _read_chain(chain, started.diagnostic.file, included_at, index)
                chain = []
        elif pending is not None:
            pending.lines.append(line)
    close()
    index.named = {diagnostic.file for diagnostic, _ in diagnostics}
    found = [_in_source(d, context, included_at, index) for d, context in diagnostics]
    if not any(d.severity == "error" for d in found):
        found.extend(summaries)
    return found


def _read_chain(
    chain: list[tuple[str, int]], header: str, included_at: dict[str, int], index: _SourceIndex
) -> None:
    """Remember the source's #include line that an include chain starts at for each header in it
    (the host compiler names a chain once, before the first message it leads to)."""
    lines = [line for file, line in chain if file == index.source]
    if lines:
        for file in {header, *(file for file, _ in chain if file != index.source)}:
            included_at.setdefault(file, lines[-1])


def _in_source(
    diagnostic: SourceDiagnostic,
    context: list[str],
    included_at: dict[str, int],
    index: _SourceIndex,
) -> SourceDiagnostic:
    """A message in another file than the source (a header) at the source's line that leads
    there, where one is found: the editor shows a file's messages in that file."""
    if diagnostic.file == index.source:
        return diagnostic
    instantiations = [
        int(match["line"])
        for line in context
        if (match := _INSTANTIATED_AT.search(line)) and index.path(match["file"]) == index.source
    ]
    line = (
        instantiations[0]
        if instantiations
        else included_at.get(diagnostic.file) or index.include_line(diagnostic.file)
    )
    if line is None:
        return diagnostic
    where = SourcePosition(file=diagnostic.file, line=diagnostic.line, column=diagnostic.column)
    shown = Path(diagnostic.file)
    if shown.is_relative_to(Path(index.source).parent):
        shown = shown.relative_to(Path(index.source).parent)
    position = f"{shown}:{where.line}" + (f":{where.column}" if where.column else "")
    return msgspec.structs.replace(
        diagnostic,
        file=index.source,
        line=line,
        column=0,
        message=f"{position}: {diagnostic.message}",
        reported_at=where,
    )


def _host_note(line: str, index: _SourceIndex) -> str | None:
    """The host compiler's note on the message before it ("declared here", "candidate: ..."), as a
    line of that message naming where it points: alone it would say "declared here" of nothing."""
    match = _HOST.match(line)
    if match is None or match["severity"] != "note":
        return None
    where = f"{index.path(match['file'])}:{match['line']}"
    where += f":{match['column']}" if match["column"] else ""
    return f"{where}: note: {match['message']}"


def _start(line: str, index: _SourceIndex) -> _Pending | None:
    """A new diagnostic if `line` opens one."""
    if match := _EDG.match(line):
        return _Pending(
            SourceDiagnostic(
                file=index.path(match["file"]),
                line=int(match["line"]),
                severity=_SEVERITY[match["severity"]],
                message=match["message"],
                code=match["code"],
            ),
            edg=True,
        )
    if match := _HOST.match(line):
        return _Pending(
            SourceDiagnostic(
                file=index.path(match["file"]),
                line=int(match["line"]),
                column=int(match["column"] or 0),
                severity=_SEVERITY[match["severity"]],
                message=match["message"],
                code=match["code"],
            ),
            edg=False,
        )
    if match := _PTX_LINE.match(line):
        return _Pending(_ptx_line_diagnostic(match, index), edg=False)
    if match := _TOOL.match(line):
        message = f"{match['tool']}: {match['message']}"
        return _Pending(_at_symbol_or_top(message, _SEVERITY[match["severity"]], index), edg=False)
    if match := _UNDEFINED_REFERENCE.match(line):
        return _Pending(_at_symbol_or_top(match["message"], "error", index), edg=False)
    if match := _DRIVER.match(line):
        severity = _SEVERITY[match["severity"]] if match["severity"] else "error"
        message = f"{Path(match['tool']).name}: {match['message']}"
        return _Pending(_at_symbol_or_top(message, severity, index), edg=False)
    return None


def _ptx_line_diagnostic(match: re.Match[str], index: _SourceIndex) -> SourceDiagnostic:
    """ptxas rejects a PTX line (usually inline asm): point at the source line it came from."""
    file, line = index.source, 1
    try:
        ptx = Path(match["ptx"]).read_text(errors="replace")
    except OSError:
        ptx = ""
    if position := ptx_source_line(ptx, int(match["line"])):
        file, line = index.path(position[0]), position[1]
    return SourceDiagnostic(
        file=file,
        line=line,
        severity=_SEVERITY[match["severity"]],
        message=f"ptxas: {match['message']} (PTX line {match['line']})",
    )


def _at_symbol_or_top(message: str, severity: Severity, index: _SourceIndex) -> SourceDiagnostic:
    """A message without a position: at the kernel or symbol it names, else the source's top.
    Mangled names in it are made readable, and nvcc's temporary file names dropped."""
    symbol = _MANGLED.search(message)
    quoted = _QUOTED_SYMBOL.search(message)
    undefined = _UNDEFINED.search(message) is not None
    file, line = index.source, 1
    if symbol is not None:
        file, line = index.symbol_position(symbol.group(0), undefined=undefined)
    elif quoted is not None and re.fullmatch(r"[\w:~<>, ]+(\(.*\))?", quoted["name"]):
        file, line = index.symbol_position(short_name(quoted["name"]), undefined=undefined)
    names = demangle(_MANGLED.findall(message))
    readable = _MANGLED.sub(lambda m: names.get(m.group(0), m.group(0)), message)
    readable = re.sub(r" in '[^']*\.o'", "", readable)  # nvcc's temporary object files
    return SourceDiagnostic(file=file, line=line, severity=severity, message=readable)
