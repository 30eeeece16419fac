"""Build a CUDA source with nvcc: diagnostics, per-kernel resource usage and a cached artifact.

Every build targets one arch with `-O3 -std=c++17 -lineinfo` (so profilers can blame source lines)
and `-Xptxas -v` (resource usage); a caller's flag of the same kind replaces the default. The PTX
nvcc keeps gives each kernel's `__launch_bounds__` and definition line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

import msgspec

from kernelblaster.harness.analysis.nvcc_output import parse_nvcc_output
from kernelblaster.harness.analysis.ptxas import (
    apply_launch_bounds,
    parse_ptx_entries,
    parse_ptxas_resources,
)
from kernelblaster.harness.build.cache import BuildCache, nvcc_version
from kernelblaster.harness.build.fix_hints import fix_for
from kernelblaster.harness.build.gpu_arch import ArchChoice, detect_arch, is_arch_name
from kernelblaster.harness.build.nvcc_steps import RefusedCommand, run_nvcc
from kernelblaster.harness.protocol.records import (
    BuildResult,
    BuildStep,
    HarnessError,
    KernelResources,
    SourceDiagnostic,
)
from kernelblaster.nvcc_flags import options_files
from kernelblaster.settings import Settings

__all__ = ["ArchChoice", "BuildSpec", "build", "detect_arch"]

_ARTIFACT_SUFFIX = {"shared": ".so", "executable": "", "object": ".o"}
_OUTPUT_KIND_FLAGS = {
    "shared": ["-shared", "-Xcompiler", "-fPIC"],
    "executable": [],
    # position-independent, so the object can go into a shared library
    "object": ["-c", "-Xcompiler", "-fPIC"],
}
# nvcc lists its steps as shell text, which is how they are read back (nvcc_steps.py): in a
# file's path these characters would not read back as themselves, so such a file is never built.
_SHELL_ACTIVE = re.compile(r'[$`"\\\n]')
_TOOLKIT_FIX = (
    "Install the CUDA toolkit (https://developer.nvidia.com/cuda-downloads) and put its bin/ "
    "directory on PATH, or set the `nvcc` setting to the full path of nvcc."
)


class BuildSpec(msgspec.Struct, kw_only=True):
    source: str  # absolute path of the main .cu
    output_kind: Literal["shared", "executable", "object"]
    arch: str | None = None  # "sm_90"; None -> detect_arch(settings)
    extra_sources: list[str] = []  # compiled to their own objects and linked with `source`
    include_dirs: list[str] = []
    library_dirs: list[str] = []
    libraries: list[str] = []
    flags: list[str] = []  # extra nvcc flags (target's + settings.nvcc_flags, merged by caller)
    defines: dict[str, str] = {}
    # The unsaved text of `source`, built as if `source` held it (an edit not saved yet); None
    # builds the file as it is.
    source_text: str | None = None


class _Unsaved(NamedTuple):
    """The unsaved text of one input, and the copy nvcc compiles in its place."""

    path: str  # the input as the user knows it (resolved)
    text: str


def _unsaved_input(spec: BuildSpec, inputs: list[str]) -> _Unsaved | None:
    if spec.source_text is None:
        return None
    source = str(Path(spec.source).resolve())
    return _Unsaved(source, spec.source_text) if source in inputs else None


def _write_copy(unsaved: _Unsaved, scratch: Path) -> Path:
    """The unsaved text, for nvcc to compile in place of its file: a copy with the file's name in a
    folder of its own, starting with `#line 1 "<file>"` so diagnostics, `__FILE__` and -lineinfo
    name the file, and `#include "..."` searches the file's folder next. Its artifact differs from
    the saved file's only in a path the fatbinary records and nothing reads."""
    directory = scratch / "source"
    directory.mkdir()
    copy = directory / Path(unsaved.path).name
    quoted = unsaved.path.replace("\\", "\\\\").replace('"', '\\"')
    copy.write_text(f'#line 1 "{quoted}"\n{unsaved.text}', encoding="utf-8")
    return copy


def _user_sets(flags: list[str], *prefixes: str) -> bool:
    return any(flag.startswith(prefixes) for flag in flags)


