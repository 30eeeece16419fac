"""reference_source: a Python file read as a KernelBench reference from its text alone — the
lines its definitions span (where the editor offers "Write a CUDA kernel"), what it lacks, and
solutions told apart from problems — on the upstream format and on files that only look like
it."""

from __future__ import annotations

from kernelblaster.harness.analysis.reference_source import Definition, describe_missing, outline
from tests.conftest import REPO

PROBLEM = (REPO / "bench" / "kernelbench" / "level1" / "19_ReLU.py").read_text()


def test_a_problem_file_has_its_three_definitions_with_their_spans():
    found = outline(PROBLEM)
    assert found is not None and found.is_problem and found.missing == []
    lines = PROBLEM.splitlines()
    spans = {d.name: (lines[d.first_line], lines[d.last_line]) for d in found.definitions}
    assert spans["Model"][0].startswith("class Model(")
    assert spans["get_inputs"][0].startswith("def get_inputs(")
    assert spans["get_init_inputs"][0].startswith("def get_init_inputs(")
    model = next(d for d in found.definitions if d.name == "Model")
    assert found.at(model.first_line) == model and found.at(model.last_line) == model
    assert found.at(0) is None  # the module docstring


def test_decorators_belong_to_the_definition_and_nested_ones_do_not_count():
    text = (
        "import functools\n"
        "@functools.lru_cache\n"
        "def get_inputs():\n"
        "    return []\n"
        "class Holder:\n"
        "    class Model:\n"
        "        pass\n"
        "    def get_init_inputs(self):\n"
        "        return []\n"
    )
    found = outline(text)
    assert found is not None
    assert found.definitions == [Definition("get_inputs", 1, 3)]
    assert found.missing == ["Model", "get_init_inputs"]
    assert describe_missing("x.py", found.missing).startswith(
        "x.py is not a KernelBench-style reference: it lacks class Model, get_init_inputs(). "
        "A reference defines class Model(nn.Module)"
    )


def test_a_solution_is_not_a_problem():
    solution = PROBLEM.replace("class Model(", "class ModelNew(")
    found = outline(solution)
    assert found is not None and found.solution and not found.is_problem
    assert found.missing == ["Model"]
    both = PROBLEM + "\n\nclass ModelNew(Model):\n    pass\n"
    assert not outline(both).is_problem  # type: ignore[union-attr]


def test_other_python_files_and_broken_ones_are_not_references():
    assert outline("import torch\n\nclass Trainer:\n    model = None\n") is None
    assert outline("def model():\n    return 'Model'  # class Model mentioned\n") is None
    assert outline("class Model(:\n    pass\ndef get_inputs(): return []\n") is None
    assert outline("def get_inputs():\n    return [\x00]\n") is None
    # definitions of the wrong kind (a function named Model, a class named get_inputs), and
    # `class Model` only inside a string
    text = 'def Model():\n    pass\nclass get_inputs:\n    pass\nDOC = """\nclass Model\n"""\n'
    assert outline(text) is None


def test_the_batch_size_is_read_and_rewritten_where_it_is_one_integer_literal():
    from kernelblaster.harness.analysis.reference_source import batch_size_of, with_batch_size

    text = (REPO / "bench/kernelbench/level2/12_Gemm_Multiply_LeakyReLU.py").read_text()
    assert batch_size_of(text) == 512
    copy = with_batch_size(text, 32)
    assert copy is not None and batch_size_of(copy) == 32
    assert copy.replace("batch_size = 32", "batch_size = 512") == text  # nothing else changed
    # columns are characters: a non-ASCII string before the literal on its line
    assert (
        with_batch_size('label = "µs"; batch_size = 4096\n', 40)
        == 'label = "µs"; batch_size = 40\n'
    )


def test_a_batch_size_that_is_not_one_plain_integer_is_left_alone():
    from kernelblaster.harness.analysis.reference_source import batch_size_of, with_batch_size

    for text in [
        "x = 1\n",  # none
        "batch_size = 16\nbatch_size = 32\n",  # twice
        "batch_size = 16\nbatch_size *= 2\n",  # changed after
        "batch_size = 4 * 64\n",  # an expression
        "batch_size: int = 64\n",  # annotated: left to the author
        "batch_size = 64.0\n",
        "batch_size = True\n",
        "def f(:\n",  # broken
    ]:
        assert batch_size_of(text) is None, text
        assert with_batch_size(text, 8) is None
