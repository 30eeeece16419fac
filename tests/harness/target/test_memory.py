"""How much memory a problem's inputs take, measured without allocating them, and running out
of memory reported as such (CPU)."""

from pathlib import Path

import torch

from kernelblaster.harness.protocol.cuda_errors import error_from_exception
from kernelblaster.harness.target.memory import input_bytes, verification_room
from kernelblaster.harness.target.reference import load_reference

TARGETS = Path(__file__).resolve().parents[2] / "fixtures" / "targets"


def test_input_size_comes_from_the_meta_device(tmp_path):
    big = tmp_path / "big_ref.py"
    big.write_text(
        "import torch\n"
        "class Model(torch.nn.Module):\n"
        "    def forward(self, a, b):\n"
        "        return a + b\n"
        "def get_inputs():\n"
        "    # 2 x 6.4 GB if it were allocated\n"
        "    return [torch.randn(40_000, 40_000), torch.randn(40_000, 40_000), 3]\n"
        "def get_init_inputs():\n"
        "    return []\n"
    )
    reference = load_reference(big, torch.device("cpu"))
    assert input_bytes(reference) == 2 * 40_000 * 40_000 * 4


def test_inputs_that_need_values_have_no_size(tmp_path):
    reads = tmp_path / "reads_ref.py"
    reads.write_text(
        "import torch\n"
        "class Model(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x\n"
        "def get_inputs():\n"
        "    n = int(torch.randint(1, 4, (1,)).item())\n"
        "    return [torch.randn(n)]\n"
        "def get_init_inputs():\n"
        "    return []\n"
    )
    assert input_bytes(load_reference(reads, torch.device("cpu"))) is None


def test_the_shared_relu_reference():
    reference = load_reference(TARGETS / "relu_ref.py", torch.device("cpu"))
    assert input_bytes(reference) == (1 << 16) * 4


def test_an_out_of_memory_error_is_not_reported_as_a_shape_problem():
    # what a launcher's failed cudaMalloc surfaces as at the next synchronize
    error = error_from_exception(
        RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be reported later"),
        kernels={"relu_k"},
    )
    assert error.kind == "out_of_memory" and "shapes" not in error.fix
    assert error.message == "The GPU ran out of memory: CUDA error: out of memory"
    other = error_from_exception(RuntimeError("expected scalar type Float"), kernels={"k"})
    assert other.kind == "crash"


def test_a_problem_that_cannot_fit_is_refused_before_verifying(monkeypatch):
    gib = 1 << 30
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (30 * gib, 80 * gib))
    # softmax at KernelBench's size: 6 GiB in, 6 GiB out: 2 x 6 + 3 x 6 + the working set
    refused = verification_room(6 * gib, 6 * gib, held=0, device=cuda)
    assert refused is not None and refused.kind == "out_of_memory"
    assert "one input set is 6.00 GiB and its outputs 6.00 GiB" in refused.message
    assert "30.0 GiB of the GPU's 80.0 GiB are free" in refused.message
    # what the check holds already (the probe's inputs, sets made ahead) counts as room
    assert verification_room(6 * gib, 6 * gib, held=2 * gib, device=cuda) is None
    assert verification_room(6 * gib, 6 * gib, held=0, device=torch.device("cpu")) is None


# --- spares bounded by memory (issue 34) --------------------------------------------------------

LARGE = """
import torch
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(1_000, 1_000))
    def forward(self, x):
        return torch.softmax(x, dim=-1)
def get_inputs():
    # {gigabytes} GB a set if it were allocated
    return [torch.randn({rows}, 1_000_000)]
def get_init_inputs():
    return []
"""


def _reference(folder: Path, rows: int) -> Path:
    path = folder / f"large_{rows}_ref.py"
    path.write_text(LARGE.format(rows=rows, gigabytes=rows * 4 / 1000))
    return path


