"""Code actions on a kernel: one "Optimize kernel: <technique> (predicted N×; its record)" per
top-k technique, "Optimize kernel" (the agents pick), and "Show diff" once a verified candidate
exists; on a reference `.py`: "Write a CUDA kernel for this module", or, when its `.cu` exists,
"Replace <stem>.cu with a new CUDA kernel for this module". Each is a command; nothing runs
until the user picks one."""

from __future__ import annotations

from lsprotocol import types

from kernelblaster.kb.records import RankedTechnique
from kernelblaster.server.results.cache import KeptCandidate
from kernelblaster.server.views import formatting

OPTIMIZE = "kernelblaster.optimize"
SHOW_DIFF = "kernelblaster.showDiff"
PROFILE = "kernelblaster.profile"
KNOWLEDGE_BASE = "kernelblaster.knowledgeBase"
KERNEL_AT = "kernelblaster.kernelAt"
INIT = "kernelblaster.init"
WRITE_KERNEL_TITLE = "Write a CUDA kernel for this module"
KIND = types.CodeActionKind.RefactorRewrite


def optimize_title(technique: RankedTechnique) -> str:
    """ "Optimize kernel: <technique> (predicted N×; <what it rests on>)": a technique with
    attempts says how many were faster; an untried one, ranked on its prior alone (possibly
    above one with a measured record), says it is untried, an exploration."""
    title = technique.title
    if title[:1].isupper() and title[1:2].islower():  # "Shared-memory tiling" → "shared-memory…"
        title = title[0].lower() + title[1:]
    if technique.attempts:
        attempts = "attempt" if technique.attempts == 1 else "attempts"
        record = f"{technique.successes} of {technique.attempts} {attempts} faster"
    else:
        # untried, its basis is the prior: the catalog's, raised or not by ncu's estimate
        basis = "ncu's estimate" if technique.basis == "ncu_estimate" else "the catalog's prior"
        record = f"untried — exploring, from {basis}"
    predicted = formatting.factor(technique.predicted_speedup)
    return f"Optimize kernel: {title} (predicted {predicted}; {record})"


def offered(ranked: list[RankedTechnique], top_k: int) -> list[RankedTechnique]:
    """The `top_k` best of `ranked`, in its order; when those are all untried or weakly
    measured and a technique further down has a strong record (most of at least two attempts
    faster), it takes the last place: exploring the untried is labelled, and must not hide
    what has been measured to work."""
    top = ranked[:top_k]
    strong = next((t for t in ranked if t.attempts >= 2 and 2 * t.successes > t.attempts), None)
    if top_k < 2 or strong is None or strong in top:
        return top
    return [*top[:-1], strong]


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
    for technique in offered(ranked, top_k):
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


def init_actions(
    uri: str, target_name: str, *, target_exists: bool, disabled_reason: str | None
) -> list[types.CodeAction]:
    """The one action that writes `target_name` for the reference at `uri`: "Write ..." while
    there is no such file, else the explicit "Replace ..." (never both: writing over a file
    the user has takes an action that says so). `disabled_reason` as for `kernel_actions`."""
    if target_exists:
        title = f"Replace {target_name} with a new CUDA kernel for this module"
    else:
        title = WRITE_KERNEL_TITLE
    arguments = [{"uri": uri, "replace": target_exists}]
    return [
        types.CodeAction(
            title=title,
            kind=KIND,
            command=types.Command(title=title, command=INIT, arguments=arguments),
            disabled=types.CodeActionDisabled(reason=disabled_reason) if disabled_reason else None,
        )
    ]
