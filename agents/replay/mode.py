"""Replay mode of the optimization loop: the real loop, KB, ranking, selection and write-back, on a
measured table instead of a GPU and an LLM. `ReplayTask` fills the loop's injection points:
`offered` (only techniques the library has a rewrite for, so a gap costs no step), `lower` (the
library's variant for the edge) and `evaluate` (the table's verdict, a time drawn at the measured
spread). `ReplayModel` approves what verified and proposes nothing; the table has no sanitizer
runs, so every verified variant passes."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path

import msgspec

from kernelblaster.agents.llm.client import LlmError, LlmReply, Usage
from kernelblaster.agents.llm.lowering import FailureKind, Feedback, LoweringInput, LoweringResult
from kernelblaster.agents.loop.evaluation import Evaluation
from kernelblaster.agents.loop.run import OptimizeRun, run_optimization
from kernelblaster.agents.replay.table import (
    NAIVE,
    LearningTable,
    LibraryError,
    Measurement,
    Task,
    source_digest,
)
from kernelblaster.harness.analysis.findings import with_kernel_chain
from kernelblaster.harness.protocol.optimize_protocol import OptimizeRequest, OptimizeResult
from kernelblaster.harness.protocol.records import CheckResult, Timing, VerifyResult
from kernelblaster.kb.store import KnowledgeBase
from kernelblaster.settings import Settings

# Verdicts of the model calls the replay answers, by purpose (see agents/llm/prompts).
_SCRIPTED_REPLIES = {
    "soft_verify": '{"ok": true, "reasons": []}',  # the harness verified the variant
    "perf_gap": '{"analyses": []}',
    "parameter_update": '{"updates": []}',
}
# a variant's measured outcome -> (Evaluation outcome, lowering feedback kind)
_FAILURES: dict[str, tuple[str, FailureKind]] = {
    "build_error": ("compile_error", "compile_error"),
    "wrong": ("wrong_result", "wrong_result"),
    "crash": ("crash", "crash"),
    "timeout": ("timeout", "timeout"),
}


class ReplayModel:
    """Stands in for the LLM client in replay: scripted verdicts for soft verification and the
    policy update; anything else (lowering, naming a new state) is not available."""

    model = "replay"

    def chat(
        self,
        messages: list[dict],
        *,
        purpose: str,
        temperature: float = 0.0,
        max_tokens: int | None = None,
    ) -> LlmReply:
        text = _SCRIPTED_REPLIES.get(purpose)
        if text is None:
            raise LlmError("not_configured", f"the replay has no model for {purpose!r}")
        return LlmReply(text=text, usage=Usage(), finish_reason="stop", model=self.model)


class ReplayStep(msgspec.Struct, kw_only=True):
    """What the scripted agent did in one loop step, in the loop's order."""

    source: str  # the variant the step started from
    technique: str
    target: str | None  # the variant it returned; None when the library has no such rewrite
    time_ms: float | None = None  # the time the replayed evaluation reported for it