def test_a_problems_sizes_come_from_the_meta_device(tmp_path):
    from kernelblaster.harness.target.memory import problem_bytes

    assert problem_bytes(_reference(tmp_path, 1_600)) == (6_400_000_000, 6_400_000_000, 4_000_000)
    reads = tmp_path / "reads_ref.py"
    reads.write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
        "        return x\ndef get_inputs():\n    return [torch.ones(int(torch.ones(1).item()))]\n"
        "def get_init_inputs():\n    return []\n"
    )
    assert problem_bytes(reads) is None  # .item() on the meta device: no size


def test_a_spare_holds_a_side_only_where_it_and_a_check_fit_in_the_free_memory(tmp_path):
    """On the CPU the free memory is the host's available memory: a small problem's side is
    held; one of 40 GB a set (a KernelBench-sized problem many times over, 200 GB a check) is
    not, on any machine this runs on."""
    import psutil

    from kernelblaster.harness.target.reference_side import spare_side_fits

    cpu = torch.device("cpu")
    cache = tmp_path / "cache"
    assert spare_side_fits(TARGETS / "relu_ref.py", cpu, trials=3, cache=cache)
    huge = _reference(tmp_path, 10_000)  # 40 GB an input set
    assert psutil.virtual_memory().available < 200e9
    assert not spare_side_fits(huge, cpu, trials=3, cache=cache)


def test_a_spare_makes_no_side_of_a_problem_that_would_not_fit(tmp_path):
    """harness/worker/reference_ahead.py: the side is not made (the request makes its own,
    after the worker before it has let go of its memory), and nothing was loaded for it: no
    clean process session was asked for (`clean` is none here: asking would fail)."""
    from kernelblaster.harness.target.targets import Target
    from kernelblaster.harness.worker.reference_ahead import ReferenceAhead
    from kernelblaster.settings import Settings

    huge = _reference(tmp_path, 10_000)
    (tmp_path / "large.cu").write_text("// the candidate\n")
    target = Target(kind="plain", source=str(tmp_path / "large.cu"), entry="", reference=str(huge))
    settings = Settings(cache_dir=str(tmp_path / "cache"))
    ahead = ReferenceAhead()
    ahead.make(target, settings, clean=None, device_name="cpu")  # type: ignore[arg-type]
    assert ahead.take(target, settings) is None


def test_a_problems_sizes_are_kept_and_measured_again_once_its_files_change(tmp_path, monkeypatch):
    """The meta device's first operator costs a spare seconds (torch imports its meta kernels):
    sizes measured once, or remembered from a check's probe, are read back instead; an edit of
    the reference, or of a module beside it, measures them again."""
    from kernelblaster.harness.target import memory

    folder = tmp_path / "problem"
    folder.mkdir()
    reference = _reference(folder, 1_600)
    cache = tmp_path / "cache"
    measured = memory.known_problem_bytes(reference, cache)
    assert measured == (6_400_000_000, 6_400_000_000, 4_000_000)

    def no_meta(_path):
        raise AssertionError("measured again")

    monkeypatch.setattr(memory, "problem_bytes", no_meta)
    assert memory.known_problem_bytes(reference, cache) == measured

    helper = folder / "helper.py"
    helper.write_text("SCALE = 2\n")  # a module the reference may import: a new key
    memory.remember_problem_bytes(reference, cache, (1, 2, 3))  # as a check's probe found them
    assert memory.known_problem_bytes(reference, cache) == (1, 2, 3)

    helper.write_text("SCALE = 3\n")
    monkeypatch.undo()
    assert memory.known_problem_bytes(reference, cache) == measured
    for kept in (cache / "problem-sizes").iterdir():
        kept.write_text("{not json")  # a damaged file: measured again, not trusted, replaced
    assert memory.known_problem_bytes(reference, cache) == measured
    monkeypatch.setattr(memory, "problem_bytes", no_meta)
    assert memory.known_problem_bytes(reference, cache) == measured
