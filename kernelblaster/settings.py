"""User and workspace settings, as one typed record. Precedence, lowest first: defaults,
`[tool.kernelblaster]` in `pyproject.toml`, `kernelblaster.toml`, `KERNELBLASTER_*` variables,
then the editor's (`Settings.merged`). API keys are never a field, only the name of the variable
holding one, so a key can't reach a file, a log or the KB. Configuration files are looked for up
to the repository's root or workspace, never in a world-writable folder; every budget has a
maximum."""

from __future__ import annotations

import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import platformdirs

from kernelblaster.config_trust import (
    TARGET_FILES,
    WRITTEN_SETTINGS,
    Assessment,
    assess,
    bases,
    referenced_paths,
    repository_of,
)
from kernelblaster.folders import CACHE_FIX, made_folder
from kernelblaster.kb_location import is_postgres_url, password_problem
from kernelblaster.trust import TrustListError, is_trusted

CONFIG_FILE = "kernelblaster.toml"
ENV_PREFIX = "KERNELBLASTER_"


class SettingsError(ValueError):
    """A configuration file or value that can't be used; the message says where and why."""


# Ranges: a timeout is positive and at most a day (an "infinite" one would overflow the timers);
# counts of trials, attempts and rollouts are at least one and at most a maximum the manual
# documents (docs/trust.md), each well past what the method gains from (the paper: 10
# rollouts, 10 steps, diminishing past 8 and 4); tolerances are finite and >= 0.
Seconds = Annotated[float, msgspec.Meta(gt=0, le=86_400)]
Tolerance = Annotated[float, msgspec.Meta(ge=0, le=1e30)]
GpuIndex = Annotated[int, msgspec.Meta(ge=0, le=255)]
Trials = Annotated[int, msgspec.Meta(ge=1, le=100)]
Rollouts = Annotated[int, msgspec.Meta(ge=1, le=64)]
Steps = Annotated[int, msgspec.Meta(ge=1, le=32)]  # depth, top_k, init_attempts
Retries = Annotated[int, msgspec.Meta(ge=0, le=10)]
GpuJobs = Annotated[int, msgspec.Meta(ge=1, le=32)]

# Command lines: nvcc hands every flag to gcc, which passes them on to its own programs in one
# environment variable of at most 128 KiB (Linux); the bounds keep two such lists (the
# settings' and a target's) and nvcc's own words well under it.
MAX_WORDS = 1024
MAX_WORD = 4096
MAX_CHARACTERS = 32_768
Word = Annotated[str, msgspec.Meta(max_length=MAX_WORD)]
Words = Annotated[list[Word], msgspec.Meta(max_length=MAX_WORDS)]


def _too_long(name: str, words: list[str]) -> None:
    if (total := sum(map(len, words))) > MAX_CHARACTERS:
        raise ValueError(
            f"{name}: {total:,} characters in all, at most {MAX_CHARACTERS:,} (longer command "
            "lines than the machine takes)"
        )


class TargetConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One explicitly configured kernel target (`[[targets]]` in kernelblaster.toml)."""

    source: str
    reference: str | None = None
    # A torch extension's C++ file with PYBIND11_MODULE, when its kernels are in `source`
    # without torch headers (compiled apart, so editing the kernels doesn't recompile torch's).
    bindings: str | None = None
    entry: str | None = None
    kind: Literal["auto", "extension", "plain", "kernelbench", "standalone"] = "auto"
    golden: str | None = None
    args: Words = []
    nvcc_flags: Words = []
    atol: Tolerance | None = None
    rtol: Tolerance | None = None
    allow_library_calls: bool = False

    def __post_init__(self) -> None:
        _too_long("args", self.args)
        _too_long("nvcc_flags", self.nvcc_flags)


class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    # build
    nvcc: str = "nvcc"
    nvcc_flags: Words = []
    arch: str | None = None  # e.g. "sm_90"; detected from the GPU when unset
    # The server builds an open source's unsaved text when typing pauses, so that saving that
    # text finds its build in the cache (server/session/build_ahead.py).
    build_on_change: bool = True
    # profiling
    ncu_path: str = "ncu"
    ncu_depth: Literal["quick", "full"] = "quick"
    compute_sanitizer_path: str = "compute-sanitizer"
    # Plain targets under ncu through the native driver (harness/native/native_driver.py) instead
    # of Python + torch: on since tests/harness/native/test_native_driver_gpu.py, which compares
    # both paths' kernels, launch configurations and states, passed on an H100 (2026-11-27).
    native_profile_driver: bool = True
    # compute-sanitizer's run of a plain target through the same native driver instead of
    # run_once (harness/check/check.py: _sanitize). Off until
    # tests/harness/native/test_sanitizer_driver_gpu.py, which plants out-of-bounds accesses and a
    # race for both paths to find, has passed on a GPU.
    native_sanitizer_driver: bool = False
    # A plain target's quick state from counters the worker collects itself with CUPTI
    # (harness/profile/counters.py, ~1 s), shown before ncu's pass adds the source lines and its
    # rules' estimates. Same states as ncu on the examples
    # (tests/harness/profile/test_counters_gpu.py).
    in_process_counters: bool = True
    # timeouts, seconds
    build_timeout_s: Seconds = 300.0
    run_timeout_s: Seconds = 60.0
    profile_timeout_s: Seconds = 180.0
    # verification
    trials: Trials = 3
    atol: Tolerance | None = None
    rtol: Tolerance | None = None
    allow_library_calls: bool = False
    # GPU: one index, or a list of them that `optimize` spreads its rollouts over (rollout r on
    # the r-th in turn). parallel_gpu_jobs: the jobs one GPU runs at once (the server's saves
    # and optimizations; the candidates `optimize` evaluates, agents/loop/gpu_gates.py).
    gpu_index: GpuIndex | Annotated[list[GpuIndex], msgspec.Meta(max_length=64)] = 0
    parallel_gpu_jobs: GpuJobs = 1
    # LLM (OpenAI-compatible endpoint)
    llm_base_url: str | None = None
    llm_model: str = "gpt-4o"
    llm_api_key_env: str = "OPENAI_API_KEY"
    llm_timeout_s: Seconds = 120.0
    llm_max_retries: Retries = 3
    # `init`: LLM replies tried (each built and verified) for a module's first kernel
    init_attempts: Steps = 4
    # optimization loop
    rollouts: Rollouts = 4
    depth: Steps = 3
    top_k: Steps = 3
    # editor: a code lens above each kernel (time per call, state, headroom to the roof that
    # limits it, opening the profile; Optimize)
    code_lens: bool = True
    # storage
    kb_path: str | None = None
    cache_dir: str | None = None
    # how the server starts its workers (empty: this Python, `-m kernelblaster.harness.worker` /
    # `-m kernelblaster.agents.optimize_worker`); e.g. to run them in a container or on a GPU host
    worker_command: Words = []
    optimize_worker_command: Words = []
    targets: Annotated[list[TargetConfig], msgspec.Meta(max_length=MAX_WORDS)] = []

    def __post_init__(self) -> None:
        for name in ("nvcc_flags", "worker_command", "optimize_worker_command"):
            _too_long(name, getattr(self, name))
        # A team KB's password belongs to PGPASSWORD or a password file, never to settings
        # (which are files, environment dumps and LSP traffic): refuse it here, before it goes
        # anywhere.
        if self.kb_path and (problem := password_problem(self.kb_path)):
            raise ValueError(f"kb_path: {problem}")

    def merged(self, overrides: dict[str, Any]) -> Settings:
        """A copy with `overrides` applied (unknown keys are an error, None keeps the value)."""
        current = msgspec.to_builtins(self)
        current.update({k: v for k, v in overrides.items() if v is not None})
        return _convert(current, "settings")

    @property
    def gpu(self) -> int:
        """The GPU a single job runs on: gpu_index, or the first of its list."""
        return self.gpus()[0]

    def gpus(self) -> list[int]:
        return [self.gpu_index] if isinstance(self.gpu_index, int) else self.gpu_index or [0]

    def cache_root(self) -> Path:
        """Where builds, baselines and scratch files go: `cache_dir`, else the per-user cache."""
        if self.cache_dir:
            return Path(self.cache_dir)
        return Path(platformdirs.user_cache_dir("kernelblaster"))

    def cache_folder(self, *parts: str) -> Path:
        """The cache's folder `parts` (the cache itself without them), made when missing;
        FolderError (kernelblaster/folders.py) when it can't be."""
        return made_folder(self.cache_root().joinpath(*parts), fix=CACHE_FIX)

    def llm_api_key(self) -> str | None:
        """The API key, read from the environment at the moment it is needed."""
        return os.environ.get(self.llm_api_key_env) or None


