"""`initialize`: the client's options, the workspace's trust, and the settings usable at once."""

from __future__ import annotations

from lsprotocol import types

from kernelblaster.server.editor.configuration import apply_client_settings, parse_init_options
from kernelblaster.server.editor.trust import workspace_trust
from kernelblaster.server.session.language_server import KernelBlasterServer


def initialize(ls: KernelBlasterServer, params: types.InitializeParams) -> None:
    options, problem = parse_init_options(params.initialization_options)
    ls.init_options = options
    ls.trust, trust_problem = workspace_trust(options.trusted, ls.workspace_root())
    # Usable at once (e.g. the worker command), before the full refresh in `initialized`.
    ls.settings, _ = apply_client_settings(ls.settings, options.settings)
    for said in (problem, trust_problem):
        if said:
            ls.window_show_message(
                types.ShowMessageParams(type=types.MessageType.Warning, message=said)
            )
