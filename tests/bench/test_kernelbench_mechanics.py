"""The prepared mechanics run (bench/kernelbench_mechanics.py): its problems are KernelBench
files, its scripted answers follow the plain calling convention of each problem (checked
against the signature measured from the module, as the harness will call them), build with
nvcc, and the scripted endpoint gives each agent its answer. The run itself needs a GPU:
`python3 -m bench.kernelbench_mechanics`."""

from __future__ import annotations

import runpy
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bench import openai_server
from kernelblaster.agents.kernelbench.problems import discover
from kernelblaster.agents.llm.client import LlmClient, LlmConfig
from kernelblaster.agents.llm.code_extract import extract_cuda_source
from kernelblaster.agents.llm.prompting import render_messages
from kernelblaster.agents.loop.init_kernel import init_messages, plain_form_problem
from kernelblaster.harness.analysis.cuda_source import extern_c_functions, global_kernels
from kernelblaster.harness.build.nvcc import BuildSpec, build
from kernelblaster.harness.target.plain_launch import POINTER_DTYPES, SCALAR_CTYPES
from kernelblaster.harness.target.reference_signature import SignatureResponse, describe
from kernelblaster.settings import Settings

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "kernelbench_mechanics.py"
PROBLEMS = REPO / "bench" / "kernelbench"
ANSWERS = PROBLEMS / "answers"
LEVEL1 = discover([PROBLEMS / "level1"])
LEVEL2 = discover([PROBLEMS / "level2"])
ALL = LEVEL1 + LEVEL2
SIZE_NAMES = {"n", "numel", "size"}  # the first input's element count


def answer(problem, kind: str) -> str:
    return (ANSWERS / f"{problem.name}.{kind}.cu").read_text()


def test_at_least_five_level1_and_three_level2_problems_with_an_answer_each():
    assert len(LEVEL1) >= 5 and len(LEVEL2) >= 3
    assert all(p.start is None for p in ALL)  # every first kernel comes from init
    expected = {f"{p.name}.{kind}.cu" for p in ALL for kind in ("init", "fast")}
    assert {p.name for p in ANSWERS.glob("*.cu")} == expected


@pytest.mark.parametrize("problem", ALL, ids=lambda p: p.name)
def test_each_answer_follows_the_problems_calling_convention(problem):
    """What harness/target/candidate.py checks when it binds the launcher, against the signature
    measured from the module: pointer count, dtypes and const-ness in the harness's order,
    scalars it can fill by name. Both answers share the launcher, and the faster one keeps the
    name of the kernel the loop optimizes (the first one init's file defines)."""
    signature = describe(problem.path)
    assert signature.error is None and signature.unknown == []
    scalars = {s.name for s in signature.scalars} | SIZE_NAMES
    first, faster = answer(problem, "init"), answer(problem, "fast")
    for text in (first, faster):
        assert plain_form_problem(text) is None
        (launcher,) = extern_c_functions(text)
        pointers = [p for p in launcher.params if p.pointer]
        assert len(pointers) == len(signature.pointers)
        for param, slot in zip(pointers, signature.pointers, strict=True):
            assert str(POINTER_DTYPES[param.base_type]).removeprefix("torch.") == slot.dtype
            assert param.const == (slot.role != "output"), (param.name, slot.name)
        for param in launcher.params:
            if not param.pointer and param.base_type != "cudaStream_t":
                assert param.name in scalars and param.base_type in SCALAR_CTYPES
    launchers = [[(f.name, f.params) for f in extern_c_functions(t)] for t in (first, faster)]
    assert launchers[0] == launchers[1]
    optimized = global_kernels(first)[0].name
    assert optimized in {k.name for k in global_kernels(faster)}
    assert faster != first


@pytest.mark.nvcc
def test_every_answer_builds(tmp_path):
    settings = Settings(arch="sm_90", cache_dir=str(tmp_path))

    def built(path: Path):
        return path.name, build(BuildSpec(source=str(path), output_kind="shared"), settings)

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(built, sorted(ANSWERS.glob("*.cu"))))
    failed = [
        (name, [d.message for d in result.diagnostics if d.severity == "error"][:1])
        for name, result in results
        if not result.ok
    ]
    assert failed == []
    warnings = [(name, d.message) for name, r in results for d in r.diagnostics]
    assert warnings == []  # nothing a reader of the answers would have to wonder about


def test_the_scripted_endpoint_answers_every_agent_of_every_problem():
    scripted = runpy.run_path(str(SCRIPT), run_name="kernelbench_mechanics")
    respond = scripted["responder"](openai_server, ANSWERS)
    with openai_server.OpenAITestServer(responder=respond) as server:
        client = LlmClient(
            LlmConfig(base_url=server.base_url, model="test-model", timeout_s=10, max_retries=0)
        )
        for problem in ALL:
            task = init_messages(problem.path, SignatureResponse())
            text = client.chat(task, purpose="init").text
            assert extract_cuda_source(text, entry_names=[]) == answer(problem, "init")
            lowering = render_messages(
                "lowering", entry_names="", constraints="", kernel="k", arch="sm_90",
                state="", technique_id="t", technique_title="T", technique_description="",
                how_to_apply="", notes="", source=answer(problem, "init"),
            )  # fmt: skip
            text = client.chat(lowering, purpose="lowering").text
            assert extract_cuda_source(text, entry_names=[]) == answer(problem, "fast")
        verdict = render_messages(
            "soft_verify", constraints="", reference_source="", original_source="",
            candidate_source="",
        )  # fmt: skip
        assert '"ok": true' in client.chat(verdict, purpose="soft_verify").text
    usage = client.usage_by_purpose()
    assert usage["init"].estimated  # no usage sent: the client counts our prompts' characters