def _convert(data: dict[str, Any], origin: str) -> Settings:
    try:
        return msgspec.convert(data, Settings, strict=False)
    except msgspec.ValidationError as exc:
        # msgspec says "Expected `int` <= 64 - at `$.rollouts`": name the setting and the
        # value first, then the limit
        what, at, where = str(exc).partition(" - at `$.")
        setting = where.rstrip("`")
        named = f"{setting} = {_shown(_at(data, setting))}: " if at else ""
        raise SettingsError(f"{origin}: {named}{what}") from exc


def _at(data: Any, path: str) -> Any:
    """The value at msgspec's path (`targets[0].nvcc_flags[3]`) in `data`, or None."""
    for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", path):
        try:
            data = data[int(index)] if index else data[name]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _shown(value: Any) -> str:
    if isinstance(value, str) and len(value) > 60:
        return f"a string of {len(value):,} characters"
    if isinstance(value, list) and len(repr(value)) > 60:
        return f"a list of {len(value):,} items"
    return repr(value)


def find_config_dir(start: Path, workspace: Path | None = None) -> Path | None:
    """The nearest directory at or above `start`, up to its repository's root or `workspace`
    (the editor's workspace folder), holding kernelblaster.toml or a pyproject.toml with a
    [tool.kernelblaster] table. A pyproject.toml that doesn't parse is passed over when it
    doesn't mention kernelblaster (another project's broken file is not our error)."""
    for directory in _config_folders(start, workspace):
        if (directory / CONFIG_FILE).is_file():
            return directory
        pyproject = directory / "pyproject.toml"
        if pyproject.is_file() and "kernelblaster" in _pyproject_tool_table(pyproject):
            return directory
    return None


def _config_folders(start: Path, workspace: Path | None) -> list[Path]:
    """The folders whose configuration may apply to `start`: its own, then each above it up to
    the first that is the repository's root (holds `.git`) or `workspace`; only its own when
    neither is above it. A folder others may write to ends the list before it: its files are
    anybody's (a kernelblaster.toml, or a .git, planted in /tmp)."""
    start = start if start.is_dir() else start.parent
    workspace = workspace.resolve() if workspace is not None else None
    found: list[Path] = []
    for folder in (start, *start.parents):
        if _writable_by_others(folder):
            break
        found.append(folder)
        if (folder / ".git").exists() or folder == workspace:
            return found
    return found[:1]


def _writable_by_others(folder: Path) -> bool:
    try:
        return bool(folder.stat().st_mode & stat.S_IWOTH)
    except OSError:
        return True


def _pyproject_tool_table(pyproject: Path) -> dict[str, Any]:
    try:
        tool = _read_toml(pyproject).get("tool", {})
        return tool if isinstance(tool, dict) else {}
    except SettingsError:
        try:
            if "kernelblaster" not in pyproject.read_text(encoding="utf-8", errors="replace"):
                return {}
        except OSError:
            return {}
        raise


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"{path}: {exc}") from exc


def _env_overrides(environ: dict[str, str]) -> dict[str, Any]:
    """KERNELBLASTER_<FIELD> for scalar fields; KERNELBLASTER_KB is the documented alias of
    KERNELBLASTER_KB_PATH."""
    scalar_fields = {
        name
        for name, value in msgspec.to_builtins(Settings()).items()
        if not isinstance(value, list)
    }
    found: dict[str, Any] = {}
    for name in scalar_fields:
        value = environ.get(ENV_PREFIX + name.upper())
        if value is not None:
            found[name] = value
    if "," in found.get("gpu_index", ""):  # KERNELBLASTER_GPU_INDEX=0,1: a list
        found["gpu_index"] = found["gpu_index"].split(",")
    if "KERNELBLASTER_KB" in environ and "kb_path" not in found:
        found["kb_path"] = environ["KERNELBLASTER_KB"]
    return found


