"""Verification's verdicts, on the CPU: Python candidates over CPU tensors through the real
Verifier. On the CPU every operation completes in order, so the stream gate has nothing to
hold (it is replaced by one that records its use) and torch.cuda.synchronize by a no-op; stream
ordering itself is checked on the GPU by tests/harness/check/test_adversarial_gpu.py. Everything
else is the real logic: staged and in-place inputs, aliasing, caches, runtime patches, weak
references. The expected outputs come from a session (harness/target/reference_session.py) in this
process, as the clean reference process holds one (its handoff between processes:
test_clean_reference.py). Each verdict is reached twice: with every trial's sets made ahead (as
while nvcc builds) and with each made as its trial starts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from bench.adversarial_suite import WEAK_REF
from kernelblaster.harness.check import verify as verify_module
from kernelblaster.harness.check.integrity import RuntimeSnapshot
from kernelblaster.harness.target import trial_sets
from kernelblaster.harness.target.candidate import Candidate
from kernelblaster.harness.target.reference import load_reference
from kernelblaster.harness.target.reference_session import ReferenceSession
from kernelblaster.harness.target.reference_side import prepare_reference_side

FIXTURES = Path(__file__).resolve().parents[2]
RELU = FIXTURES / "fixtures" / "targets" / "relu_ref.py"

CPU = torch.device("cpu")


class InOrderGate:
    """The CPU's stand-in for StreamGate: nothing runs out of order, so nothing to hold."""

    closed = 0

    def __init__(self, device):
        self.hold_ms = 0.0

    def fit_to_call(self, host_call_ms: float) -> None:
        self.hold_ms = host_call_ms

    def close(self) -> None:
        InOrderGate.closed += 1


@pytest.fixture(params=["made ahead", "per trial"])
def verify(monkeypatch, request):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(verify_module, "StreamGate", InOrderGate)

    if request.param == "per trial":
        monkeypatch.setattr(trial_sets, "AHEAD_MAX_BYTES", 0)

    def run(call, reference_path: Path = RELU, *, recheck: bool = False):
        side = prepare_reference_side(reference_path, CPU, trials=3)
        assert side.ready()[3].made_ahead == (request.param == "made ahead")
        session = ReferenceSession(side, atol=None, rtol=None)
        # the reference as the candidate's process loads it: another copy
        reference = load_reference(reference_path, CPU)
        outputs = [reference.model(*reference.inputs(0, CPU))]
        candidate = Candidate(
            call=call,
            own_kernels={"relu_k"},
            output_templates=[torch.empty_like(t, device="meta") for t in outputs],
            may_call_libraries=False,
        )
        snapshot = RuntimeSnapshot()
        try:
            verifier = verify_module.Verifier(
                candidate,
                reference,
                device=CPU,
                integrity=snapshot,
                oracle=session,
                facts=session.facts,
            )
            verifier.on_step = run.steps.append
            result = verifier.verify()
            return verifier.recheck() if recheck and result.ok else result
        finally:
            snapshot.restore()

    run.steps = []  # the progress steps the verifier reported
    return run


def kinds(result) -> set[str]:
    return {hack.kind for hack in result.hacks}


def test_an_honest_candidate_passes_on_new_and_in_place_changed_inputs(verify):
    closed = InOrderGate.closed
    result = verify(lambda inputs: [torch.relu(inputs[0])], recheck=True)
    assert result.ok and result.hacks == [] and result.warnings == []
    assert result.trials == 4 and len(set(result.seeds)) == 4  # 3 trials and one after timing
    trials = [step for step in verify.steps if step.startswith(("trial ", "recheck"))]
    assert trials[-4:] == [
        "trial 1 of 3",
        "trial 2 of 3",
        "trial 3 of 3",
        "recheck on fresh inputs after timing",
    ]  # never "trial 4 of 3"
    assert "tensors changed in place" in result.message
    assert InOrderGate.closed - closed == 4  # every trial behind the gate


def test_returning_the_input_written_in_place(verify):
    def relu_in_place(inputs):
        return [inputs[0].relu_()]

    result = verify(relu_in_place)
    assert not result.ok and kinds(result) == {"output_aliased", "modifies_inputs"}


def test_using_the_input_as_scratch(verify):
    def scratch(inputs):
        out = torch.relu(inputs[0])
        inputs[0].zero_()
        return [out]

    assert kinds(verify(scratch)) == {"modifies_inputs"}


