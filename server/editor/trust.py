"""Workspace trust: nothing from the workspace is built or run unless the user trusts it. A
client that knows (VS Code's Workspace Trust) says so in the initialization option `trusted`;
for one that doesn't send it, the user trusts a folder with `kernelblaster trust FOLDER`, per
folder, as an editor's Workspace Trust does (kernelblaster/trust.py keeps the list). The user is
told once how to change it."""

from __future__ import annotations

from pathlib import Path

from kernelblaster.trust import TrustListError, folder_trusted

UNTRUSTED_MESSAGE = (
    "KernelBlaster: this workspace is not trusted, so its kernels are not built, run or "
    "profiled (cached results and knowledge-base suggestions still show). In VS Code, trust the "
    "folder (Workspaces: Manage Workspace Trust); in other editors, if you trust this folder, "
    "run `kernelblaster trust FOLDER` once for it and restart the language server."
)
UNTRUSTED_DIAGNOSTIC = "Not built or run: the workspace is not trusted."


class TrustGate:
    def __init__(self, trusted: bool, *, by_folder_list: bool = False) -> None:
        self.trusted = trusted
        # Trusted by the client, the workspace's configuration files are trusted with it (the
        # editor's consent); trusted by `kernelblaster trust`, they need their own, as on the
        # command line (an edit after it needs trusting again).
        self.files_trusted = trusted and not by_folder_list
        self._explained = False

    def explanation_due(self) -> bool:
        """True exactly once, the first time an untrusted workspace would have run something."""
        if self.trusted or self._explained:
            return False
        self._explained = True
        return True


def workspace_trust(client_says: bool | None, root: Path | None) -> tuple[TrustGate, str | None]:
    """The gate for a session: the client's word when it gives one, else whether `root` is at
    or below a folder the user trusted; and a problem to show (a trust list that can't be
    read: then nothing is trusted)."""
    if client_says is not None:
        return TrustGate(client_says), None
    if root is None:
        return TrustGate(False), None
    try:
        return TrustGate(folder_trusted(root), by_folder_list=True), None
    except TrustListError as exc:
        return TrustGate(False), str(exc)
