"""`kernelblaster.init` ("Write a CUDA kernel for this module"): offered on the definitions of a
KernelBench-style reference `.py` and on nothing else; the agents worker writes and verifies
the kernel (the real one against the scripted OpenAI-compatible server, or a replay of its
result); the server writes `<stem>.cu` atomically, never over a file the user has without the
explicit "Replace" action, opens it, and says clearly why when it can't."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from lsprotocol import types

from bench.lsp_session import wait_until
from bench.openai_server import HttpError, reply
from kernelblaster.harness.protocol.init_protocol import InitResult
from kernelblaster.harness.protocol.records import VerifyResult
from kernelblaster.server.editor.documents import path_to_uri
from kernelblaster.server.editor.trust import UNTRUSTED_MESSAGE
from tests.conftest import REPO
from tests.server.conftest import (
    alive,
    by_code,
    open_document,
    softmax_response,
    softmax_source,
    start,
    wait_for_states,
)

RELU_KERNEL = (REPO / "examples" / "relu.cu").read_text()
BROKEN_KERNEL = RELU_KERNEL.replace("float v = x[i];", "float v = x[i]")  # a missing ';'
SOFTMAX_KERNEL = softmax_source() + (
    '\nextern "C" void softmax(const float* x, float* y, int batch_size, int dim,\n'
    "                        cudaStream_t stream) {\n"
    "    softmax_rowthread<<<(batch_size + 127) / 128, 128, 0, stream>>>(x, y, batch_size, "
    "dim);\n}\n"
)
IMPORT_LINE = 2  # `import torch`, in examples/relu.py and examples/softmax.py
WRITE = "Write a CUDA kernel for this module"


def cuda_reply(code: str) -> str:
    return f"Here is the kernel.\n```cuda\n{code}```\n"


def model_line(path: Path) -> int:
    """The 0-based line of `class Model` in `path`."""
    return next(i for i, line in enumerate(path.read_text().splitlines()) if "class Model" in line)


def copy_example(workspace, name: str) -> Path:
    path = workspace.root / name
    shutil.copyfile(REPO / "examples" / name, path)
    return path


async def start_with_real_workers(client, workspace, openai_server, tmp_path, **settings):
    """The real harness and agents workers, the scripted endpoint, a scratch cache."""
    await start(
        client,
        workspace,
        workerCommand=None,
        optimizeWorkerCommand=None,
        llmBaseUrl=openai_server.base_url,
        llmModel="test-model",
        cacheDir=str(tmp_path / "cache"),
        **settings,
    )


async def actions_at(client, uri: str, line: int) -> list[types.CodeAction]:
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(types.Position(line, 4), types.Position(line, 4)),
            context=types.CodeActionContext(diagnostics=[]),
        )
    )
    return list(actions or [])


def run_init(client, uri: str, *, replace: bool = False):
    return client.workspace_execute_command_async(
        types.ExecuteCommandParams(
            command="kernelblaster.init", arguments=[{"uri": uri, "replace": replace}]
        )
    )


def run_action(client, action: types.CodeAction):
    return client.workspace_execute_command_async(
        types.ExecuteCommandParams(
            command=action.command.command, arguments=action.command.arguments
        )
    )


def record_verified(workspace, reference: Path) -> None:
    """The agents worker's answer for softmax.py: the kernel, verified and timed (the H200's
    measured medians of softmax_rowthread against PyTorch), after one rejected reply."""
    target = reference.with_suffix(".cu")
    check = softmax_response(target).check
    assert check is not None
    check.verify = VerifyResult(
        ok=True, trials=3, seeds=[1, 2, 3], atol=1e-4, rtol=1e-4, message="matches"
    )
    workspace.record(
        "init",
        InitResult(
            reference=str(reference),
            target=str(target),
            source=SOFTMAX_KERNEL,
            check=check,
            attempts=2,
            prompt_tokens=2400,
            completion_tokens=700,
            failures=["compile_error: line 9: identifier INFINITY is undefined"],
        ),
    )
    workspace.record("harness", softmax_response(target))


def init_runs(workspace) -> list[dict]:
    return [r for r in workspace.runs() if r["event"] == "start" and r.get("type") == "init"]


def progress_messages(client) -> list[str]:
    return [
        r.message or ""
        for reports in client.progress_reports.values()
        for r in reports
        if r.kind == "report"
    ]


@pytest.mark.nvcc
async def test_the_action_on_a_module_builds_the_reply_and_needs_a_gpu_to_verify_it(
    client, workspace, openai_server, tmp_path
):
    """The real agents and harness workers against the scripted endpoint, on this GPU-less
    machine, as `kernelblaster init` runs there: a reply that does not compile goes back to
    the model with nvcc's error, the next builds, and verification then stops at the missing
    GPU — the environment's fault, said as such — and nothing is written."""
    reference = copy_example(workspace, "relu.py")
    unrelated = workspace.add("helpers.py", "def model_name():\n    return 'relu'\n")
    openai_server.push(reply(cuda_reply(BROKEN_KERNEL)), reply(cuda_reply(RELU_KERNEL)))
    await start_with_real_workers(client, workspace, openai_server, tmp_path)
    uri = open_document(client, reference)
    helpers_uri = open_document(client, unrelated)

    (action,) = await actions_at(client, uri, model_line(reference))
    assert action.title == WRITE and action.disabled is None
    assert list(action.command.arguments or []) == [{"uri": uri, "replace": False}]
    assert await actions_at(client, uri, IMPORT_LINE) == []  # only on the module's definitions
    assert await actions_at(client, helpers_uri, 0) == []
    assert client.diagnostics.get(uri, []) == []  # a .py is never diagnosed

    answer = await run_action(client, action)

    assert answer["written"] is False and answer["path"] is None
    assert answer["message"].startswith("No relu.cu written: ")
    assert "CPU-only" in answer["message"]  # this machine's torch: verification needs a GPU
    assert answer["message"].endswith("(2 replies, 200 prompt + 100 completion tokens)")
    assert client.messages[-1].type == types.MessageType.Error
    assert client.messages[-1].message == answer["message"]
    first, second = openai_server.chat_requests
    assert "Problem file: `relu.py`" in first.prompt_text
    assert second.messages[-1]["content"].startswith("Your file does not compile:")
    assert not reference.with_suffix(".cu").exists()
    assert not list((tmp_path / "cache" / "init").iterdir())  # the scratch pair is gone
    messages = progress_messages(client)
    assert "relu.py: asking test-model for reply 1" in messages
    assert "relu.py: building and verifying reply 2" in messages
    assert any(m.startswith("relu.py: reply 1 rejected: compile_error: line") for m in messages)
    assert any(m.message.startswith("relu.cu: compile_error: line") for m in client.log_messages)

    # The editor's process loaded neither torch nor the LLM side: the worker did the work.
    await client.shutdown_session()
    client.capabilities = None
    loaded = json.loads((tmp_path / "server-modules.json").read_text())
    assert [n for n in loaded if n == "torch" or n.startswith("kernelblaster.agents")] == []


