"""Which kind of kernel target a file is, and what it is checked against (docs/targets.md): an
explicit `[[targets]]` entry, a `foo.cu` + `foo.py` pair (extension, split extension or plain
CUDA), a KernelBench solution with its problem, or a standalone program with a golden output,
tried in that order. Resolution reads files only; nothing is built or imported."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Literal

import msgspec

from kernelblaster.harness.analysis.cuda_source import (
    CFunction,
    extern_c_functions,
    host_function_names,
    read_source,
)
from kernelblaster.harness.analysis.reference_source import outline
from kernelblaster.harness.protocol.records import HarnessError
from kernelblaster.harness.target.pairing import REFERENCE_SUFFIX, reference_beside
from kernelblaster.settings import Settings, TargetConfig

TargetKind = Literal["extension", "plain", "kernelbench", "standalone"]
# The kinds the worker loads and calls (harness/target/candidate.py); a standalone one is a program.
CALLED_KINDS: tuple[TargetKind, ...] = ("plain", "extension", "kernelbench")

# Default tolerances per output dtype: |actual - expected| <= atol * RMS(expected) + rtol *
# |expected|, so atol tracks each output's own magnitude (harness/target/compare.py).
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
}

_MAIN = re.compile(r"^\s*int\s+main\s*\(", re.MULTILINE)
_TORCH_INCLUDE = re.compile(r"#\s*include\s*[<\"](torch/|ATen/|c10/)")
_PYBIND11_MODULE = re.compile(r"^\s*PYBIND11_MODULE\s*\(", re.MULTILINE)
_MODEL_NEW = re.compile(r"^class\s+ModelNew\b", re.MULTILINE)


class Target(msgspec.Struct, kw_only=True):
    kind: TargetKind
    source: str  # the file the user edits (.cu, or the solution .py for kernelbench)
    reference: str | None = None  # KernelBench-style .py
    bindings: str | None = None  # an extension's PYBIND11_MODULE .cpp, when apart from `source`
    entry: str  # launcher name (plain), "forward" (extension), "ModelNew" (kernelbench), "main"
    golden: str | None = None
    args: list[str] = []  # program arguments (standalone)
    nvcc_flags: list[str] = []
    atol: float | None = None
    rtol: float | None = None
    allow_library_calls: bool = False


def _no_reference(source: Path) -> HarnessError:
    if source.suffix == ".py":
        return HarnessError(
            kind="no_reference",
            message=f"{source.name} (a KernelBench solution) has no problem file to be checked "
            "against.",
            fix=(
                "Pass the problem with --reference PROBLEM.py, or keep the solution beside its "
                "problem as <problem>_solution.py (e.g. 19_ReLU.py and 19_ReLU_solution.py), or "
                "add a [[targets]] entry with `reference` in kernelblaster.toml."
            ),
        )
    return HarnessError(
        kind="no_reference",
        message=f"{source.name} has no reference to be checked against.",
        fix=(
            f"Put {source.stem}.py beside it (a KernelBench-style reference: class Model, "
            "get_inputs(), get_init_inputs()), or add a [[targets]] entry with `reference` in "
            f"kernelblaster.toml, or, for a program with main(), a golden output "
            f"{source.stem}.golden. Until then only build diagnostics and resource usage are shown."
        ),
    )


def _not_a_solution(source: Path, text: str) -> HarnessError | None:
    """Why the `.py` `source` is no KernelBench solution (it defines no class ModelNew), or
    None. Most often it is the reference that a `.cu` is checked against."""
    if _MODEL_NEW.search(text):
        return None
    found = outline(text)
    if found is not None and "Model" not in found.missing:
        return HarnessError(
            kind="bad_target",
            message=f"{source.name} is a PyTorch reference (class Model), not a kernel: it holds "
            "no CUDA to build.",
            fix=f"Pass the .cu file that implements it ({source.stem}.cu beside {source.name} is "
            f"checked against it), or have the LLM write one: `kernelblaster init {source.name}`.",
        )
    return HarnessError(
        kind="bad_target",
        message=f"{source.name} is neither CUDA source nor a KernelBench solution (it defines no "
        "class ModelNew).",
        fix="Pass a .cu file, or a KernelBench solution .py that defines class ModelNew.",
    )


def _plain_launcher(source: Path, text: str, entry: str | None) -> CFunction | HarnessError:
    launchers = extern_c_functions(text)
    if entry is not None:
        launchers = [f for f in launchers if f.name == entry]
    if len(launchers) == 1:
        return launchers[0]
    names = ", ".join(f.name for f in extern_c_functions(text)) or "none"
    if not launchers:
        message = (
            f'{source.name} defines no extern "C" launcher'
            + (f" named {entry!r}" if entry else "")
            + f" (found: {names})."
        )
    else:
        message = f'{source.name} defines several extern "C" functions ({names}).'
    return HarnessError(
        kind="entry_missing",
        message=message,
        fix=(
            'Export exactly one launcher, e.g. extern "C" void launch(const float* x, '
            "float* out, int n), or name it with `entry` in kernelblaster.toml."
        ),
    )


def _from_config(config: TargetConfig, source: Path, text: str) -> Target | HarnessError:
    bindings = config.bindings
    if bindings is not None and not Path(bindings).is_file():
        return HarnessError(
            kind="bad_target",
            message=f"The bindings file {bindings} configured for {source.name} does not exist.",
            fix="Fix the `bindings` path in kernelblaster.toml (relative to that file).",
        )
    kind = config.kind if config.kind != "auto" else detect_kind(source, text)
    if bindings is not None and config.kind == "auto":
        kind = "extension"
    elif bindings is not None and kind != "extension":
        return HarnessError(
            kind="bad_target",
            message=f"{source.name} is configured as a {kind} target with a bindings file; "
            "only a PyTorch extension has bindings.",
            fix='Remove `bindings`, or set kind = "extension" (or leave `kind` out).',
        )
    not_a_solution = _not_a_solution(source, text) if kind == "kernelbench" else None
    if not_a_solution is not None and config.entry is None:
        return not_a_solution
    reference = config.reference
    entry = config.entry
    # the missing reference first: without one, the launcher can't be called anyway
    if kind in ("plain", "extension", "kernelbench") and reference is None:
        return _no_reference(source)
    if kind == "plain":
        launcher = _plain_launcher(source, text, entry)
        if isinstance(launcher, HarnessError):
            return launcher
        entry = launcher.name
    if reference is not None and not Path(reference).is_file():
        return HarnessError(
            kind="no_reference",
            message=f"The reference {reference} configured for {source.name} does not exist.",
            fix="Fix the `reference` path in kernelblaster.toml (relative to that file).",
        )
    golden = config.golden
    if kind == "standalone" and golden is None:
        golden = _golden_beside(source)
    return Target(
        kind=kind,
        source=str(source),
        reference=reference,
        bindings=bindings,
        entry=entry or {"extension": "forward", "kernelbench": "ModelNew"}.get(kind, "main"),
        golden=golden,
        args=list(config.args),
        nvcc_flags=list(config.nvcc_flags),
        atol=config.atol,
        rtol=config.rtol,
        allow_library_calls=config.allow_library_calls,
    )


def kept_functions(target: Target) -> list[str]:
    """The functions of `target.source` a rewrite must keep with their signatures: its entry,
    or, for kernels apart from their bindings, the functions of the kernels file that the
    bindings call (`forward` is in the bindings, which a rewrite doesn't touch)."""
    if target.bindings is None:
        return [target.entry]
    bindings = read_source(Path(target.bindings))
    return [
        name
        for name in host_function_names(read_source(Path(target.source)))
        if re.search(rf"(?<![\w.]){re.escape(name.split('::')[-1])}\s*\(", bindings)
    ]


def detect_kind(source: Path, text: str) -> TargetKind:
    if source.suffix == ".py":
        return "kernelbench"
    if _MAIN.search(text):
        return "standalone"
    if _TORCH_INCLUDE.search(text):
        return "extension"
    return "plain"


# KernelBench solutions kept beside their problem: 19_ReLU_solution.py solves 19_ReLU.py.
_SOLUTION_SUFFIXES = ("_solution", "_sol", "_new")


def _reference_beside(source: Path) -> str | None:
    """The reference a source implies by its name: foo.py beside foo.cu, or the KernelBench
    problem beside a solution named after it."""
    if source.suffix != REFERENCE_SUFFIX:
        beside = reference_beside(source)
        return str(beside) if beside.is_file() else None
    for suffix in _SOLUTION_SUFFIXES:
        if source.stem.endswith(suffix) and len(source.stem) > len(suffix):
            problem = source.with_name(source.stem.removesuffix(suffix) + ".py")
            if problem.is_file():
                return str(problem)
    return None


def _bindings_beside(source: Path) -> str | None:
    """`foo.cpp` beside `foo.cu` when it holds a PYBIND11_MODULE: the extension's bindings."""
    if source.suffix == ".py":
        return None
    beside = source.with_suffix(".cpp")
    try:
        text = read_source(beside)
    except OSError:
        return None
    return str(beside) if _PYBIND11_MODULE.search(text) else None


def _golden_beside(source: Path) -> str | None:
    for name in (f"{source.stem}.golden", f"{source.stem}.golden.txt"):
        if (source.parent / name).is_file():
            return str(source.parent / name)
    return None


def resolve_target(
    source: Path, settings: Settings, *, reference: Path | None = None
) -> Target | HarnessError:
    """The target for `source`, or an error saying why it can't be checked and how to fix it."""
    source = source.resolve()
    try:
        text = read_source(source)
    except OSError as exc:
        return HarnessError(
            kind="bad_target",
            message=f"Cannot read {source}: {exc.strerror or exc}",
            fix="Check that the file exists and that you may read it.",
        )
    for config in settings.targets:
        if Path(config.source).resolve() == source:
            if reference is not None:
                config = msgspec.structs.replace(config, reference=str(reference))
            return _from_config(config, source, text)
    implicit = TargetConfig(
        source=str(source),
        reference=str(reference) if reference else _reference_beside(source),
        bindings=_bindings_beside(source),
        atol=settings.atol,
        rtol=settings.rtol,
        allow_library_calls=settings.allow_library_calls,
    )
    target = _from_config(implicit, source, text)
    if isinstance(target, Target) and target.kind == "standalone" and target.golden is None:
        return _no_reference(source)
    return target


def extension_module_name(target: Target) -> str:
    """TORCH_EXTENSION_NAME: named after the file with PYBIND11_MODULE, so bindings apart from
    the kernels keep their name (and their compiled object) across edits and rewrites of the
    kernels, whose candidates are built from copies elsewhere."""
    module_file = Path(target.bindings or target.source)
    digest = hashlib.sha256(str(module_file.resolve()).encode()).hexdigest()[:10]
    stem = "".join(c if c.isalnum() else "_" for c in module_file.stem)
    return f"kb_{stem}_{digest}"
