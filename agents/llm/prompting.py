"""Prompt templates: one Markdown file per agent under agents/llm/prompts/, split into chat messages
at `<!-- role: ... -->` lines. Placeholders are `string.Template`'s, so JSON and CUDA braces need
no escaping. Rendering is strict both ways (a missing value or an unused one is an error), so a
renamed placeholder can't send an empty prompt."""

from __future__ import annotations

import functools
import re
from importlib import resources
from string import Template

from kernelblaster.harness.protocol.records import PerfState

ROLE_MARKER = re.compile(r"^<!-- role: (system|user|assistant) -->[ \t]*$", re.MULTILINE)


class PromptError(ValueError):
    """A template that is missing, malformed, or rendered with the wrong values."""


@functools.cache
def load_template(name: str) -> tuple[tuple[str, Template], ...]:
    """The (role, template) sections of agents/llm/prompts/<name>.md."""
    resource = resources.files("kernelblaster.agents.llm") / "prompts" / f"{name}.md"
    try:
        text = resource.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PromptError(
            f"no prompt template {name!r}: expected agents/llm/prompts/{name}.md in the package"
        ) from None
    parts = ROLE_MARKER.split(text)
    if parts[0].strip():
        raise PromptError(f"prompt {name}.md: text before the first <!-- role: ... --> marker")
    sections = tuple(
        (role, Template(body.strip("\n")))
        for role, body in zip(parts[1::2], parts[2::2], strict=True)
    )
    if not sections:
        raise PromptError(f"prompt {name}.md has no <!-- role: system|user --> sections")
    for role, template in sections:
        if not template.is_valid():
            raise PromptError(f"prompt {name}.md ({role}): a bare '$' (write '$$' for a dollar)")
    return sections


def placeholders(name: str) -> set[str]:
    return {ident for _, template in load_template(name) for ident in template.get_identifiers()}


def render_messages(name: str, **values: object) -> list[dict[str, str]]:
    """Chat messages from template `name`, every placeholder filled from `values`."""
    wanted = placeholders(name)
    problems = []
    if missing := sorted(wanted - values.keys()):
        problems.append("no value for $" + ", $".join(missing))
    if unused := sorted(values.keys() - wanted):
        problems.append("values with no placeholder: " + ", ".join(unused))
    if problems:
        raise PromptError(f"prompt {name}.md: " + "; ".join(problems))
    text_values = {key: str(value) for key, value in values.items()}
    return [
        {"role": role, "content": template.substitute(text_values)}
        for role, template in load_template(name)
    ]


def bullets(items: list[str], *, empty: str = "(none)") -> str:
    return "\n".join(f"- {item}" for item in items) if items else empty


def describe_state(state: PerfState, *, max_findings: int = 6, max_evidence: int = 4) -> str:
    """A compact account of a performance state for a prompt: the classification, the headroom
    and the strongest findings with a few supporting numbers, never a raw metrics dump."""
    lines = [f"State `{state.state}`: {state.summary}"]
    if state.headroom is not None:
        lines.append(
            f"Headroom: {state.headroom.achieved_fraction:.0%} of the {state.headroom.roof} "
            f"peak{' (near the limit)' if state.near_limit else ''}"
        )
    findings = sorted(state.findings, key=lambda f: -(f.estimated_speedup or 0.0))
    if findings:
        lines.append("Findings:")
    for finding in findings[:max_findings]:
        parts = [f"- {finding.id}"]
        if finding.message:
            parts.append(f": {finding.message}")
        if finding.estimated_speedup is not None:
            parts.append(f" (ncu estimates {finding.estimated_speedup:.0f}% of runtime saved)")
        if finding.lines:
            parts.append(f" [lines {', '.join(map(str, finding.lines[:5]))}]")
        evidence = list(finding.evidence.items())[:max_evidence]
        if evidence:
            parts.append(" {" + ", ".join(f"{k}={v:.3g}" for k, v in evidence) + "}")
        lines.append("".join(parts))
    if len(findings) > max_findings:
        lines.append(f"- ... {len(findings) - max_findings} weaker findings left out")
    return "\n".join(lines)
