"""User and workspace settings, as one typed record.

Precedence, lowest first: defaults, `[tool.kernelblaster]` in the workspace's `pyproject.toml`,
`kernelblaster.toml`, `KERNELBLASTER_*` environment variables, and finally whatever the editor
sends over LSP (applied by the server with `Settings.merged`). API keys are never a field here:
only the *name* of the environment variable that holds one, so a key can't end up in a file,
a log or the knowledge base by way of this record.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import platformdirs

from kernelblaster.config_trust import assess, referenced_paths
from kernelblaster.folders import CACHE_FIX, made_folder
from kernelblaster.kb_location import password_problem
from kernelblaster.trust import TrustListError, is_trusted

CONFIG_FILE = "kernelblaster.toml"
ENV_PREFIX = "KERNELBLASTER_"


class SettingsError(ValueError):
    """A configuration file or value that can't be used; the message says where and why."""


# Ranges: a timeout is positive and at most a day (an "infinite" one would overflow the timers);
# counts of trials, attempts and rollouts are at least one; tolerances are finite and >= 0.
Seconds = Annotated[float, msgspec.Meta(gt=0, le=86_400)]
AtLeastOne = Annotated[int, msgspec.Meta(ge=1)]
Tolerance = Annotated[float, msgspec.Meta(ge=0, le=1e30)]
GpuIndex = Annotated[int, msgspec.Meta(ge=0)]


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
    args: list[str] = []
    nvcc_flags: list[str] = []
    atol: Tolerance | None = None
    rtol: Tolerance | None = None
    allow_library_calls: bool = False


class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    # build
    nvcc: str = "nvcc"
    nvcc_flags: list[str] = []
    arch: str | None = None  # e.g. "sm_90"; detected from the GPU when unset
    # The server builds an open source's unsaved text when typing pauses, so that saving that
    # text finds its build in the cache (server/build_ahead.py).
    build_on_change: bool = True
    # profiling
    ncu_path: str = "ncu"
    ncu_depth: Literal["quick", "full"] = "quick"
    compute_sanitizer_path: str = "compute-sanitizer"
    # Plain targets under ncu through the native driver (harness/native/native_driver.py) instead
    # of Python + torch: on since tests/harness/test_native_driver_gpu.py, which compares both
    # paths' kernels, launch configurations and states, passed on an H100 (2026-11-27).
    native_profile_driver: bool = True
    # compute-sanitizer's run of a plain target through the same native driver instead of
    # run_once (harness/check/check.py: _sanitize). Off until
    # tests/harness/test_sanitizer_driver_gpu.py, which plants out-of-bounds accesses and a
    # race for both paths to find, has passed on a GPU.
    native_sanitizer_driver: bool = False
    # A plain target's quick state from counters the worker collects itself with CUPTI
    # (harness/profile/counters.py, ~1 s), shown before ncu's pass adds the source lines and its
    # rules' estimates. Same states as ncu on the examples (tests/harness/test_counters_gpu.py).
    in_process_counters: bool = True
    # timeouts, seconds
    build_timeout_s: Seconds = 300.0
    run_timeout_s: Seconds = 60.0
    profile_timeout_s: Seconds = 180.0
    # verification
    trials: AtLeastOne = 3
    atol: Tolerance | None = None
    rtol: Tolerance | None = None
    allow_library_calls: bool = False
    # GPU: one index, or a list of them that `optimize` spreads its rollouts over (rollout r on
    # the r-th in turn). parallel_gpu_jobs: the jobs one GPU runs at once (the server's saves
    # and optimizations; the candidates `optimize` evaluates, agents/gpu_gates.py).
    gpu_index: GpuIndex | list[GpuIndex] = 0
    parallel_gpu_jobs: AtLeastOne = 1
    # LLM (OpenAI-compatible endpoint)
    llm_base_url: str | None = None
    llm_model: str = "gpt-4o"
    llm_api_key_env: str = "OPENAI_API_KEY"
    llm_timeout_s: Seconds = 120.0
    llm_max_retries: Annotated[int, msgspec.Meta(ge=0)] = 3
    # `init`: LLM replies tried (each built and verified) for a module's first kernel
    init_attempts: AtLeastOne = 4
    # optimization loop
    rollouts: AtLeastOne = 4
    depth: AtLeastOne = 3
    top_k: AtLeastOne = 3
    # editor: a code lens above each kernel (time, state, headroom; Optimize, Show profile,
    # Open in Nsight Compute)
    code_lens: bool = True
    # storage
    kb_path: str | None = None
    cache_dir: str | None = None
    # how the server starts its workers (empty: this Python, `-m kernelblaster.harness.worker` /
    # `-m kernelblaster.agents.optimize_worker`); e.g. to run them in a container or on a GPU host
    worker_command: list[str] = []
    optimize_worker_command: list[str] = []
    targets: list[TargetConfig] = []

    def __post_init__(self) -> None:
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
        # msgspec says "Expected `int` >= 1 - at `$.trials`": name the setting first
        what, at, where = str(exc).partition(" - at `$.")
        setting = f"{where.rstrip('`')}: " if at else ""
        raise SettingsError(f"{origin}: {setting}{what}") from exc