async def test_replies_that_are_not_cuda_and_a_refusing_endpoint_are_said_clearly(
    client, workspace, openai_server, tmp_path
):
    reference = copy_example(workspace, "relu.py")
    openai_server.push(reply("I would use one thread per element."), reply("Sure! Done."))
    await start_with_real_workers(client, workspace, openai_server, tmp_path, initAttempts=2)
    uri = open_document(client, reference)

    answer = await run_init(client, uri)

    assert answer["written"] is False
    assert answer["message"].startswith(
        "No relu.cu written: no verified kernel after 2 replies; the last was rejected because:"
    )
    assert "code block" in answer["message"]
    assert len(openai_server.chat_requests) == 2

    openai_server.push(HttpError(401, "Incorrect API key provided"))
    answer = await run_init(client, uri)
    assert answer["message"].startswith("No relu.cu written: LLM: ")
    assert "OPENAI_API_KEY" in answer["message"]  # the variable to set, never a key
    assert answer["message"].endswith("(0 replies, 0 prompt + 0 completion tokens)")
    assert not reference.with_suffix(".cu").exists()


async def test_the_verified_kernel_is_written_beside_the_module_and_opened(client, workspace):
    reference = copy_example(workspace, "softmax.py")
    record_verified(workspace, reference)
    await start(client, workspace)
    uri = open_document(client, reference)
    (action,) = await actions_at(client, uri, model_line(reference))

    answer = await run_action(client, action)

    target = reference.with_suffix(".cu")
    assert answer == {
        "written": True,
        "path": str(target),
        "message": "Wrote softmax.cu: verified on 3 fresh input sets; 0.481 ms per call "
        "(median of 50 runs), 0.10× vs eager (2 replies, 2400 prompt + 700 completion tokens).",
    }
    assert target.read_text() == SOFTMAX_KERNEL
    assert [p.name for p in workspace.root.iterdir() if p.name.startswith(".softmax")] == []
    (run,) = init_runs(workspace)
    assert run["reference"] == str(reference)
    assert client.messages[-1].type == types.MessageType.Info
    assert [d.uri for d in client.shown_documents] == [path_to_uri(target)]
    assert "softmax.py: reply 1 (replay)" in progress_messages(client)
    statuses = [(s.uri, s.phase, s.running) for s in client.job_status]
    assert statuses[0] == (uri, "init", True) and statuses[-1] == (uri, "done", False)
    # the editor opens what the server showed: the save pipeline profiles it
    target_uri = open_document(client, target)
    (state,) = by_code(await wait_for_states(client, target_uri), "state")
    assert state.message.startswith("softmax_rowthread")


