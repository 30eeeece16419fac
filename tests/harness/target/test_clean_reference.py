"""The clean reference process on the CPU (tensors cross as shared memory instead of CUDA IPC
handles): expected outputs computed where no candidate code ran, a reference tampered with in
the candidate's process named `reference_tampered`, an honest candidate with its own custom op
passing, a reference degenerate on every input scale not verified, and a broken reference's
error raised in the worker as it was raised in the child."""

from __future__ import annotations

import io
import pickle
import sys
import types
from pathlib import Path

import pytest
import torch

from kernelblaster.harness.check import verify as verify_module
from kernelblaster.harness.check.integrity import RuntimeSnapshot
from kernelblaster.harness.target import clean_reference
from kernelblaster.harness.target.candidate import Candidate
from kernelblaster.harness.target.clean_reference import CleanReference
from kernelblaster.harness.target.reference import ReferenceError_, load_reference

TARGETS = Path(__file__).resolve().parents[2] / "fixtures" / "targets"
RELU = TARGETS / "relu_ref.py"
CPU = torch.device("cpu")

FLAT = """
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.zeros_like(x) + 1.0  # the same whatever the inputs
def get_inputs():
    return [torch.randn(4096)]
def get_init_inputs():
    return []
"""


class InOrderGate:
    def __init__(self, device):
        self.hold_ms = 0.0

    def fit_to_call(self, host_call_ms: float) -> None:
        self.hold_ms = host_call_ms

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def clean():
    process = CleanReference("cpu")
    yield process
    process.close()