def _user_arch(flags: list[str]) -> str | None:
    """The arch a caller's `-arch=sm_XX` / `-arch sm_XX` / `--gpu-architecture=sm_XX` names."""
    for number, flag in enumerate(flags):
        match = re.fullmatch(r"(?:-arch|--gpu-architecture)(?:=(\S+))?", flag)
        if match:
            value = match.group(1) or (flags[number + 1] if number + 1 < len(flags) else "")
            return value.replace("compute_", "sm_") if value else None
    return None


def _options(spec: BuildSpec, arch: str) -> list[str]:
    """Every nvcc option but the output and scratch paths, in a stable order."""
    user = spec.flags
    options: list[str] = []
    if not _user_sets(user, "-arch", "--gpu-architecture", "-gencode", "--generate-code"):
        options.append(f"-arch={arch}")
    if not _user_sets(user, "-O", "--optimize"):
        options.append("-O3")
    if not _user_sets(user, "-std", "--std"):
        options.append("-std=c++17")
    if not _user_sets(user, "-G", "--device-debug"):  # -G already carries line info
        options.append("-lineinfo")
    options += ["-Xptxas", "-v", "-Xptxas", "-warn-spills"]
    options += _OUTPUT_KIND_FLAGS[spec.output_kind]
    options += [f"-I{directory}" for directory in spec.include_dirs]
    options += [
        f"-D{name}={value}" if value else f"-D{name}" for name, value in spec.defines.items()
    ]
    options += user
    if spec.output_kind != "object":  # libraries are for the link
        options += [f"-L{directory}" for directory in spec.library_dirs]
        options += [f"-l{library}" for library in spec.libraries]
    return options


def _failure(
    spec: BuildSpec, arch: str, started: float, error: HarnessError, **fields
) -> BuildResult:
    return BuildResult(
        ok=False,
        source=spec.source,
        arch=arch,
        error=error,
        seconds=time.perf_counter() - started,
        **fields,
    )


@dataclass(frozen=True)
class _Toolchain:
    """The build cache and the nvcc that fills it (None when there is none to run: cached
    results can still be used)."""

    cache: BuildCache
    nvcc: str | None
    nvcc_version: str | None


def build(spec: BuildSpec, settings: Settings, *, cache_dir: Path | None = None) -> BuildResult:
    """Build `spec` with nvcc through the cache. Several sources (an extension's kernels and
    bindings) are built in parts: each to its own cached object, then linked."""
    if spec.extra_sources and spec.output_kind == "object":
        raise ValueError("an object file is compiled from one source")
    started = time.perf_counter()
    arch_note = ""
    arch = _user_arch(spec.flags) or spec.arch
    if arch is None:
        choice = detect_arch(settings)
        arch, arch_note = choice.arch, choice.note
    if not is_arch_name(arch):
        return _failure(
            spec,
            arch,
            started,
            HarnessError(
                kind="wrong_arch",
                message=f"{arch!r} is not a GPU architecture name",
                fix="Set `arch` to a name like sm_90 (H100/H200), sm_80 (A100) or sm_89 (L4), "
                "or leave it unset to use the GPU's own.",
            ),
        )
    sources = [str(Path(s).resolve()) for s in (spec.source, *spec.extra_sources)]
    unsafe = [s for s in sources if _SHELL_ACTIVE.search(s)]
    if unsafe:
        return _failure(
            spec,
            arch,
            started,
            HarnessError(
                kind="bad_target",
                message=f"{unsafe[0]} has $, a backquote, a quote or a backslash in its path: "
                "nvcc lists its steps as shell text, where such a name would not read back as "
                "itself",
                fix="Rename the file (or its folder) without those characters.",
            ),
        )
    missing = [s for s in sources if not Path(s).is_file()]
    if missing:
        return _failure(
            spec,
            arch,
            started,
            HarnessError(
                kind="bad_target",
                message=f"source file not found: {missing[0]}",
                fix="Check the path (relative paths in kernelblaster.toml are relative to it).",
            ),
        )
    nvcc = shutil.which(settings.nvcc)
    tools = _Toolchain(
        cache=BuildCache(Path(cache_dir) if cache_dir else settings.cache_root()),
        nvcc=nvcc,
        nvcc_version=nvcc_version(nvcc) if nvcc else None,
    )
    if len(sources) > 1:
        result = _build_in_parts(spec, settings, tools, arch, sources, started)
    else:
        result = _cached_nvcc_run(spec, settings, tools, arch, sources, sources[0], started)
    result.arch_note = arch_note
    return result


