"""The kernel code lens, the profile view's data and the kept Nsight Compute report, through the
real language server with the replay worker answering with real ncu reports (the H100 five.cu
report, whose path the response names, so the server keeps a copy)."""

from __future__ import annotations

import asyncio

import msgspec
from lsprotocol import types
from pytest_lsp import client_capabilities

from bench.lsp_session import FIVE, copy_five, wait_until
from kernelblaster.server.editor.documents import path_to_uri, text_hash
from kernelblaster.server.results import kept_reports
from kernelblaster.server.results.cache import ResultCache, new_result
from kernelblaster.server.results.history import SaveHistory
from tests.server.conftest import (
    initialize,
    open_document,
    softmax_response,
    softmax_source,
    start,
)
from tests.server.results.test_history import timed_softmax


async def _lenses(client, uri: str) -> list[types.CodeLens]:
    return await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )


async def _resolved(client, uri: str) -> list[types.CodeLens]:
    return [await client.code_lens_resolve_async(lens) for lens in await _lenses(client, uri)]


async def _profiled_five(client, workspace, **settings) -> tuple[str, object]:
    source = copy_five(workspace)
    response = msgspec.json.decode((workspace.control / "harness.json").read_bytes())
    # A timed, verified run (the five.cu fixture is a program: timing from its report's kernels).
    check = timed_softmax(source, 0.5).check
    check.gpu = response["profile"]["device"]
    response["check"] = msgspec.to_builtins(check)
    (workspace.control / "harness.json").write_bytes(msgspec.json.encode(response))
    await start(client, workspace, **settings)
    uri = open_document(client, source)
    await wait_until(lambda: client.job_status and not client.job_status[-1].running)
    return uri, source


async def test_each_kernel_gets_a_summary_and_its_actions_resolved_lazily(client, workspace):
    uri, source = await _profiled_five(client, workspace)
    lenses = await _lenses(client, uri)
    assert all(lens.command is None for lens in lenses)  # titles only once resolved
    resolved = await _resolved(client, uri)
    by_kernel: dict[int, list[types.Command]] = {}
    for lens in resolved:
        by_kernel.setdefault(lens.range.start.line, []).append(lens.command)
    assert len(by_kernel) == 7 and all(len(c) == 2 for c in by_kernel.values())  # 7 kernels
    summary, optimize = by_kernel[9]  # transpose_naive
    # ncu's time of transpose_naive (288 µs; the time per call is the whole program's, of 7
    # kernels), its state, headroom to the roof that limits it: L2, not DRAM (13%). Short: the
    # line fits an editor split beside the profile view.
    assert summary.title == "ncu 0.288 ms · memory-bound · L2 87% of peak", summary
    # the tooltip says what each figure is (the check is the softmax fixture's: 0.10× eager)
    tooltip = summary.tooltip.splitlines()
    assert tooltip[0] == (
        "verified on 3 fresh input sets; 0.5 ms per call (median of 50 runs), 0.10× vs eager"
    )
    assert tooltip[1] == "ncu kernel duration 0.288 ms (one profiled launch)"
    assert "4 of 32 bytes per sector" in tooltip[2]  # the whole state line
    assert tooltip[3].startswith("Headroom: L2 runs at 87% of its peak throughput")
    # pytest-lsp's client declares no client commands: the summary opens the server's profile,
    # which answers in a message
    assert summary.command == "kernelblaster.kernelProfile" and summary.arguments[0]["show"]
    assert optimize.title == "Optimize" and optimize.command == "kernelblaster.optimize"
    assert optimize.arguments[0]["kernel"] == "transpose_naive"

    ncu = types.Command(
        title="", command="kernelblaster.ncuReport", arguments=[{**summary.arguments[0]}]
    )
    answer = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=ncu.command, arguments=ncu.arguments)
    )
    kept = SaveHistory(ResultCache()).reports_dir(source)
    assert answer["path"].startswith(str(kept)) and answer["path"].endswith(".ncu-rep")
    assert (kept / answer["path"].rsplit("/", 1)[1]).read_bytes() == (
        FIVE / "five.ncu-rep"
    ).read_bytes()
    message = await wait_until(
        lambda: [m for m in client.messages if "ncu-ui " + answer["path"] in m.message]
    )
    assert "developer.nvidia.com/nsight-compute" in message[0].message


