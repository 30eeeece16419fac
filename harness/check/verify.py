"""Numerical verification and the runtime reward-hacking checks of a candidate against its reference
(docs/checking.md, "Verification"). Worker side: imports torch.

Expected outputs and comparisons live in the clean reference process, where no candidate code
runs; this process holds only the candidate's inputs and outputs. Inputs are filled behind a
stream gate, outputs poisoned with NaN, and hacks are named only on runtime evidence."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from kernelblaster.harness.check.integrity import RuntimeSnapshot
from kernelblaster.harness.check.kernel_watch import KernelWatch
from kernelblaster.harness.check.stream_gate import StreamGate
from kernelblaster.harness.protocol.records import (
    HackFinding,
    HackKind,
    Mismatch,
    VerifyResult,
    VerifyWarning,
)
from kernelblaster.harness.target.candidate import Candidate, ReferenceCalled, guard_reference
from kernelblaster.harness.target.clean_reference import CleanReference
from kernelblaster.harness.target.compare import describe, describe_layout_mismatch, tolerances
from kernelblaster.harness.target.memory import return_cached
from kernelblaster.harness.target.reference import Reference
from kernelblaster.harness.target.reference_session import (
    ExpectedFacts,
    ReferenceSession,
    SessionFacts,
)
from kernelblaster.harness.target.tensor_checks import Signature, overlaps, same_bits
from kernelblaster.harness.target.trial_sets import (
    copied,
    expected_outputs,
    reuses_previous_inputs,
)

# Where the expected outputs are: the clean reference process's session (a check), or a
# session in this process (tests of the verdicts' logic on the CPU).
Oracle = CleanReference | ReferenceSession

# Kernels a candidate may launch besides its own: fills (the harness's own NaN poison among
# them), memsets and copies. Matched case-insensitively against the launched kernel's name.
_HOUSEKEEPING = ("fill", "memset", "memcpy", "copy")
# A reference output is weak when a zeros or constant output matches this share of it.
WEAK_FRACTION = 0.9
# Input scales tried, in order, when the reference is weak on get_inputs() as they are.
INPUT_SCALES = (8.0, 0.125)


def trial_step(index: int, trials: int) -> str:
    """The progress step of trial `index`: one of verification's `trials`, or the recheck after
    timing, which is one more and not "trial 4 of 3"."""
    if index >= trials:
        return "recheck on fresh inputs after timing"
    return f"trial {index + 1} of {trials}"


def _poison_allocator(templates: list[torch.Tensor], device: torch.device) -> None:
    """Hand the caching allocator NaN-filled blocks (0xFF bytes are NaN in fp32/fp16/bf16) of the
    outputs' sizes, so outputs the candidate allocates itself start as NaN too."""
    blocks = [
        torch.full((t.numel() * t.element_size(),), 0xFF, dtype=torch.uint8, device=device)
        for t in templates
    ]
    del blocks


def _is_own(name: str, candidate: Candidate) -> bool:
    return any(own in name for own in candidate.own_kernels)


def _tensors(values: list) -> list[torch.Tensor]:
    return [v for v in values if isinstance(v, torch.Tensor)]


def _layout(actual: list, expected: ExpectedFacts, device: torch.device) -> str | None:
    """What is wrong with `actual`'s number, shapes, dtypes and device, or None."""
    if len(actual) != len(expected.shapes):
        return f"{len(actual)} output(s), expected {len(expected.shapes)}"
    layouts = zip(actual, expected.shapes, expected.dtypes, strict=True)
    for j, (a, shape, dtype) in enumerate(layouts):
        problem = describe_layout_mismatch(a, shape=shape, dtype=dtype, device=device)
        if problem:
            return f"output {j}: {problem}"
    return None


