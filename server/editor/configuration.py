"""Settings as editors send them: the `kernelblaster` section of `workspace/configuration`
(camelCase keys) and the initialization options. Pure functions over `Settings`."""

from __future__ import annotations

import re
import sys
from typing import Any

import msgspec

from kernelblaster.settings import Settings, SettingsError

SECTION = "kernelblaster"
OPTIMIZE_WORKER_MODULE = "kernelblaster.agents.optimize_worker"

_FIELDS = frozenset(Settings.__struct_fields__)


class InitOptions(msgspec.Struct, kw_only=True):
    # The client's Workspace Trust; None (not sent): `kernelblaster trust`'s folders decide
    trusted: bool | None = None
    settings: dict[str, Any] = {}
    # The client's own commands the server may put in code lenses (code_lens.py), as
    # rust-analyzer's clients declare theirs; other clients get the server's commands.
    client_commands: list[str] = msgspec.field(default_factory=list, name="clientCommands")


def parse_init_options(raw: Any) -> tuple[InitOptions, str | None]:
    """The initialization options, or the defaults and a message saying what was wrong."""
    if raw is None:
        return InitOptions(), None
    try:
        return msgspec.convert(raw, InitOptions), None
    except msgspec.ValidationError as exc:
        return InitOptions(), (
            f"initializationOptions ignored ({exc}); expected "
            '{"trusted": true|false, "settings": {"llmBaseUrl": ..., ...}}'
        )


def snake_case(key: str) -> str:
    """`llmBaseUrl` → `llm_base_url` (snake_case keys pass through unchanged)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key).lower()


def apply_client_settings(base: Settings, raw: Any) -> tuple[Settings, list[str]]:
    """`base` with the editor's settings applied, and one problem line per key that was not.

    A bad value or an unknown key is skipped on its own, so one typo doesn't throw away the
    rest of the user's configuration. Null means "not set" and keeps the base value."""
    if raw is None:
        return base, []
    if not isinstance(raw, dict):
        return base, [f"setting section '{SECTION}' must be an object, got {type(raw).__name__}"]
    problems: list[str] = []
    overrides: dict[str, Any] = {}
    for key, value in raw.items():
        name = snake_case(str(key))
        if name not in _FIELDS:
            problems.append(f"unknown setting {SECTION}.{key} (ignored)")
        elif value is not None:
            overrides[name] = value
    try:
        return base.merged(overrides), problems
    except SettingsError:
        settings = base
        for name, value in overrides.items():
            try:
                settings = settings.merged({name: value})
            except SettingsError as exc:
                problems.append(f"{SECTION}.{_camel_case(name)} = {value!r} ignored: {exc}")
        return settings, problems


# Settings only the editor, the KB or the LLM side read: a save's result doesn't depend on them.
# Any other change (nvcc, its flags, arch, timeouts, tolerances, targets, the worker command, ...)
# may change every open file's result, which is then computed again.
EDITOR_ONLY_FIELDS = frozenset(
    {
        "build_on_change",
        "cache_dir",
        "code_lens",
        "depth",
        "init_attempts",
        "kb_path",
        "llm_api_key_env",
        "llm_base_url",
        "llm_max_retries",
        "llm_model",
        "llm_timeout_s",
        "optimize_worker_command",
        "parallel_gpu_jobs",
        "rollouts",
        "top_k",
    }
)


def results_change(before: Settings, after: Settings) -> bool:
    """Whether the open files' results may differ under `after`: a setting the harness reads
    changed."""
    return any(
        getattr(before, name) != getattr(after, name) for name in _FIELDS - EDITOR_ONLY_FIELDS
    )


def _camel_case(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def optimize_worker_command(settings: Settings) -> list[str]:
    return list(settings.optimize_worker_command) or [sys.executable, "-m", OPTIMIZE_WORKER_MODULE]


def llm_missing_message(settings: Settings, doing: str = "Optimizing") -> str | None:
    """Why `doing` (an LLM command: "Optimizing", "Writing a kernel") can't run for lack of an
    LLM endpoint, or None when it can."""
    if settings.llm_base_url:
        return None
    return (
        f"{doing} needs an LLM endpoint: set kernelblaster.llmBaseUrl to an OpenAI-compatible "
        "URL (e.g. https://api.openai.com/v1, or http://localhost:11434/v1 for Ollama), "
        "kernelblaster.llmModel to the model name, and put the API key (if the endpoint needs "
        f"one) in the environment variable {settings.llm_api_key_env} of the editor."
    )
