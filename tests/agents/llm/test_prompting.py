"""Prompt templates: every shipped template loads; rendering is strict and substitutes once."""

from __future__ import annotations

from importlib import resources

import pytest

from kernelblaster.agents.llm.prompting import (
    PromptError,
    describe_state,
    load_template,
    placeholders,
    render_messages,
)
from kernelblaster.harness.protocol.records import Finding, Headroom, PerfState

TEMPLATES = [
    "lowering",
    "lowering_retry",
    "json_retry",
    "soft_verify",
    "state_extractor",
    "perf_gap",
    "parameter_update",
]


def memory_state(findings: list[Finding] | None = None) -> PerfState:
    return PerfState(
        kernel="softmax_rowthread",
        arch="sm_90",
        bottleneck="memory",
        state="memory.dram",
        summary="memory-bound: DRAM 87% of peak, 4 of 32 bytes per sector used",
        findings=findings
        if findings is not None
        else [
            Finding(
                id="uncoalesced_global_access",
                evidence={"sectors_per_request": 32.0, "bytes_used_per_sector": 4.0},
                estimated_speedup=80.0,
                lines=[12, 13],
                message="loads of a warp touch 32 sectors",
            )
        ],
        headroom=Headroom(roof="dram_bandwidth", achieved_fraction=0.87),
        metrics={"dram__throughput.avg.pct_of_peak_sustained_elapsed": 87.0},
    )


def test_shipped_templates_are_package_data():
    shipped = {p.name for p in (resources.files("kernelblaster.agents.llm") / "prompts").iterdir()}
    assert {f"{name}.md" for name in TEMPLATES} <= shipped


@pytest.mark.parametrize("name", TEMPLATES)
def test_every_template_loads_and_ends_with_a_user_message(name):
    sections = load_template(name)
    assert sections[-1][0] == "user"
    assert placeholders(name)  # every agent prompt is filled with something


def test_values_are_substituted_verbatim_once():
    source = 'extern "C" void f(float* $x) { printf("${y} {z}"); }'
    messages = render_messages("lowering_retry", problem=f"Does not compile:\n{source}", earlier="")
    assert messages == [
        {
            "role": "user",
            "content": f"Does not compile:\n{source}\n\n"
            "Fix this and send the complete corrected file in one ```cuda block.",
        }
    ]


def test_missing_and_unused_values_are_errors():
    with pytest.raises(PromptError, match=r"no value for \$earlier"):
        render_messages("lowering_retry", problem="x")
    with pytest.raises(PromptError, match="values with no placeholder: typo"):
        render_messages("lowering_retry", problem="x", earlier="", typo="y")


def test_unknown_template():
    with pytest.raises(PromptError, match=r"agents/llm/prompts/nonexistent\.md"):
        load_template("nonexistent")


def test_state_description_is_compact_and_ordered():
    findings = [
        Finding(id=f"weak_{i}", estimated_speedup=float(i), message=f"weak finding {i}")
        for i in range(8)
    ] + [
        Finding(
            id="uncoalesced_global_access",
            estimated_speedup=80.0,
            lines=[12],
            evidence={"sectors_per_request": 32.0},
        )
    ]
    text = describe_state(memory_state(findings), max_findings=3)
    lines = text.splitlines()
    assert lines[0].startswith("State `memory.dram`: memory-bound: DRAM 87% of peak")
    assert lines[1] == "Headroom: 87% of the dram_bandwidth peak"
    assert lines[3].startswith("- uncoalesced_global_access (ncu estimates 80% of runtime saved)")
    assert "[lines 12]" in lines[3] and "sectors_per_request=32" in lines[3]
    assert lines[4].startswith("- weak_7") and lines[5].startswith("- weak_6")
    assert lines[-1] == "- ... 6 weaker findings left out"
    assert "dram__throughput" not in text  # raw metrics stay out of prompts