def load_settings(
    start: Path | None = None,
    environ: dict[str, str] | None = None,
    *,
    read_files: bool = True,
    trusted: bool | None = None,
    only: frozenset[str] | None = None,
    workspace: Path | None = None,
) -> Settings:
    """Settings for the workspace containing `start` (default: cwd). `read_files=False` reads no
    configuration file (an untrusted workspace). A file setting more than the harmless settings
    is refused unless `trusted` (None: unless the user trusts it). `only`: the settings the
    caller uses, the others neither read nor judged. `workspace`: above it no file is read.
    Relative paths resolve against the config file's folder."""
    environ = dict(os.environ) if environ is None else environ
    start = (start or Path.cwd()).resolve()
    data: dict[str, Any] = {}
    config_dir = find_config_dir(start, workspace) if read_files else None
    if config_dir is not None:
        for config, table in _config_tables(config_dir):
            if only is not None:
                table = {key: value for key, value in table.items() if key in only}
            _convert(table, str(config))  # a wrong type is named with its file
            if trusted is not True:
                _require_trust(config, table, start, environ, ask=trusted is None)
            data.update(table)
        for target in data.get("targets", []):
            for key in TARGET_FILES:
                if isinstance(target.get(key), str):
                    target[key] = str((config_dir / target[key]).resolve())
        for key in WRITTEN_SETTINGS:
            if isinstance(data.get(key), str) and not _kept_as_written(data[key]):
                data[key] = os.path.normpath(config_dir / data[key])
    overrides = _env_overrides(environ)
    _convert(overrides, f"{ENV_PREFIX}* environment variables")
    data.update(overrides)
    return _convert(data, str(config_dir or "environment"))


def _kept_as_written(value: str) -> bool:
    """A place named as the user's own (`~/kb.sqlite3`), absolutely, or a team KB's URL."""
    return value.startswith("~") or Path(value).is_absolute() or is_postgres_url(value)


_DEFAULTS = msgspec.to_builtins(Settings())


def _require_trust(
    config: Path, table: dict[str, Any], start: Path, environ: dict[str, str], *, ask: bool
) -> None:
    """Raise UntrustedConfigError when the table sets more than the harmless settings and the
    user does not trust it as it is (`ask`: consult the trust list; else it is untrusted)."""
    assessment = assess(table, config.parent, start, _DEFAULTS)
    if not assessment.problems:
        return
    if ask:
        named, places = _covered(config, table, start, assessment)
        try:
            if is_trusted(config, named, places, environ):
                return
        except (TrustListError, OSError) as exc:
            raise SettingsError(str(exc)) from exc
    raise UntrustedConfigError(config, assessment.problems, start)


def _covered(
    config: Path, table: dict[str, Any], start: Path, assessment: Assessment
) -> tuple[list[Path], list[Path]]:
    """What trust in `config` covers: the files and folders of the repository its restricted
    settings name, and the places they write to."""
    folders = bases(table, config.parent, start)
    named = referenced_paths(assessment.words, repository_of(config.parent), folders)
    return named, assessment.places


def config_references(config: Path, start: Path) -> tuple[list[Path], list[Path]]:
    """The files and folders of the repository that `config`'s restricted settings name, and
    the places they write to, seen from `start` (what `kernelblaster trust` records beside the
    file's own digest)."""
    table = dict(_config_tables(config.parent)).get(config, {})
    return _covered(config, table, start, assess(table, config.parent, start, _DEFAULTS))


def _config_tables(config_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """(file, its kernelblaster settings), lowest precedence first."""
    tables = []
    pyproject = config_dir / "pyproject.toml"
    if pyproject.is_file():
        table = _pyproject_tool_table(pyproject).get("kernelblaster")
        if isinstance(table, dict):
            tables.append((pyproject, table))
    config = config_dir / CONFIG_FILE
    if config.is_file():
        tables.append((config, _read_toml(config)))
    return tables


class UntrustedConfigError(SettingsError):
    """A repository's configuration file sets more than the harmless settings, and the user
    hasn't trusted it (as it is, with what it names)."""

    def __init__(self, config: Path, problems: list[str], start: Path) -> None:
        where = start if start.is_dir() else start.parent
        super().__init__(
            f"{config} sets {'; '.join(problems)}. A repository's file may set only harmless "
            f"settings (the manual's Trust and security page, docs/trust.md) until you trust "
            f"it. If you trust this repository, run `kernelblaster trust {where}` once (an edit "
            f"to the file, or to a file it names, needs trusting again), or pass --trust for one "
            f"run; otherwise remove them."
        )
        self.config = config