def _build_in_parts(
    spec: BuildSpec,
    settings: Settings,
    tools: _Toolchain,
    arch: str,
    sources: list[str],
    started: float,
) -> BuildResult:
    """Each source compiled to its own cached object, then the objects linked, so an edit to
    one source recompiles only that one: a torch extension's kernels, not its bindings, whose
    torch headers take most of a minute to compile. The main source compiles first; when it
    fails, the others wait (its errors are what the user is fixing)."""
    steps: list[BuildStep] = []
    objects: list[str] = []
    diagnostics: list[SourceDiagnostic] = []
    resources: list[KernelResources] = []
    stages: dict[str, float] = {}
    for source in sources:
        part = msgspec.structs.replace(
            spec,
            source=source,
            extra_sources=[],
            output_kind="object",
            source_text=spec.source_text if source == sources[0] else None,
        )
        compiled = _cached_nvcc_run(
            part, settings, tools, arch, [source], source, time.perf_counter()
        )
        steps.append(_step(source, compiled))
        diagnostics += compiled.diagnostics
        resources += compiled.resources
        stages = _summed(stages, compiled.nvcc_stages_ms)
        if not compiled.ok or compiled.artifact is None:
            return msgspec.structs.replace(
                compiled,
                source=spec.source,
                diagnostics=diagnostics,
                resources=resources,
                seconds=time.perf_counter() - started,
                steps=steps,
                nvcc_stages_ms=stages,
            )
        objects.append(compiled.artifact)
    linked = _cached_nvcc_run(
        spec, settings, tools, arch, objects, sources[0], time.perf_counter(), known_deps=objects
    )
    steps.append(_step("link", linked))
    return msgspec.structs.replace(
        linked,
        command=steps[0].command,
        diagnostics=[*diagnostics, *linked.diagnostics],
        resources=resources,
        cached=all(step.cached for step in steps),
        seconds=time.perf_counter() - started,
        steps=steps,
        nvcc_stages_ms=_summed(stages, linked.nvcc_stages_ms),
    )