def find_config_dir(start: Path) -> Path | None:
    """The nearest directory at or above `start` holding kernelblaster.toml or a pyproject.toml
    with a [tool.kernelblaster] table. A pyproject.toml that doesn't parse is passed over when
    it doesn't mention kernelblaster (another project's broken file is not our error)."""
    start = start if start.is_dir() else start.parent
    for directory in (start, *start.parents):
        if (directory / CONFIG_FILE).is_file():
            return directory
        pyproject = directory / "pyproject.toml"
        if pyproject.is_file() and "kernelblaster" in _pyproject_tool_table(pyproject):
            return directory
    return None


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
) -> Settings:
    """Settings for the workspace containing `start` (a file or directory; default: cwd).

    `read_files=False` uses no configuration file at all (an untrusted workspace). A file that
    sets more than the harmless settings (kernelblaster/config_trust.py) is refused unless
    `trusted`, or, when that is None, unless the user trusts that file and what it names
    (kernelblaster/trust.py). `only`: the settings the caller uses; the files' other settings
    are neither read nor judged (`kb` needs kb_path alone). Relative paths in target entries
    are resolved against the config file's directory."""
    environ = dict(os.environ) if environ is None else environ
    start = (start or Path.cwd()).resolve()
    data: dict[str, Any] = {}
    config_dir = find_config_dir(start) if read_files else None
    if config_dir is not None:
        for config, table in _config_tables(config_dir):
            if only is not None:
                table = {key: value for key, value in table.items() if key in only}
            _convert(table, str(config))  # a wrong type is named with its file
            if trusted is not True:
                _require_trust(config, table, start, environ, ask=trusted is None)
            data.update(table)
        for target in data.get("targets", []):
            for key in ("source", "reference", "bindings", "golden"):
                if isinstance(target.get(key), str):
                    target[key] = str((config_dir / target[key]).resolve())
    overrides = _env_overrides(environ)
    _convert(overrides, f"{ENV_PREFIX}* environment variables")
    data.update(overrides)
    return _convert(data, str(config_dir or "environment"))


def _require_trust(
    config: Path, table: dict[str, Any], start: Path, environ: dict[str, str], *, ask: bool
) -> None:
    """Raise UntrustedConfigError when the table sets more than the harmless settings and the
    user does not trust it as it is (`ask`: consult the trust list; else it is untrusted)."""
    assessment = assess(table, config.parent)
    if not assessment.problems:
        return
    if ask:
        named = referenced_paths(assessment.words, table, config.parent, start)
        try:
            if is_trusted(config, named, environ):
                return
        except (TrustListError, OSError) as exc:
            raise SettingsError(str(exc)) from exc
    raise UntrustedConfigError(config, assessment.problems, start)


def config_references(config: Path, start: Path) -> list[Path]:
    """The files and folders of the repository that `config`'s restricted settings name, seen
    from `start` (what `kernelblaster trust` records beside the file's own digest)."""
    table = dict(_config_tables(config.parent)).get(config, {})
    words = assess(table, config.parent).words
    return referenced_paths(words, table, config.parent, start)


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
            f"settings (README: Trusting a repository's configuration) until you trust it. If "
            f"you trust this repository, run `kernelblaster trust {where}` once (an edit to the "
            f"file, or to a file it names, needs trusting again), or pass --trust for one run; "
            f"otherwise remove them."
        )
        self.config = config
