"""Pure parts of the editor's side: settings conversion, initialization options, kernel
location."""

from __future__ import annotations

from lsprotocol import types

from kernelblaster.server.editor.configuration import (
    apply_client_settings,
    parse_init_options,
    snake_case,
)
from kernelblaster.server.editor.kernel_locator import enclosing, locate
from kernelblaster.settings import Settings


def test_camel_case_keys_map_to_settings_fields_and_bad_values_are_skipped_alone():
    assert snake_case("llmBaseUrl") == "llm_base_url"
    assert snake_case("topK") == "top_k"
    assert snake_case("gpuIndex") == "gpu_index"
    settings, problems = apply_client_settings(
        Settings(), {"llmBaseUrl": "http://h/v1", "topK": "three", "nope": 1, "kbPath": None}
    )
    assert settings.llm_base_url == "http://h/v1"
    assert settings.top_k == Settings().top_k
    assert problems[0] == "unknown setting kernelblaster.nope (ignored)"
    assert problems[1].startswith("kernelblaster.topK = 'three' ignored:")
    assert apply_client_settings(Settings(), ["not", "a", "dict"])[1] == [
        "setting section 'kernelblaster' must be an object, got list"
    ]


def test_init_options_are_validated():
    options, problem = parse_init_options({"trusted": "yes"})
    assert options.trusted is None and problem.startswith("initializationOptions ignored")
    options, problem = parse_init_options({"trusted": True, "settings": {"topK": 2}})
    assert options.trusted is True and options.settings == {"topK": 2} and problem is None


def test_kernels_are_located_in_characters_even_after_non_ascii_text():
    text = (
        "// naïve — ünïcode\n"
        "template <int N>\n"
        "/* é */ __global__ void __launch_bounds__(256) add(float* x) { x[0] += N; }\n"
        "void host() {}\n"
        "__global__ void\nbroken(int* y) {\n  y[0] = ;\n}\n"
    )
    spans = locate(text)
    assert [s.name for s in spans] == ["add", "broken"]
    add = spans[0]
    line = text.splitlines()[2]
    assert add.name_range.start == types.Position(2, line.index("add("))
    assert enclosing(spans, 3) is None
    assert enclosing(spans, 6).name == "broken"  # a body that doesn't compile: still found
