"""Workspace trust: nothing from the workspace is built or run unless the client says it is
trusted (initialization option `trusted`); the user is told once how to change that."""

from __future__ import annotations

UNTRUSTED_MESSAGE = (
    "KernelBlaster: this workspace is not trusted, so its kernels are not built, run or "
    "profiled (cached results and knowledge-base suggestions still show). In VS Code, trust the "
    "folder (Workspaces: Manage Workspace Trust); in other editors start the server with "
    'initializationOptions {"trusted": true}.'
)
UNTRUSTED_DIAGNOSTIC = "Not built or run: the workspace is not trusted."


class TrustGate:
    def __init__(self, trusted: bool) -> None:
        self.trusted = trusted
        self._explained = False

    def explanation_due(self) -> bool:
        """True exactly once, the first time an untrusted workspace would have run something."""
        if self.trusted or self._explained:
            return False
        self._explained = True
        return True