async def test_an_existing_kernel_is_replaced_only_by_the_explicit_action(client, workspace):
    reference = copy_example(workspace, "softmax.py")
    target = workspace.add("softmax.cu", "// my own softmax\n")
    record_verified(workspace, reference)
    await start(client, workspace)
    uri = open_document(client, reference)

    (action,) = await actions_at(client, uri, model_line(reference))
    assert action.title == "Replace softmax.cu with a new CUDA kernel for this module"
    assert list(action.command.arguments or []) == [{"uri": uri, "replace": True}]

    refused = await run_init(client, uri)  # the plain action's arguments, sent anyway
    assert refused["written"] is False
    assert refused["message"].startswith("softmax.cu exists and is never replaced without asking")
    assert client.messages[-1].type == types.MessageType.Warning
    assert target.read_text() == "// my own softmax\n"
    assert init_runs(workspace) == []  # refused before a token was spent

    replaced = await run_action(client, action)
    assert replaced["written"] is True
    assert target.read_text() == SOFTMAX_KERNEL


@pytest.mark.parametrize("exists", [False, True], ids=["appears", "changes"])
async def test_a_kernel_file_touched_meanwhile_is_kept_and_the_new_one_set_aside(
    client, workspace, exists
):
    reference = copy_example(workspace, "softmax.py")
    target = reference.with_suffix(".cu")
    if exists:
        target.write_text("// before\n")
    record_verified(workspace, reference)
    workspace.control_file("delay_once", "3")
    await start(client, workspace)
    uri = open_document(client, reference)

    running = asyncio.ensure_future(run_init(client, uri, replace=exists))
    await wait_until(lambda: init_runs(workspace))
    target.write_text("// the user's, written meanwhile\n")
    answer = await running

    kept = workspace.root / ".kernelblaster" / "init" / "softmax.cu"
    what = "changed" if exists else "appeared"
    assert answer == {
        "written": False,
        "path": str(kept),
        "message": f"softmax.cu {what} while the kernel was being written, so it was not "
        f"replaced; the verified kernel is in {kept}.",
    }
    assert target.read_text() == "// the user's, written meanwhile\n"
    assert kept.read_text() == SOFTMAX_KERNEL
    assert client.shown_documents == []


@pytest.mark.parametrize(
    ("trusted", "endpoint", "reason"),
    [
        (False, "http://127.0.0.1:9/v1", UNTRUSTED_MESSAGE),
        (True, None, "Writing a kernel needs an LLM endpoint: set kernelblaster.llmBaseUrl"),
    ],
    ids=["untrusted", "no-endpoint"],
)
async def test_without_trust_or_an_endpoint_the_action_says_why(
    client, workspace, trusted, endpoint, reason
):
    reference = copy_example(workspace, "softmax.py")
    await start(client, workspace, trusted=trusted, llmBaseUrl=endpoint)
    uri = open_document(client, reference)

    (action,) = await actions_at(client, uri, model_line(reference))
    assert action.title == WRITE
    assert action.disabled is not None and action.disabled.reason.startswith(reason)
    answer = await run_init(client, uri)
    assert answer == {"written": False, "message": action.disabled.reason, "path": None}
    assert client.messages[-1].message == answer["message"]
    assert init_runs(workspace) == []