@pytest.fixture
def verify(clean, monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(verify_module, "StreamGate", InOrderGate)

    def run(call, path: Path = RELU, tamper=lambda: None):
        clean.open(path, trials=3, atol=None, rtol=None)
        reference = load_reference(path, CPU)
        templates = [torch.empty_like(reference.model(*reference.inputs(0, CPU)), device="meta")]
        snapshot = RuntimeSnapshot()
        undo = tamper()  # the candidate's import: after the clean process started
        try:
            candidate = Candidate(call=call, own_kernels=set(), output_templates=templates)
            candidate.may_call_libraries = False
            verifier = verify_module.Verifier(
                candidate,
                reference,
                device=CPU,
                integrity=snapshot,
                oracle=clean,
                facts=clean.facts(),
            )
            return verifier.verify()
        finally:
            if undo is not None:
                undo()
            snapshot.restore()

    return run


def test_expected_outputs_are_made_in_another_process_and_compared_there(clean):
    import os

    clean.open(RELU, trials=3, atol=None, rtol=None)
    facts = clean.facts()
    assert clean.pid != os.getpid() and facts.trials == 3 and len(facts.seeds) == 4
    trial = clean.take(0)
    (x,) = trial.inputs
    assert trial.seed == facts.seeds[0] and trial.expected.shapes == [tuple(x.shape)]
    assert clean.compare(trial.expected.key, [torch.relu(x)], trial=0, seed=trial.seed) == []
    (wrong,) = clean.compare(trial.expected.key, [torch.zeros_like(x)], trial=0, seed=trial.seed)
    assert wrong.bad_elements > 0
    clean.release(trial.expected.key)


def _relu_returns_zeros():
    """The issue's hack: the candidate registers its own kernel for aten::relu (no Python name
    rebound), so the reference in its process returns the candidate's trivial answer."""
    library = torch.library.Library("aten", "IMPL")
    library.impl("relu", lambda x: torch.zeros_like(x), "CPU")
    return library._destroy


def test_an_aten_kernel_registered_over_the_references_op_is_tampering(verify):
    result = verify(lambda inputs: [torch.zeros_like(inputs[0])], tamper=_relu_returns_zeros)
    assert not result.ok
    assert "reference_tampered" in {h.kind for h in result.hacks}
    assert "no candidate code ran" in result.message


def test_a_global_dispatch_mode_changing_the_reference_is_tampering(verify):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Zeros(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.relu.default:
                return torch.zeros_like(args[0])
            return func(*args, **(kwargs or {}))

    def push():
        mode = Zeros()
        mode.__enter__()
        return lambda: mode.__exit__(None, None, None)

    result = verify(lambda inputs: [torch.zeros_like(inputs[0])], tamper=push)
    assert "reference_tampered" in {h.kind for h in result.hacks}


def test_the_problems_model_patched_through_its_module_is_tampering(verify):
    def patch():
        patched = [
            (module.Model, module.Model.__dict__["forward"])
            for module in list(sys.modules.values())
            if str(getattr(module, "__file__", "")).endswith("relu_ref.py")
        ]
        for model, _ in patched:
            model.forward = lambda self, x: torch.zeros_like(x)

        def undo():
            for model, forward in patched:
                model.forward = forward

        return undo

    result = verify(lambda inputs: [torch.zeros_like(inputs[0])], tamper=patch)
    assert "reference_tampered" in {h.kind for h in result.hacks}


def test_an_honest_candidate_with_its_own_custom_op_passes(verify):
    @torch.library.custom_op("kb_test_clean::relu", mutates_args=())
    def own_relu(x: torch.Tensor) -> torch.Tensor:
        return x.clamp_min(0.0)

    result = verify(lambda inputs: [own_relu(inputs[0])])
    assert result.ok and result.hacks == [], result.message


def test_a_reference_degenerate_on_every_scale_is_not_verified(verify, tmp_path):
    flat = tmp_path / "flat_ref.py"
    flat.write_text(FLAT)
    result = verify(lambda inputs: [torch.ones_like(inputs[0])], flat)
    assert not result.ok and result.hacks == [] and result.mismatches == []
    assert "the reference cannot tell a correct kernel from a constant one" in result.message
    assert [w.kind for w in result.warnings] == ["weak_reference"]


def test_a_broken_reference_is_raised_in_the_worker_as_in_the_child(clean, tmp_path):
    broken = tmp_path / "broken_ref.py"
    broken.write_text("import torch\nraise ValueError('no reference today')\n")
    clean.open(broken, trials=3, atol=None, rtol=None)
    with pytest.raises(ReferenceError_) as raised:
        clean.facts()
    assert raised.value.error.kind == "bad_reference"
    assert "no reference today" in raised.value.error.message
    clean.open(RELU, trials=3, atol=None, rtol=None)  # the process serves the next session
    assert clean.facts().trials == 3


class _RunsCodeWhenUnpickled:
    """What candidate code in the worker could send down the clean process's pipe: an object
    whose unpickling runs a command of its choosing."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_a_question_that_would_run_code_in_the_clean_process_is_refused(clean, tmp_path):
    marker = tmp_path / "ran-in-the-clean-process"
    clean.open(RELU, trials=3, atol=None, rtol=None)
    clean.facts()
    clean._conn.send(("compare", (1, [_RunsCodeWhenUnpickled(marker)]), {}))
    with pytest.raises(pickle.UnpicklingError, match=r"refuses posix\.system"):
        clean._answer()
    assert not marker.exists()
    trial = clean.take(0)  # the same session still answers the worker's own questions
    (x,) = trial.inputs
    assert clean.compare(trial.expected.key, [torch.relu(x)], trial=0, seed=trial.seed) == []
    clean.release(trial.expected.key)


class _SharedCudaTensor:
    """Pickles exactly as torch.multiprocessing's reduce_tensor pickles a CUDA tensor (its
    CUDA branch's callable and argument types), which this CPU-only machine can't make."""

    def __reduce__(self):
        from torch.multiprocessing.reductions import rebuild_cuda_tensor

        size = torch.Size([4])
        return (
            rebuild_cuda_tensor,
            (torch.Tensor, size, (1,), 0, torch.storage.TypedStorage, torch.float32, 0,
             b"handle", 16, 0, False, b"counter", 0, b"event", True),
        )  # fmt: skip


def test_the_globals_of_a_shared_cuda_tensor_are_accepted():
    """Every global a CUDA tensor's IPC pickle names passes the clean process's reader (a
    refusal there would fail every verification on a GPU); the rebuild itself then fails here
    for want of CUDA, not for being refused."""
    from multiprocessing.reduction import ForkingPickler

    from kernelblaster.harness.target.clean_reference import _QuestionReader

    sent = ForkingPickler.dumps(("compare", (1, [_SharedCudaTensor()]), {}))
    with pytest.raises(Exception) as failed:
        _QuestionReader(io.BytesIO(bytes(sent))).load()
    assert not isinstance(failed.value, pickle.UnpicklingError), failed.value


def test_a_torch_half_imported_by_another_thread_starts_the_child_by_spawn(monkeypatch):
    """The prewarm thread may be inside torch's import when the request's build asks for the
    clean process: the module is in sys.modules without `torch.cuda` yet, and the context
    must be chosen without touching it (this was an AttributeError on the GPU machine)."""
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    monkeypatch.setattr(clean_reference, "_threads", lambda: 2)
    assert clean_reference._start_context().get_start_method() == "spawn"