async def test_the_profile_view_places_the_kernel_under_the_measured_roofs(client, workspace):
    uri, _ = await _profiled_five(client, workspace)
    view = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(
            command="kernelblaster.kernelProfile", arguments=[{"uri": uri, "kernel": "divergent"}]
        )
    )
    assert view["profiled"] and view["current"] and view["device"] == "NVIDIA H100 80GB HBM3"
    # compute-bound: its headroom is to the FP32 peak, as the lens and hover say
    assert view["limit"].startswith("Headroom: the kernel reaches 68% of the FP32 peak")
    roofs, point = view["roofs"], view["point"]
    assert roofs["source"] == "measured"
    # H100 SXM: 1280 B/cycle × 2.618 GHz DRAM, 33792 FLOP/cycle × 1.976 GHz SM
    assert abs(roofs["dram_bytes_per_s"] / 1e12 - 3.35) < 0.01
    assert abs(roofs["fp32_flops_per_s"] / 1e12 - 66.8) < 0.1
    assert abs(point["flops_per_s"] / 1e12 - 21.57) < 0.01
    assert abs(point["dram_bytes_per_s"] / 1e9 - 1188.0) < 1
    assert view["history"][-1]["current"] and view["history"][-1]["flops_per_s"] > 0
    # ncu blames lines of five.cu in divergent (the report was built with -lineinfo)
    assert view["blamed"] and all(b["text"] for b in view["blamed"])
    assert view["report"] and view["report"].endswith(".ncu-rep")


async def test_a_tensor_core_kernel_is_placed_with_its_mma_flops_under_its_tensor_roof(
    client, workspace
):
    uri, _ = await _profiled_five(client, workspace)
    view = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(
            command="kernelblaster.kernelProfile",
            arguments=[{"uri": uri, "kernel": "wmma_gemm", "show": True}],
        )
    )
    roofs, point = view["roofs"], view["point"]
    # 15218 fp16 MMA FLOP/cycle at 1.80 GHz; the dense fp16 roof: 540672 FLOP/cycle
    assert abs(point["tensor_flops_per_s"] / 1e12 - 27.41) < 0.01
    assert point["flops_per_s"] == point["tensor_flops_per_s"]
    assert [(r["path"], round(r["flops_per_s"] / 1e12)) for r in roofs["tensor"]] == [("FP16", 974)]
    assert view["history"][-1]["flops_per_s"] == point["flops_per_s"]
    message = await wait_until(lambda: [m for m in client.messages if "wmma_gemm on" in m.message])
    assert "27.4 TFLOP/s (27.4 on the tensor cores)" in message[0].message
    assert "974 TFLOP/s FP16 tensor, 60.9 TFLOP/s FP32" in message[0].message  # at 1.80 GHz


