"""Parsing LLM replies into one complete CUDA file, and the messages sent back when that fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelblaster.agents.llm.code_extract import ExtractError, extract_cuda_source, fenced_blocks

DATA = Path(__file__).resolve().parents[1] / "data"
NAIVE = (DATA.parents[2] / "examples" / "softmax.cu").read_text()  # the naive example
WARP = (DATA / "softmax_warp.cu").read_text()
ENTRY = ["softmax"]


def fence(code: str, lang: str = "cuda", marker: str = "```") -> str:
    return f"{marker}{lang}\n{code.rstrip()}\n{marker}\n"


def extract_error(reply: str, entry_names: list[str] = ENTRY) -> ExtractError:
    with pytest.raises(ExtractError) as caught:
        extract_cuda_source(reply, entry_names=entry_names)
    return caught.value


def test_single_block_with_prose_around_it():
    reply = f"Here is the coalesced version:\n\n{fence(WARP)}\nEach warp now owns a row."
    assert extract_cuda_source(reply, entry_names=ENTRY) == WARP


@pytest.mark.parametrize(("lang", "marker"), [("c++", "```"), ("", "```"), ("cu", "~~~~")])
def test_other_fences_and_info_strings(lang, marker):
    assert extract_cuda_source(fence(WARP, lang, marker), entry_names=ENTRY) == WARP


def test_no_code_block():
    error = extract_error("I would use one warp per row and shuffle reductions.")
    assert error.kind == "no_code"
    assert "```cuda" in error.message


def test_before_and_after_blocks_are_ambiguous():
    reply = f"Before:\n{fence(NAIVE)}\nAfter:\n{fence(WARP)}"
    error = extract_error(reply)
    assert error.kind == "ambiguous"
    assert "2 different code blocks" in error.message


def test_repeated_identical_block_is_fine():
    assert extract_cuda_source(fence(WARP) + "Again:\n" + fence(WARP), entry_names=ENTRY) == WARP


def test_helper_snippet_beside_the_full_file_is_ignored():
    snippet = "__device__ float warp_sum(float v);"
    reply = f"The key helper:\n{fence(snippet)}\nFull file:\n{fence(WARP)}"
    assert extract_cuda_source(reply, entry_names=ENTRY) == WARP


def test_file_split_over_fragments():
    kernel_part, launcher_part = WARP.split('extern "C"')
    reply = fence(kernel_part) + "\nand the launcher:\n" + fence('extern "C"' + launcher_part)
    error = extract_error(reply)
    assert error.kind == "ambiguous"
    assert "splits the code over 2 blocks" in error.message
    assert "`softmax`" in error.message


def test_renamed_entry_point():
    renamed = WARP.replace('extern "C" void softmax(', 'extern "C" void softmax_forward(')
    error = extract_error(fence(renamed))
    assert error.kind == "missing_entry"
    assert "does not define `softmax`" in error.message
    assert "keep the original name" in error.message


def test_entry_name_only_in_a_comment_does_not_count():
    renamed = WARP.replace('extern "C" void softmax(', '// was softmax(\nextern "C" void run(')
    assert extract_error(fence(renamed)).kind == "missing_entry"


def test_no_kernel_at_all():
    launcher_only = 'extern "C" void softmax(const float* x, float* y, int n) { }\n'
    error = extract_error(fence(launcher_only))
    assert error.kind == "missing_entry"
    assert "__global__" in error.message


def test_unclosed_fence_is_truncation():
    cut = "```cuda\n" + WARP[: len(WARP) // 2]
    error = extract_error("Here it is:\n" + cut)
    assert error.kind == "truncated"
    assert "cut off" in error.message


def test_unbalanced_braces_are_truncation():
    cut = WARP.rstrip().removesuffix("}")
    error = extract_error(fence(cut))
    assert error.kind == "truncated"
    assert "opens 4 '{' but closes 3 '}'" in error.message


def test_braces_and_names_in_strings_and_comments_do_not_count():
    tricky = WARP.replace(
        "    float inv = 1.0f / s;",
        "    // a stray { in a comment, and softmax_forward( too\n"
        '    if (s == 0.0f) printf("empty row {%d}\\n", row);\n'
        "    float inv = 1.0f / s;",
    )
    assert extract_cuda_source(fence(tricky), entry_names=ENTRY) == tricky


def test_diff_instead_of_file():
    diff = "--- a/softmax.cu\n+++ b/softmax.cu\n@@ -1 +1 @@\n-old\n+new\n"
    error = extract_error(fence(diff, "diff"))
    assert error.kind == "not_cuda"
    assert "not a patch" in error.message


def test_wrong_language():
    error = extract_error(fence("import torch\nprint(torch.softmax)", "python"))
    assert error.kind == "not_cuda"
    assert "python" in error.message


def test_several_entry_names_all_required():
    error = extract_error(fence(WARP), entry_names=["softmax", "softmax_backward"])
    assert error.kind == "missing_entry"
    assert "`softmax_backward`" in error.message and "`softmax`," not in error.message


def test_fenced_blocks_keeps_inner_shorter_fences():
    reply = "````markdown\n```cuda\nx\n```\n````\n"
    (block,) = fenced_blocks(reply)
    assert block.language == "markdown"
    assert block.text == "```cuda\nx\n```\n"
    assert block.closed