class ReplayTask:
    """One task of the library replayed from `table`; `steps` logs every lowering call."""

    def __init__(self, task: Task, table: LearningTable, *, rng: random.Random):
        self.task = task
        self.table = table
        self.rng = rng
        self.steps: list[ReplayStep] = []
        self._variants: dict[str, str] = {}  # source digest -> variant name
        self._sources: dict[str, str] = {}
        for name in [NAIVE, *(v.name for v in task.variant)]:
            text = task.source_text(name)
            self._sources[name] = text
            self._variants[source_digest(text)] = name
        self._edges = {
            (t.source, t.technique): t.target for t in table.transitions if t.task == task.task
        }
        if table.measurement(task.task, NAIVE) is None:
            raise LibraryError(f"the table has no measurement of {task.task}'s naive kernel")

    @property
    def source(self) -> Path:
        return self.task.source_path(NAIVE)

    @property
    def naive_text(self) -> str:
        return self._sources[NAIVE]

    def variant_of(self, text: str) -> str:
        name = self._variants.get(source_digest(text))
        if name is None:
            raise LibraryError(f"replay of {self.task.task}: a source that is no variant of it")
        return name

    def request(self, **fields: object) -> OptimizeRequest:
        """An optimize request for the task's naive kernel, with `fields` (rollouts, depth,
        seed, the selection, ...) and OptimizeRequest's defaults for the rest; no proposals:
        the replay has no model to propose and no rewrite of a proposal."""
        return OptimizeRequest(
            source=str(self.source),
            source_text=self.naive_text,
            kernel=self.task.task,
            **{"proposals": 0, **fields},  # type: ignore[arg-type]
        )

    def optimize(self, kb: KnowledgeBase, request: OptimizeRequest) -> OptimizeResult:
        """The real loop (`run_optimization`) on `request` with `kb`, its lowering, evaluation
        and offered rewrites answered by this replay, its few model calls by ReplayModel."""
        return run_optimization(
            OptimizeRun(
                request=request,
                client=ReplayModel(),  # type: ignore[arg-type]  # answers what the replay needs
                kb=kb,
                evaluate=self.evaluate,
                lower=self.lower,
                offered=self.offered,
            )
        )

    def measured(self, variant: str) -> Measurement:
        found = self.table.measurement(self.task.task, variant)
        if found is None:
            raise LibraryError(f"the table has no measurement of {self.task.task}/{variant}")
        return found

    # --- the loop's injection points ---------------------------------------------------------

    def offered(self, text: str) -> set[str]:
        """The techniques the library has a rewrite of `text` for: the loop chooses among
        these only, so a gap in the library is not a failure of the technique (a model asked
        for another rewrite would have produced something; the library can't say what)."""
        source = self.variant_of(text)
        return {technique for (start, technique) in self._edges if start == source}

    def lower(
        self,
        client: object,
        inp: LoweringInput,
        *,
        check: Callable[[str], Feedback | None],
        on_usage: Callable[[Usage], None],
    ) -> LoweringResult:
        """The scripted lowering agent: one rewrite per step, the library's for this edge. It
        calls no LLM, so it spends no tokens and never calls `on_usage`."""
        source = self.variant_of(inp.source)
        target = self._edges.get((source, inp.technique.id))
        self.steps.append(ReplayStep(source=source, technique=inp.technique.id, target=target))
        if target is None:
            return LoweringResult(
                source=None,
                attempts=1,
                usage=Usage(),
                failures=[f"replay: no rewrite of {source} by {inp.technique.id} in the library"],
            )
        candidate = self._sources[target]
        feedback = check(candidate)
        if feedback is not None:
            return LoweringResult(
                source=None,
                attempts=1,
                usage=Usage(),
                failures=[f"{feedback.kind}: {feedback.message.splitlines()[0][:160]}"],
            )
        return LoweringResult(source=candidate, attempts=1, usage=Usage(), failures=[])

    def evaluate(
        self,
        source: Path,
        text: str,
        kernel: str | None,
        settings: Settings,
        *,
        depth: str = "quick",
        sanitize: bool = False,
        profile: bool = True,
        ncu_below_ms: float | None = None,
    ) -> Evaluation:
        """The table's answer for `text`, with a time drawn at the variant's measured spread
        (the table holds each variant's state: `ncu_below_ms`, the live harness's choice of
        profiler, changes nothing here)."""
        variant = self.variant_of(text)
        measured = self.measured(variant)
        if measured.outcome != "verified":
            outcome, kind = _FAILURES[measured.outcome]
            return Evaluation(
                outcome=outcome, feedback=Feedback(kind=kind, message=measured.detail or outcome)
            )
        assert measured.time_ms is not None and measured.state is not None
        time_ms = measured.time_ms * math.exp(self.rng.gauss(0.0, measured.spread or 0.0))
        if self.steps and self.steps[-1].target == variant and self.steps[-1].time_ms is None:
            self.steps[-1].time_ms = time_ms
        check = CheckResult(
            source=str(source),
            target_kind="plain",
            gpu=self.table.device,
            arch=self.table.arch,
            verify=VerifyResult(ok=True, trials=3, atol=0.0, rtol=0.0, message=measured.detail),
            timing=_timing(time_ms, measured.repetitions),
            eager=_timing(measured.eager_ms, 0) if measured.eager_ms else None,
            compiled=_timing(measured.compile_ms, 0) if measured.compile_ms else None,
        )
        # As the live evaluation does: the measured state plus what else the variant launches.
        state = with_kernel_chain(measured.state, list(measured.kernel_ns.values()))
        return Evaluation(outcome="verified", check=check, state=state, time_ms=time_ms)


def _timing(ms: float, repetitions: int) -> Timing:
    return Timing(median_ms=ms, min_ms=ms, max_ms=ms, p20_ms=ms, p80_ms=ms, repetitions=repetitions)
