"""Code actions on a kernel: one "Optimize kernel: <technique> (predicted N×)" per top-k
technique, "Optimize kernel" (the agents pick), and "Show diff" once a verified candidate
exists. Each is a command; nothing runs until the user picks one."""

from __future__ import annotations

from lsprotocol import types

from kernelblaster.kb.records import RankedTechnique
from kernelblaster.server import formatting
from kernelblaster.server.cache import KeptCandidate

OPTIMIZE = "kernelblaster.optimize"
SHOW_DIFF = "kernelblaster.showDiff"
PROFILE = "kernelblaster.profile"
KNOWLEDGE_BASE = "kernelblaster.knowledgeBase"
KERNEL_AT = "kernelblaster.kernelAt"
KIND = types.CodeActionKind.RefactorRewrite


def optimize_title(technique: RankedTechnique) -> str:
    title = technique.title
    if title[:1].isupper() and title[1:2].islower():  # "Shared-memory tiling" → "shared-memory…"
        title = title[0].lower() + title[1:]
    return f"Optimize kernel: {title} (predicted {formatting.factor(technique.predicted_speedup)})"


def kernel_actions(
    uri: str,
    kernel: str,
    version: int,
    ranked: list[RankedTechnique],
    *,
    top_k: int,
    candidate: KeptCandidate | None,
    disabled_reason: str | None,
) -> list[types.CodeAction]:
    """`disabled_reason` (e.g. no LLM endpoint) marks the optimize actions disabled, for
    clients that show why; pass None for clients without that support (the command then
    answers with the same reason)."""
    disabled = types.CodeActionDisabled(reason=disabled_reason) if disabled_reason else None
    actions = []
    for technique in ranked[:top_k]:
        actions.append(
            _optimize(
                optimize_title(technique), uri, kernel, version, technique.technique, disabled
            )
        )
    actions.append(_optimize("Optimize kernel", uri, kernel, version, None, disabled))
    if candidate is not None:
        speedup = f" ({formatting.factor(candidate.speedup)})" if candidate.speedup else ""
        title = f"Show diff: best verified {kernel}{speedup}"
        actions.append(
            types.CodeAction(
                title=title,
                kind=KIND,
                command=types.Command(
                    title=title, command=SHOW_DIFF, arguments=[{"uri": uri, "kernel": kernel}]
                ),
            )
        )
    return actions


def _optimize(
    title: str,
    uri: str,
    kernel: str,
    version: int,
    technique: str | None,
    disabled: types.CodeActionDisabled | None,
) -> types.CodeAction:
    arguments = [{"uri": uri, "kernel": kernel, "technique": technique, "version": version}]
    return types.CodeAction(
        title=title,
        kind=KIND,
        command=types.Command(title=title, command=OPTIMIZE, arguments=arguments),
        disabled=disabled,
    )