class Verifier:
    """Runs the trials against one reference and collects mismatches, hacks and warnings;
    `recheck()` repeats one trial after timing, catching a candidate that behaves only at first.
    `oracle`: the session holding the expected outputs; `facts`: what it said when it opened;
    `reference`: the reference as loaded here. `seconds`: where the time went, by phase (gate,
    calls, checks, watch, sets). `kernel_watch`: how the watched call is watched (torch.profiler
    when not given)."""

    def __init__(
        self,
        candidate: Candidate,
        reference: Reference,
        *,
        device: torch.device,
        integrity: RuntimeSnapshot,
        oracle: Oracle,
        facts: SessionFacts,
        atol: float | None = None,
        rtol: float | None = None,
        watch_kernels: bool = False,
        allow_library_calls: bool = False,
        kernel_watch: KernelWatch | None = None,
    ):
        self.candidate, self.reference, self.device = candidate, reference, device
        self.oracle, self.facts = oracle, facts
        self.integrity = integrity
        self.atol, self.rtol = atol, rtol
        self.watch_kernels = watch_kernels or candidate.may_call_libraries
        self.allow_library_calls = allow_library_calls
        self.kernel_watch = kernel_watch or KernelWatch()
        self.seeds: list[int] = []
        self.mismatches: list[Mismatch] = []
        self.hacks: list[HackFinding] = []
        self.warnings: list[VerifyWarning] = []
        self.layout_problem: str | None = None
        self.used_tolerances = (0.0, 0.0)
        self._gate: StreamGate | None = None
        self._fastest_call_ms = math.inf  # host time of the fastest call so far (gate sizing)
        self._staged: list | None = None  # the candidate's input tensors of the last trial
        self._previous: list[torch.Tensor] = []  # the last call's outputs, kept alive
        # Signatures of the last call's outputs and of the reference's for its inputs, when
        # those outputs were right: the answer a cache would hand out again.
        self._last_right_answer: tuple[list[Signature], list[Signature]] | None = None
        self._weak: dict[int, tuple[float, float]] = {}
        self.unverifiable: str | None = None  # why no verdict can be reached
        self.seconds: dict[str, float] = {}
        # Told each step as it begins (the sizing call, each trial, the reference's run here):
        # the check passes them on as progress, which bench/memory.py dates its samples by.
        self.on_step: Callable[[str], None] = lambda _: None
        self._check_integrity()  # a candidate may patch at import time
        habits = facts.habits  # the clean process's: what the reference itself does
        self._aliases_inputs, self._modifies_inputs = habits.aliases_inputs, habits.modifies_inputs

    @contextmanager
    def _timed(self, part: str) -> Iterator[None]:
        began = time.perf_counter()
        yield
        self.seconds[part] = self.seconds.get(part, 0.0) + time.perf_counter() - began

    # --- running the candidate ----------------------------------------------------------

    def _hack(self, kind: HackKind, message: str) -> None:
        if all(h.kind != kind for h in self.hacks):
            self.hacks.append(HackFinding(kind=kind, message=message))

    @property
    def stopped(self) -> bool:
        return self.layout_problem is not None or any(
            h.kind in ("reads_reference", "monkey_patch", "reference_tampered") for h in self.hacks
        )

    def _check_integrity(self) -> bool:
        """False (and the originals put back) when the candidate has patched the runtime."""
        patched = self.integrity.changes()
        if not patched:
            return True
        self.integrity.restore()
        self._hack(
            "monkey_patch",
            f"replaced {', '.join(patched[:4])}: timers, synchronization and the harness's "
            "functions must stay the real ones",
        )
        return False

    def _call(self, inputs: list) -> list[torch.Tensor] | None:
        """One guarded candidate call; None when it called the reference or patched the
        runtime (recorded as hacks, originals restored)."""
        try:
            with torch.no_grad(), guard_reference(self.reference):
                outputs = self.candidate(inputs)
        except ReferenceCalled as exc:
            self._hack("reads_reference", str(exc))
            return None
        finally:
            intact = self._check_integrity()
        return outputs if intact and not self.stopped else None

    # --- one trial ----------------------------------------------------------------------

    def _stage(self, real: list, reuse: list) -> list:
        """The tensors the candidate receives: `reuse`'s (a decoy set, or the previous trial's
        tensors) where they fit, else new ones. Either way they hold stale values until the
        gated copy."""
        staged = []
        for old, new in zip(reuse, real, strict=True):
            if not isinstance(new, torch.Tensor):
                staged.append(new)
            elif isinstance(old, torch.Tensor) and (old.shape, old.dtype) == (new.shape, new.dtype):
                staged.append(old)
            else:
                staged.append(torch.empty_like(new))
        return staged

    def _open_gate(self, seed: int) -> StreamGate | None:
        """The gate, sized on a first (warm-up) call, on inputs of its own, that also shows
        how long a call takes on the host (and what a cache would hold after it)."""
        if self._gate is None:
            with self._timed("gate_calibration"):
                gate = StreamGate(self.device)
            self.on_step("the stream gate's sizing call")
            with self._timed("gate_wait"):
                warm_up = self.oracle.warm_up()
                torch.cuda.synchronize(self.device)
            began = time.perf_counter()
            with self._timed("gate_call"):
                outputs = self._call(warm_up.inputs)
                self._fastest_call_ms = (time.perf_counter() - began) * 1000.0
                gate.fit_to_call(self._fastest_call_ms)
                torch.cuda.synchronize(self.device)
            expected = warm_up.expected
            del warm_up
            if outputs is None:
                self.oracle.release(expected.key)
                return None
            right = _layout(outputs, expected, self.device) is None
            right = right and self._matches(outputs, expected, seed)
            self._remember(outputs, outputs, expected, right)
            self.oracle.release(expected.key)
            self._gate = gate
        return self._gate

    def _remember(self, returned: list, seen: list, expected: ExpectedFacts, right: bool) -> None:
        """Keep the call's outputs alive (a later output in the same memory is a reused
        buffer), and their signatures if they were `right`."""
        self._previous = list(returned)
        if right:
            self._last_right_answer = [Signature.of(s) for s in seen], list(expected.signatures)
        else:
            self._last_right_answer = None

    def _idle_call(self, inputs: list) -> list[torch.Tensor] | None:
        """A call on a GPU with nothing else to do: everything before it has finished, and
        everything it started has finished when it returns."""
        torch.cuda.synchronize(self.device)
        self.candidate.settle = True
        try:
            outputs = self._call(inputs)
        finally:
            self.candidate.settle = False
        torch.cuda.synchronize(self.device)
        return outputs

    def _gated_call(self, gate: StreamGate, staged: list, real: list) -> tuple[list, list] | None:
        """Call the candidate behind the gate; (its outputs, what the caller's stream saw of
        them when the call returned), or None when the call was refused."""
        _poison_allocator(self.candidate.output_templates, self.device)
        gate.close()
        for into, values in zip(_tensors(staged), _tensors(real), strict=True):
            into.copy_(values)  # behind the gate, on the caller's stream
        began = time.perf_counter()
        returned = self._call(staged)
        # The first call's host time includes loading the candidate's kernels (lazy loading):
        # the gate is sized on the fastest call so far, not held ~4x that load on every trial.
        # (A call that blocks on the gated stream takes longer, never shorter.)
        self._fastest_call_ms = min(self._fastest_call_ms, (time.perf_counter() - began) * 1e3)
        gate.fit_to_call(self._fastest_call_ms)
        if returned is None:
            return None
        # The previous call's outputs were kept alive for the call (so that a new output in
        # their memory is a reused buffer); let go before the copy, which needs the room.
        self._check_reused_buffers(staged, returned)
        self._previous = []
        seen = [o.clone() for o in returned]  # on the caller's stream, right after the call
        torch.cuda.synchronize(self.device)
        return returned, seen

    def reuses_previous_inputs(self, index: int) -> bool:
        return reuses_previous_inputs(index, self.facts.trials)

    def trial(self, index: int) -> None:
        """The session's trial `index` (verification's, then the recheck's)."""
        seed = self.facts.seeds[index]
        self.seeds.append(seed)
        with self._timed("gate"):
            # before this trial's inputs exist, where they are made one trial's at a time
            gate = self._open_gate(seed)
        if gate is None:
            return
        if not self.reuses_previous_inputs(index):
            self._staged = None  # the last trial's tensors, freed before this one's are made
        return_cached(self.device, sets_per_trial=self.facts.ahead_bytes == 0)
        self.on_step(trial_step(index, self.facts.trials))
        with self._timed("sets"):
            sets = self.oracle.take(index)
        expected = sets.expected
        try:
            self._trial(index, gate, sets)
        finally:
            with self._timed("sets"):
                self.oracle.release(expected.key)

    def _trial(self, index: int, gate: StreamGate, sets) -> None:
        seed, expected = sets.seed, sets.expected
        if index == 0:
            self.on_step("the reference run here on trial 1's inputs")
            with self._timed("reference_here"):
                self._check_reference_here(sets.inputs, expected, seed)
            if self.stopped:
                return
        reuse_inputs = self.reuses_previous_inputs(index)
        reuse = self._staged if reuse_inputs else sets.decoy
        if reuse is None:  # the plan makes a decoy for every trial that reuses no tensors
            raise RuntimeError(f"trial {index} has neither a decoy nor a previous trial's tensors")
        staged = self._stage(sets.inputs, reuse)
        self._staged = staged
        with self._timed("calls"):
            called = self._gated_call(gate, staged, sets.inputs)
        if called is None:
            return
        returned, seen = called
        with self._timed("checks"):
            real = sets.inputs  # the clean process's: kept for explaining a mismatch
            self._check_inputs_and_outputs(staged, real, returned, seen)
            del sets
            layout = _layout(seen, expected, self.device)
            if layout is not None:
                self.layout_problem = layout
                return
            if index == 0:
                self._measure_weakness(expected)
            mismatched = self._compare(seen, expected, trial=index, seed=seed)
        if mismatched:
            self._explain_mismatch(seen, expected, seed, reuse_inputs, real)
        with self._timed("checks"):
            self._remember(returned, seen, expected, right=not mismatched)

    def _check_reference_here(self, inputs: list, expected: ExpectedFacts, seed: int) -> None:
        """The reference as this process computes it, where the candidate's code has run,
        against the clean process's answer on the same inputs: any difference is the
        candidate's doing (it changed an op, a dispatch mode, the Model)."""
        here = expected_outputs(self.reference, inputs, copy=self._modifies_inputs)
        if self._aliases_inputs:  # a view of the clean process's memory: sent back as a copy
            here = [h.clone() for h in here]
        problem = _layout(here, expected, self.device)
        if problem is None:
            found = self.oracle.compare(expected.key, here, trial=0, seed=seed)
            problem = describe(found[0]) if found else None
        if problem is not None:
            self._hack(
                "reference_tampered",
                "the reference computes something else in the candidate's process than in a "
                f"process where no candidate code ran, on the same inputs ({problem}): the "
                "candidate changed what the reference computes (an operator's kernel, a "
                "dispatch mode or the problem's Model replaced)",
            )

    def _check_reused_buffers(self, staged: list, returned: list) -> None:
        """An output in the memory of the previous call's output (still held): a buffer
        reused across calls."""
        inputs = _tensors(staged)
        for j, out in enumerate(returned):
            # (an input reused from the last trial is the previous output's memory too where
            # the reference returns a view of its input)
            on_input = any(overlaps(out, x) for x in inputs)
            if not on_input and any(overlaps(out, p) for p in self._previous):
                self._hack(
                    "output_aliased",
                    f"output {j} is the memory of its previous call's output, which the caller "
                    "still holds (a buffer reused across calls)",
                )

    def _check_inputs_and_outputs(self, staged, real, returned, seen) -> None:
        inputs = _tensors(staged)
        if not self._modifies_inputs and not all(
            same_bits(x, r) for x, r in zip(inputs, _tensors(real), strict=True)
        ):
            self._hack("modifies_inputs", "wrote into its input tensors (the reference doesn't)")
        for j, out in enumerate(returned):
            on_input = any(overlaps(out, x) for x in inputs)
            if on_input and not self._aliases_inputs:
                self._hack(
                    "output_aliased", f"returned an input's memory as output {j} (not a new tensor)"
                )
        if not all(same_bits(s, o) for s, o in zip(seen, returned, strict=True)):
            self._hack(
                "side_stream",
                "its outputs were still being written after it returned: work on a stream the "
                "caller's stream never waits for escapes the timed region",
            )

    def _compare(
        self,
        actual: list,
        expected: ExpectedFacts,
        *,
        trial: int,
        seed: int,
        scale: float | None = None,
    ) -> list[Mismatch]:
        self.used_tolerances = tolerances(expected.dtypes[-1], self.atol, self.rtol)
        found = self.oracle.compare(expected.key, actual, trial=trial, seed=seed, scale=scale)
        self.mismatches.extend(found)
        return found

    def _matches(self, actual: list, expected: ExpectedFacts, seed: int) -> bool:
        """Whether the candidate's own `actual` tensors match (copies are compared: memory it
        allocated itself may not be shareable with the clean process)."""
        copies = [a.clone() for a in actual]
        return not self.oracle.compare(expected.key, copies, trial=0, seed=seed)

    def _explain_mismatch(
        self, seen: list, expected: ExpectedFacts, seed: int, reuse_inputs: bool, real: list
    ) -> None:
        """Name the hack behind a mismatch where the evidence shows one: right on the same tensors
        with the GPU idle but wrong behind the gate, its kernels don't wait for the caller's
        stream; the previous call's right answer again is a cache. Otherwise it is just wrong."""
        same = copied(real)
        idle = self._idle_call(same)
        right_when_idle = idle is not None and self._matches(idle, expected, seed)
        del idle
        if right_when_idle and self._gate is not None:
            stale = self.oracle.decoy(seed)
            for into, values in zip(_tensors(same), _tensors(stale), strict=True):
                if into.shape == values.shape:
                    into.copy_(values)
            gated = self._gated_call(self._gate, same, real)
            if gated is not None and not self._matches(gated[1], expected, seed):
                self._hack(
                    "side_stream",
                    "its kernels don't wait for the caller's stream: they read the inputs "
                    "before the caller's stream had written them (right only when the GPU is "
                    "idle)",
                )
                return
        if self._last_right_answer is not None:
            old_seen, old_expected = self._last_right_answer
            repeated = [Signature.of(s) for s in seen] == old_seen
            if repeated and list(expected.signatures) != old_expected:
                changed = "inputs changed in place" if reuse_inputs else "new inputs"
                self._hack("output_cached", f"returned its previous output again for {changed}")

    # --- after the trials ---------------------------------------------------------------

    def _measure_weakness(self, expected: ExpectedFacts) -> None:
        for j, (zeros, constant) in enumerate(expected.degenerate):
            if max(zeros, constant) >= WEAK_FRACTION:
                self._weak[j] = (zeros, constant)

    @staticmethod
    def _is_weak(expected: ExpectedFacts) -> bool:
        return not all(expected.finite) or any(
            max(fractions) >= WEAK_FRACTION for fractions in expected.degenerate
        )

    def _check_scaled_inputs(self) -> float | None:
        """Verify on inputs scaled so the weak reference's outputs become informative; the
        scale used, or None when no scale makes them so."""
        for scale in INPUT_SCALES:
            sets = self.oracle.scaled(self.seeds[0], scale)
            expected = sets.expected
            try:
                if self._is_weak(expected):
                    continue
                _poison_allocator(self.candidate.output_templates, self.device)
                actual = self._call(copied(sets.inputs))
                torch.cuda.synchronize(self.device)
                if actual is None:
                    return None
                actual = [a.clone() for a in actual]
                if (layout := _layout(actual, expected, self.device)) is not None:
                    self.layout_problem = layout
                    return None
                trial = len(self.seeds)
                self._compare(actual, expected, trial=trial, seed=self.seeds[0], scale=scale)
                return scale
            finally:
                self.oracle.release(expected.key)
        return None

    def _report_weakness(self) -> None:
        scale = self._check_scaled_inputs()
        checked = (
            f"; also verified on inputs scaled by {scale:g}, where it is not"
            if scale is not None
            else "; no input scale tried (x8, x0.125) makes it informative"
        )
        if scale is None and not self.stopped:
            self.unverifiable = (
                "not verified: the reference cannot tell a correct kernel from a constant one "
                "(its outputs are degenerate on get_inputs() and on every input scale tried, "
                "x8 and x0.125, computed where no candidate code ran); make get_inputs() draw "
                "inputs on which the reference's outputs vary"
            )
        for j, (zeros, constant) in sorted(self._weak.items()):
            self.warnings.append(
                VerifyWarning(
                    kind="weak_reference",
                    message=f"the reference's output {j} is degenerate on get_inputs(): an "
                    f"all-zeros output matches {zeros:.1%} of it, a constant one "
                    f"{constant:.1%}{checked}",
                    evidence={
                        "output": float(j),
                        "zero_fraction": zeros,
                        "constant_fraction": constant,
                        "input_scale": scale or 0.0,
                    },
                )
            )

    def _check_launched_kernels(self) -> None:
        with self._timed("watch"):
            launched = self.kernel_watch.launched(
                self._call, self.reference.inputs(self.seeds[0], self.device), self.device
            )
        if self.stopped:  # it patched the runtime or called the reference this time
            return
        foreign = {
            name
            for name in launched
            if not _is_own(name, self.candidate)
            and not any(w in name.lower() for w in _HOUSEKEEPING)
        }
        if foreign and not self.allow_library_calls:
            self._hack(
                "calls_library",
                "launches kernels it doesn't define: " + ", ".join(sorted(foreign)[:3]),
            )
        if self.candidate.own_kernels and not any(_is_own(n, self.candidate) for n in launched):
            self._hack("no_kernel_launched", "none of its kernels ran")

    # --- the whole verification ---------------------------------------------------------

    def verify(self) -> VerifyResult:
        """The session's trials (at least 3)."""
        for index in range(self.facts.trials):
            self.trial(index)
            if self.stopped:
                break
        self._staged, self._previous = None, []
        if not self.stopped and self._weak:
            self._report_weakness()
        if not self.stopped and self.watch_kernels:
            self._check_launched_kernels()
        return self.result()

    def recheck(self) -> VerifyResult:
        """One more trial, on fresh inputs, after the candidate has been timed."""
        assert len(self.seeds) == self.facts.trials, "verify() first"
        self.trial(self.facts.trials)
        self._staged, self._previous = None, []
        return self.result()

    def result(self) -> VerifyResult:
        ok = not self.mismatches and not self.hacks and self.layout_problem is None
        ok = ok and self.unverifiable is None
        if self.layout_problem:
            message = f"wrong result layout: {self.layout_problem}"
        elif self.hacks:
            message = "; ".join(h.message for h in self.hacks)
        elif self.mismatches:
            message = describe(self.mismatches[0])
        elif self.unverifiable:
            message = self.unverifiable
        else:
            message = (
                f"matches the reference on {len(self.seeds)} fresh input sets "
                "(new tensors and tensors changed in place)"
            )
        atol, rtol = self.used_tolerances
        return VerifyResult(
            ok=ok,
            trials=len(self.seeds),
            seeds=list(self.seeds),
            atol=atol,
            rtol=rtol,
            mismatches=list(self.mismatches),
            hacks=list(self.hacks),
            warnings=list(self.warnings),
            message=message,
        )