def _summed(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {name: round(a.get(name, 0.0) + b.get(name, 0.0), 1) for name in {*a, *b}}


def _step(what: str, result: BuildResult) -> BuildStep:
    return BuildStep(
        what=what,
        artifact=result.artifact,
        cached=result.cached,
        seconds=result.seconds,
        command=result.command,
    )


def _cached_nvcc_run(
    spec: BuildSpec,
    settings: Settings,
    tools: _Toolchain,
    arch: str,
    inputs: list[str],
    user_source: str,
    started: float,
    *,
    known_deps: list[str] | None = None,
) -> BuildResult:
    """One nvcc command, compiling or linking `inputs` into `spec.output_kind`, through the
    cache. Every file it read comes from nvcc's dependency output, unless `known_deps` (a link's
    objects) says. Tool messages without a position are pinned to `user_source`. An input
    with unsaved text is compiled from a copy (`_write_copy`) and keyed as the input."""
    options = _options(spec, arch)
    unsaved = _unsaved_input(spec, inputs)
    texts = {unsaved.path: unsaved.text} if unsaved else {}
    manifest_key = tools.cache.manifest_key(
        [spec.output_kind, arch, *options],
        inputs,
        texts,
        options_files(spec.flags, Path(spec.source).parent),
    )
    hit = tools.cache.lookup(manifest_key, tools.nvcc_version, texts)
    if hit is not None:
        return _cache_hit(hit, started)
    if tools.nvcc is None or tools.nvcc_version is None:
        return _failure(
            spec,
            arch,
            started,
            HarnessError(
                kind="nvcc_missing",
                message=f"nvcc not found: {settings.nvcc!r} is not an executable file or on PATH",
                fix=_TOOLKIT_FIX,
            ),
        )
    with tools.cache.building(manifest_key):
        # built meanwhile by the process this one waited for
        hit = tools.cache.lookup(manifest_key, tools.nvcc_version, texts)
        if hit is not None:
            return _cache_hit(hit, started)
        return _compile_and_store(
            spec,
            settings,
            tools.cache,
            arch,
            options,
            inputs,
            user_source,
            started,
            manifest_key=manifest_key,
            unsaved=unsaved,
            known_deps=known_deps,
            nvcc=tools.nvcc,
            nvcc_version=tools.nvcc_version,
        )


def _cache_hit(hit: BuildResult, started: float) -> BuildResult:
    hit.cached = True
    hit.seconds = time.perf_counter() - started
    hit.nvcc_stages_ms = {}
    return hit


def _compile_and_store(
    spec: BuildSpec,
    settings: Settings,
    cache: BuildCache,
    arch: str,
    options: list[str],
    inputs: list[str],
    user_source: str,
    started: float,
    *,
    manifest_key: str,
    unsaved: _Unsaved | None,
    known_deps: list[str] | None,
    nvcc: str,
    nvcc_version: str,
) -> BuildResult:
    """`nvcc` on `inputs` (an unsaved text's copy in its place), its result stored in `cache`
    under `manifest_key`, the key of `inputs` as the user knows them."""
    started_wall = time.time()
    texts = {unsaved.path: unsaved.text} if unsaved else {}
    with cache.scratch() as scratch:
        compiled_inputs, copy_options = inputs, []
        if unsaved is not None:
            copy = str(_write_copy(unsaved, scratch))
            compiled_inputs = [copy if path == unsaved.path else path for path in inputs]
            # first among quoted-include directories, as the file's own directory would be
            copy_options = ["-Xcompiler", "-iquote", "-Xcompiler", str(Path(unsaved.path).parent)]
        result = _compile(
            spec,
            settings,
            (nvcc, nvcc_version),
            arch,
            [*copy_options, *options],
            compiled_inputs,
            user_source,
            scratch,
            started,
        )
        if not result.ok or result.artifact is None:
            return result
        deps = known_deps
        if deps is None:
            deps = _dependencies(compiled_inputs, scratch, Path(spec.source).parent)
        if deps is not None and unsaved is not None:
            deps = sorted({unsaved.path if dep == copy else dep for dep in deps})
        # the file of an unsaved text was not read: saving it meanwhile changes nothing built
        read = [dep for dep in deps or [] if dep not in texts]
        if deps is None or _changed_since(read, started_wall):
            # unknown inputs, or one changed while nvcc read it: usable now, never looked up
            stored = cache.keep_uncached(Path(result.artifact), result)
        else:
            stored = cache.store(
                manifest_key, nvcc_version, deps, Path(result.artifact), result, texts
            )
        stored.seconds = time.perf_counter() - started
        return stored


def _compile(
    spec: BuildSpec,
    settings: Settings,
    toolkit: tuple[str, str],  # nvcc, and its `--version`
    arch: str,
    options: list[str],
    inputs: list[str],
    user_source: str,
    scratch: Path,
    started: float,
) -> BuildResult:
    nvcc, version = toolkit
    keep = scratch / "keep"
    keep.mkdir()
    artifact = scratch / (Path(spec.source).stem + _ARTIFACT_SUFFIX[spec.output_kind])
    command = [nvcc, *options, "-keep", f"-keep-dir={keep}", "-o", str(artifact), *inputs]
    cwd = Path(spec.source).parent
    try:
        # nvcc and the tools it starts are killed on timeout or any interruption (and they
        # stay in the worker's group, which its clients kill whole)
        ran = run_nvcc(
            command,
            cwd=cwd,
            timeout=settings.build_timeout_s,
            deps=scratch / "deps.d",
            temporary=scratch,  # removed with it: nothing of nvcc's is left in /tmp
        )
    except subprocess.TimeoutExpired as exc:
        return _failure(
            spec,
            arch,
            started,
            HarnessError(
                kind="timeout",
                message=f"nvcc did not finish within {settings.build_timeout_s:.0f} s and was "
                "killed",
                fix="Raise the `build_timeout_s` setting; heavy templates or torch headers can "
                "take minutes on a first build.",
                log=_tail(exc.output),
            ),
            command=command,
        )
    except RefusedCommand as exc:
        return _failure(
            spec,
            arch,
            started,
            HarnessError(kind="bad_target", message=str(exc), fix=exc.fix),
            command=command,
        )
    entries = {}
    for ptx in sorted(keep.glob("*.ptx")):
        entries.update(parse_ptx_entries(ptx.read_text(errors="replace")))
    kernel_lines = {
        name: (entry.file, entry.line)
        for name, entry in entries.items()
        if entry.file and entry.line
    }
    output, returncode = ran.output, ran.returncode
    diagnostics = parse_nvcc_output(
        output, source=user_source, kernel_lines=kernel_lines, cwd=str(cwd)
    )
    for diagnostic in diagnostics:
        diagnostic.fix = fix_for(diagnostic, version)
    resources = parse_ptxas_resources(output, arch=arch)
    apply_launch_bounds(resources, entries)
    result = BuildResult(
        ok=returncode == 0 and artifact.is_file(),
        source=spec.source,
        artifact=str(artifact) if returncode == 0 and artifact.is_file() else None,
        arch=arch,
        command=command,
        diagnostics=diagnostics,
        resources=resources,
        seconds=time.perf_counter() - started,
        nvcc_stages_ms=ran.stages_ms,
    )
    if not result.ok:
        result.error = _build_error(output, nvcc, arch, returncode, diagnostics)
    return result


def _build_error(
    output: str, nvcc: str, arch: str, returncode: int, diagnostics: list[SourceDiagnostic]
) -> HarnessError:
    if re.search(r"nvcc fatal\s*: Unsupported gpu architecture", output):
        return HarnessError(
            kind="wrong_arch",
            message=f"this nvcc cannot compile for {arch}",
            fix=f"Set `arch` to one it supports ({_supported_archs(nvcc)}), or install a CUDA "
            f"toolkit that supports {arch}.",
            log=_tail(output),
        )
    return HarnessError(
        kind="build_failed",
        message=f"nvcc failed (exit status {returncode}); see the diagnostics",
        fix=next(
            (d.fix for d in diagnostics if d.fix), "Fix the errors shown at their source lines."
        ),
        log=_tail(output),
    )


def _supported_archs(nvcc: str) -> str:
    try:
        out = subprocess.run([nvcc, "--list-gpu-code"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "see `nvcc --list-gpu-code`"
    archs = [line.strip() for line in out.stdout.splitlines() if line.strip().startswith("sm_")]
    return ", ".join(archs) or "see `nvcc --list-gpu-code`"


def _dependencies(sources: list[str], scratch: Path, cwd: Path) -> list[str] | None:
    """Every file the compiler read, from nvcc's make-style dependency output (`-MD`); None
    when it can't be had."""
    try:
        text = (scratch / "deps.d").read_text()
    except OSError:
        return None
    return sorted({*sources, *parse_depfile(text, cwd)})


def parse_depfile(text: str, cwd: Path) -> list[str]:
    """The prerequisites of a make rule `target : dep dep \\ ...` as absolute paths."""
    joined = text.replace("\\\n", " ")
    _, _, prerequisites = joined.partition(": ")
    paths = re.findall(r"(?:\\ |\S)+", prerequisites)
    return [str((cwd / p.replace("\\ ", " ")).resolve()) for p in paths]


def _changed_since(deps: list[str], started_wall: float) -> bool:
    """Whether a dependency was modified after the build started."""
    for dep in deps:
        try:
            if os.stat(dep).st_mtime > started_wall:
                return True
        except OSError:
            return True
    return False


def _tail(output: str | bytes | None, limit: int = 4000) -> str:
    if output is None:
        return ""
    text = output.decode(errors="replace") if isinstance(output, bytes) else output
    return text[-limit:]