def test_a_cache_keyed_on_the_tensor_returns_a_stale_answer_for_changed_contents(verify):
    cache: dict[int, torch.Tensor] = {}

    def cached(inputs):
        key = inputs[0].data_ptr()
        if key not in cache:
            cache[key] = torch.relu(inputs[0])
        return [cache[key].clone()]

    result = verify(cached)
    assert kinds(result) == {"output_cached"}
    # always caught where the contents change in place; new tensors may land on a freed
    # tensor's address and be served that tensor's answer too
    assert "returned its previous output again" in result.message
    assert 1 <= len(result.mismatches) <= 3


def test_an_answer_computed_once_and_returned_again(verify):
    kept: list[torch.Tensor] = []

    def once(inputs):
        if not kept:
            kept.append(torch.relu(inputs[0]))
        return [kept[0]]

    assert kinds(verify(once)) == {"output_aliased", "output_cached"}


def test_a_buffer_reused_across_calls_is_aliasing_even_with_right_values(verify):
    buffer: list[torch.Tensor] = []

    def reused(inputs):
        if not buffer:
            buffer.append(torch.empty_like(inputs[0]))
        torch.clamp_min(inputs[0], 0.0, out=buffer[0])
        return [buffer[0]]

    result = verify(reused)
    assert kinds(result) == {"output_aliased"} and result.mismatches == []


def test_wrong_answers_are_mismatches_not_caches(verify):
    zeros = verify(lambda inputs: [torch.zeros_like(inputs[0])])
    assert zeros.hacks == [] and len(zeros.mismatches) == 3
    half = verify(lambda inputs: [torch.relu(inputs[0]).half().float()])  # reduced precision
    assert half.hacks == [] and half.mismatches[0].max_rel_error > 1e-4


def test_a_patched_timer_is_named_and_undone(verify):
    real = torch.cuda.Event.elapsed_time

    def patches(inputs):
        torch.cuda.Event.elapsed_time = lambda self, end: 0.001
        time.perf_counter = lambda: 0.0
        return [torch.relu(inputs[0])]

    result = verify(patches)
    assert kinds(result) == {"monkey_patch"}
    assert "torch.cuda.Event.elapsed_time" in result.message
    assert torch.cuda.Event.elapsed_time is real and time.perf_counter() > 0.0


def test_calling_its_own_copy_of_the_reference_model_is_caught(verify):
    import relu_ref  # the problem file, imported the way a solution would

    def calls_problem(inputs):
        return [relu_ref.Model()(inputs[0])]

    assert kinds(verify(calls_problem)) == {"reads_reference"}


def test_a_degenerate_reference_warns_and_verifies_on_scaled_inputs(verify):
    honest = verify(lambda inputs: [torch.relu(inputs[0] - 6.0)], WEAK_REF)
    assert honest.ok
    (weak,) = honest.warnings
    assert weak.kind == "weak_reference" and weak.evidence["zero_fraction"] == 1.0
    assert weak.evidence["input_scale"] == 8.0
    zeros = verify(lambda inputs: [torch.zeros_like(inputs[0])], WEAK_REF)
    assert not zeros.ok and [m.input_scale for m in zeros.mismatches] == [8.0]
    assert "scaled by 8" in zeros.message


def test_returning_the_input_is_fine_where_the_reference_does_it_too(verify, tmp_path):
    identity = tmp_path / "identity_ref.py"
    identity.write_text(
        "import torch\n"
        "class Model(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x.view(-1)\n"
        "def get_inputs():\n"
        "    return [torch.randn(16, 16)]\n"
        "def get_init_inputs():\n"
        "    return []\n"
    )
    assert verify(lambda inputs: [inputs[0].view(-1)], identity).ok


def test_changing_the_inputs_is_fine_where_the_reference_does_it_too(verify, tmp_path):
    # The reference's answers are computed on copies: its inputs, whose values the candidate's
    # tensors are filled with, stay as get_inputs() made them (doubling is not idempotent).
    doubles = tmp_path / "doubles_ref.py"
    doubles.write_text(
        "import torch\n"
        "class Model(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x.mul_(2.0)\n"
        "def get_inputs():\n"
        "    return [torch.randn(64)]\n"
        "def get_init_inputs():\n"
        "    return []\n"
    )
    result = verify(lambda inputs: [inputs[0].mul_(2.0)], doubles, recheck=True)
    assert result.ok, result.message
    assert not verify(lambda inputs: [inputs[0] * 4.0], doubles).ok


@pytest.fixture(autouse=True)
def _problem_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(RELU.parent))