async def test_what_is_not_a_reference_or_not_saved_is_refused_with_what_to_fix(client, workspace):
    reference = copy_example(workspace, "softmax.py")
    text = reference.read_text()
    partial = workspace.add("partial.py", text.replace("def get_inputs", "def make_inputs"))
    solution = workspace.add("solution.py", text.replace("class Model(", "class ModelNew("))
    unrelated = workspace.add("helpers.py", "def model_name():\n    return 'softmax'\n")
    target = workspace.add("softmax.cu", "// mine\n")
    workspace.record("harness", softmax_response(target))
    await start(client, workspace)

    partial_uri = open_document(client, partial)
    (action,) = await actions_at(client, partial_uri, model_line(partial))
    lacks = (
        "partial.py is not a KernelBench-style reference: it lacks get_inputs(). A reference "
        "defines class Model(nn.Module) with forward(), get_inputs() returning the forward "
        "inputs, and get_init_inputs() returning Model's constructor arguments (KernelBench "
        "format)."
    )
    assert action.disabled.reason == lacks
    assert (await run_init(client, partial_uri))["message"] == lacks

    solution_uri = open_document(client, solution)
    assert await actions_at(client, solution_uri, model_line(solution)) == []
    assert (await run_init(client, solution_uri))["message"].startswith(
        "solution.py is a KernelBench solution (class ModelNew), not a problem"
    )
    assert (await run_init(client, path_to_uri(unrelated)))["message"].startswith(
        "helpers.py is not a KernelBench-style reference: it lacks class Model, get_inputs(), "
        "get_init_inputs()."
    )
    assert (await run_init(client, path_to_uri(target)))["message"].endswith(
        "softmax.cu is not a Python file on disk."
    )

    uri = open_document(client, reference)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text + "\n# x\n")],
        )
    )
    assert (await run_init(client, uri, replace=True))["message"] == (
        "softmax.py has unsaved changes: save it first (the kernel is written for the file on "
        "disk)."
    )
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=3),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )
    target_uri = open_document(client, target)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=target_uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text="// typing\n")],
        )
    )
    assert (await run_init(client, uri, replace=True))["message"] == (
        "softmax.cu has unsaved changes in the editor: save or close it first."
    )
    assert init_runs(workspace) == []
    assert target.read_text() == "// mine\n"


async def test_cancelling_the_progress_token_kills_the_agents_worker(client, workspace):
    reference = copy_example(workspace, "softmax.py")
    record_verified(workspace, reference)
    workspace.control_file("delay_once", "60")
    await start(client, workspace)
    uri = open_document(client, reference)

    running = asyncio.ensure_future(run_init(client, uri))
    (run,) = await wait_until(lambda: init_runs(workspace))
    again = await run_init(client, uri)
    assert again["message"] == "A kernel for softmax.py is already being written."
    (token,) = await wait_until(lambda: list(client.progress_reports))
    client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))
    answer = await asyncio.wait_for(running, timeout=10)

    assert answer == {
        "written": False,
        "message": "Writing softmax.cu was cancelled.",
        "path": None,
    }
    assert client.progress_reports[token][-1].kind == "end"
    await wait_until(lambda: not alive(run["pid"]))
    assert not reference.with_suffix(".cu").exists()


@pytest.mark.gpu
async def test_on_a_gpu_the_verified_kernel_is_written_opened_and_profiled(
    client, workspace, openai_server, tmp_path
):
    """The whole path on a GPU, with the real workers and the scripted endpoint: a wrong first
    reply goes back with the harness's mismatch, the second is verified, written and shown; the
    editor opens it and the save pipeline profiles it."""
    reference = workspace.root / "19_ReLU.py"
    shutil.copyfile(REPO / "bench" / "kernelbench" / "level1" / "19_ReLU.py", reference)
    right = (REPO / "bench" / "kernelbench" / "answers" / "19_ReLU.init.cu").read_text()
    wrong = right.replace("v > 0.0f ? v : 0.0f", "v > 0.5f ? v : 0.0f")
    openai_server.push(reply(cuda_reply(wrong)), reply(cuda_reply(right)))
    await start_with_real_workers(client, workspace, openai_server, tmp_path)
    uri = open_document(client, reference)
    (action,) = await actions_at(client, uri, model_line(reference))

    answer = await run_action(client, action)

    target = reference.with_suffix(".cu")
    assert answer["written"] is True, answer["message"]
    assert answer["message"].startswith("Wrote 19_ReLU.cu: verified on ")
    assert answer["message"].endswith("(2 replies, 200 prompt + 100 completion tokens).")
    feedback = openai_server.chat_requests[1].messages[-1]["content"]
    assert "computes a different result than the reference" in feedback
    assert target.read_text() == right
    assert [d.uri for d in client.shown_documents] == [path_to_uri(target)]
    target_uri = open_document(client, target)
    await wait_until(
        lambda: (
            by_code(client.diagnostics.get(target_uri, []), "state")
            or by_code(client.diagnostics.get(target_uri, []), "setup")
        ),
        timeout=600,
    )
    (state,) = by_code(client.diagnostics[target_uri], "state")
    assert state.message.startswith("relu_kernel")