async def test_the_profile_view_has_the_hierarchical_roofline_of_an_uncoalesced_kernel(
    client, workspace
):
    """five.cu's transpose_naive (uncoalesced stores) on the H100: L1, L2 and DRAM roofs and
    traffic from the report's hierarchical roofline counts, in the view, its history and its
    one-line message."""
    uri, _ = await _profiled_five(client, workspace)
    view = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(
            command="kernelblaster.kernelProfile",
            arguments=[{"uri": uri, "kernel": "transpose_naive", "show": True}],
        )
    )
    roofs, point = view["roofs"], view["point"]
    # 16896 B/cycle × 1.979 GHz L1, 5120 B/cycle × 1.708 GHz L2, 1280 B/cycle × 2.618 GHz DRAM
    assert [round(roofs[f"{level}_bytes_per_s"] / 1e12, 2) for level in ("l1", "l2", "dram")] == [
        33.44,
        8.74,
        3.35,
    ]
    assert [round(point[f"{level}_bytes_per_s"] / 1e9) for level in ("l1", "l2", "dram")] == [
        699,
        236,
        427,
    ]
    assert view["history"][-1]["l1_bytes_per_s"] == point["l1_bytes_per_s"]
    message = await wait_until(
        lambda: [m for m in client.messages if "transpose_naive on" in m.message]
    )
    assert "moving 699 GB/s L1, 236 GB/s L2, 427 GB/s DRAM" in message[0].message
    assert "33.4 TB/s L1, 8.74 TB/s L2, 3.35 TB/s DRAM, measured" in message[0].message


async def test_lenses_are_off_by_the_setting(client, workspace):
    uri, _ = await _profiled_five(client, workspace, codeLens=False)
    assert not await _lenses(client, uri)


async def test_a_client_with_its_own_commands_gets_them_in_the_lenses(client, workspace):
    source = workspace.add("softmax.cu", softmax_source())
    client.set_configuration({"kernelblaster": workspace.settings()})
    await initialize(
        client,
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=path_to_uri(workspace.root),
            initialization_options={
                "trusted": False,
                "clientCommands": [
                    "kernelblaster.showProfile",
                    "kernelblaster.openInNsightCompute",
                ],
            },
        ),
    )
    uri = open_document(client, source)
    summary, optimize = [lens.command for lens in await _resolved(client, uri)]
    assert optimize.command == "kernelblaster.optimize"  # the server's, as in every client
    # not profiled yet: a label, not a link
    assert summary.title.startswith("not profiled yet") and summary.command == ""

    # profiled (its result saved beside it, shown untrusted too): the summary opens the
    # client's own profile view
    ResultCache().save(new_result(source, text_hash(source.read_text()), softmax_response(source)))
    client.text_document_did_close(
        types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    uri = open_document(client, source)
    for _ in range(100):  # the result loads after the open (a lens refresh follows it)
        summary, _ = [lens.command for lens in await _resolved(client, uri)]
        if summary.command:
            break
        await asyncio.sleep(0.05)
    assert summary.title.startswith("0.481 ms/call · memory-bound · L1 "), summary.title
    assert summary.command == "kernelblaster.showProfile"
    assert list(summary.arguments) == [{"uri": uri, "kernel": "softmax_rowthread"}]
    assert summary.tooltip.endswith("Click for the profile view.")


def test_kept_reports_stay_within_their_count_and_size(tmp_path, monkeypatch):
    report = tmp_path / "r.ncu-rep"
    folder = tmp_path / "kept"
    kept = []
    for n in range(kept_reports.KEEP + 2):
        report.write_bytes(bytes([n]) * 1000)
        path = kept_reports.keep(report, folder, f"{n:012d}")
        assert path is not None
        kept.append(path)
    left = sorted(p.name for p in folder.glob("*.ncu-rep"))
    assert len(left) == kept_reports.KEEP
    assert sorted(p.rsplit("/", 1)[1] for p in kept[-kept_reports.KEEP :]) == left
    assert kept_reports.is_kept(folder / left[0], folder)
    assert not kept_reports.is_kept(report, folder)

    # Over the size cap, the oldest go first; the newest stays even alone over it.
    monkeypatch.setattr(kept_reports, "REPORTS_CAP_BYTES", 2500)
    kept_reports.prune(folder)
    assert sorted(p.name for p in folder.glob("*.ncu-rep")) == left[-2:]
    monkeypatch.setattr(kept_reports, "REPORTS_CAP_BYTES", 10)
    kept_reports.prune(folder)
    assert sorted(p.name for p in folder.glob("*.ncu-rep")) == left[-1:]
