"""Keeping the server's effective settings current: configuration files and environment
(`load_settings`), then the initialization options, then the editor's `workspace/configuration`
— each later source overriding the earlier. Problems are shown to the user, never fatal."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException

from kernelblaster.server.editor.configuration import SECTION, apply_client_settings
from kernelblaster.server.results import knowledge
from kernelblaster.settings import Settings, SettingsError, load_settings

if TYPE_CHECKING:
    from kernelblaster.server.session.language_server import KernelBlasterServer

log = logging.getLogger(__name__)


async def refresh(ls: KernelBlasterServer, pushed: Any = None) -> None:
    """Recompute the settings. `pushed` is what a client without `workspace/configuration`
    sent with `didChangeConfiguration`."""
    problems: list[str] = []
    root = ls.workspace_root()
    try:
        # Untrusted: nothing from the workspace's files, not even a path. Trusted by the
        # editor: its Workspace Trust is the user's consent to the programs those files name;
        # by `kernelblaster trust`: the files need their own trust, as on the command line.
        base = await asyncio.to_thread(
            load_settings,
            root,
            read_files=ls.trust.trusted,
            trusted=True if ls.trust.files_trusted else None,
            workspace=root,
        )
    except SettingsError as exc:
        problems.append(f"configuration file ignored: {exc}")
        base = Settings()
    settings, found = apply_client_settings(base, ls.init_options.settings)
    problems += found
    client = await _client_section(ls) if _supports_configuration(ls) else pushed
    settings, found = apply_client_settings(settings, client)
    problems += found
    ls.settings = settings
    ls.jobs.set_gpu_slots(settings.parallel_gpu_jobs)
    ls.cache.cache_dir = Path(settings.cache_dir).expanduser() if settings.cache_dir else None
    if (problem := await ls.knowledge.use(knowledge.resolve_path(settings.kb_path))) is not None:
        problems.append(problem)
    if problems:
        ls.window_show_message(
            types.ShowMessageParams(
                type=types.MessageType.Warning,
                message="KernelBlaster settings: " + "; ".join(problems),
            )
        )


async def _client_section(ls: KernelBlasterServer) -> Any:
    params = types.ConfigurationParams(items=[types.ConfigurationItem(section=SECTION)])
    try:
        values = await ls.workspace_configuration_async(params)
    except JsonRpcException as exc:
        log.warning("workspace/configuration failed: %s", exc)
        return None
    return values[0] if values else None


def _supports_configuration(ls: KernelBlasterServer) -> bool:
    workspace = ls.client_capabilities.workspace
    return bool(workspace and workspace.configuration)
