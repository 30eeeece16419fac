"""The clean reference process: a child of the worker, started before any candidate code runs, in
which none ever runs. It computes the reference's expected outputs, compares the candidate's with
them and answers questions like the PyTorch baselines' timing, so a candidate that changes what
the reference computes in the worker (an ATen kernel, a dispatch mode, a patched Model) can't
reach them. Forked where the worker holds torch without CUDA, else spawned; tensors cross as CUDA
IPC handles. The client is torch-free."""

from __future__ import annotations

import io
import multiprocessing
import os
import pickle
import sys
import threading
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from multiprocessing.context import ForkContext, SpawnContext
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernelblaster.harness.protocol.records import Mismatch
    from kernelblaster.harness.target.reference_session import (
        SessionFacts,
        SessionTrial,
        SetsAhead,
    )
    from kernelblaster.harness.target.targets import Target
    from kernelblaster.settings import Settings

# A question beyond a session's, called in the child as `answer(device, reference_path, *args)`:
# module-level functions (a spawned child imports them by name) of torch-free modules.
Answer = Callable[..., Any]

# What the candidate's process may ask a session (harness/target/reference_session.py)
_QUESTIONS = frozenset(
    {"warm_up", "take", "hand_over_ahead", "scaled", "decoy", "release", "compare", "trim"}
)
# Those that make a trial's sets (or a decoy): asked at the start of a trial
_MAKES_SETS = frozenset({"warm_up", "take", "scaled", "decoy"})
# What a question from the worker may name besides plain values (and torch's dtypes): the
# globals torch.multiprocessing's reductions pickle a shared CPU or CUDA tensor as
_SHARED_TENSOR_GLOBALS = frozenset(
    {
        ("torch.multiprocessing.reductions", "rebuild_tensor"),
        ("torch.multiprocessing.reductions", "rebuild_cuda_tensor"),
        ("torch.multiprocessing.reductions", "rebuild_typed_storage"),
        ("torch.multiprocessing.reductions", "rebuild_storage_fd"),
        ("torch.multiprocessing.reductions", "rebuild_storage_filename"),
        ("torch.multiprocessing.reductions", "rebuild_storage_empty"),
        ("torch.storage", "UntypedStorage"),
        ("torch.storage", "TypedStorage"),  # a CUDA tensor's storage class (reduce_tensor)
        ("torch", "Tensor"),
        ("torch", "Size"),
        ("multiprocessing.resource_sharer", "DupFd"),  # a shared CPU tensor's file descriptor
    }
)


class CleanReferenceGone(RuntimeError):
    """The clean reference process ended before answering."""


class CleanReference:
    """The worker's handle on its clean reference process (one per worker process)."""

    def __init__(self, device: str, answers: Mapping[str, Answer] | None = None):
        context = _start_context()
        self._conn, child = context.Pipe()
        self._answers = dict(answers or {})
        self._process = context.Process(
            target=_serve,
            args=(child, device, self._answers),
            name="kernelblaster clean reference",
            daemon=True,
        )
        self._process.start()
        child.close()
        self.device = device
        self._opens_unanswered = 0
        self._facts: SessionFacts | None = None
        self._failure: Exception | None = None  # what making the open session raised
        # The session's sets handed over ahead of their trials (`hand_over_ahead`)
        self._handed: SetsAhead | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def open(self, reference: Path, *, trials: int, atol: float | None, rtol: float | None) -> None:
        """Start a session on `reference` (replacing any other); returns at once."""
        self._conn.send(("open", (str(reference), trials, atol, rtol), {}))
        self._opens_unanswered += 1
        self._facts = self._failure = None
        self._handed = None

    def open_for(self, target: Target, settings: Settings) -> None:
        """`open` on `target`'s reference, with its trials and tolerances: the one place that
        says which session a check of `target` needs."""
        self.open(
            Path(target.reference or ""), trials=settings.trials, atol=target.atol, rtol=target.rtol
        )

    def facts(self) -> SessionFacts:
        """The open session's facts, once it is made; raises what making it raised (every
        time it is asked)."""
        self._read_opens()
        if self._failure is not None:
            raise self._failure
        if self._facts is None:
            raise RuntimeError("no session is open in the clean reference process")
        return self._facts

    def hand_over_ahead(self, abandon: Callable[[], bool] = lambda: False) -> None:
        """Where the session's sets were made ahead (a small problem), have them all handed over now
        in one exchange, not a round trip per trial; a spare does it before its request comes.
        Nothing where the session failed or makes its sets trial by trial, nor once `abandon()`
        is true."""
        while self._opens_unanswered and not self._conn.poll(0.02):
            if abandon():
                return
        try:
            facts = self.facts()
        except Exception:  # noqa: BLE001 - kept by facts(), raised again to the check
            return
        if facts.ahead_bytes and self._handed is None:
            self._handed = self._ask("hand_over_ahead")

    def _read_opens(self) -> None:
        """Reads the answers to the opens sent since the last read (each replaces the one
        before), keeping what the last one raised, if it failed, for facts() to raise."""
        while self._opens_unanswered:
            self._opens_unanswered -= 1
            try:
                self._facts, self._failure = self._answer(), None
            except CleanReferenceGone:
                raise
            except Exception as exc:  # noqa: BLE001 - the session's failure: facts() raises it
                self._facts, self._failure = None, exc

    def ask(self, question: str, reference: Path, *args: Any) -> Any:
        """The answer to `question` about `reference`, one of the `answers` this process was
        started with; needs no open session (a failed one's error is facts()'s to raise)."""
        if question not in self._answers:
            raise RuntimeError(
                f"the clean reference process was not started to answer {question!r}"
            )
        self._read_opens()
        self._conn.send((question, (str(reference), *args), {}))
        return self._answer()

    def _ask(self, question: str, *args: Any, **kwargs: Any) -> Any:
        self.facts()
        try:
            self._conn.send((question, args, kwargs))
        except OSError as exc:  # BrokenPipeError: the child's end is closed
            raise CleanReferenceGone(
                f"the clean reference process ended (exit code {self._process.exitcode})"
            ) from exc
        return self._answer()

    def _answer(self) -> Any:
        try:
            outcome, value = self._conn.recv()
        except (EOFError, OSError) as exc:
            raise CleanReferenceGone(
                f"the clean reference process ended (exit code {self._process.exitcode})"
            ) from exc
        if outcome == "error":
            raise value
        return value

    # --- the session's questions (harness/target/reference_session.py) -------------------

    def warm_up(self) -> SessionTrial:
        handed = self._handed.warm_up if self._handed is not None else None
        if handed is None:
            return self._ask("warm_up")
        assert self._handed is not None
        self._handed.warm_up = None  # given out once
        return handed

    def take(self, index: int) -> SessionTrial:
        handed = self._handed.trials.pop(index, None) if self._handed is not None else None
        return handed or self._ask("take", index)

    def scaled(self, seed: int, scale: float) -> SessionTrial:
        return self._ask("scaled", seed, scale)

    def decoy(self, seed: int) -> list:
        return self._ask("decoy", seed)

    def release(self, key: int) -> None:
        self._ask("release", key)

    def compare(
        self, key: int, actual: list, *, trial: int, seed: int, scale: float | None = None
    ) -> list[Mismatch]:
        """`actual` must be this process's own tensors (not ones received from the child)."""
        return self._ask("compare", key, actual, trial=trial, seed=seed, scale=scale)

    def trim(self) -> None:
        self._ask("trim")

    def end_session(self) -> None:
        """The check is over: the child frees the session's memory (its sets and its cache)."""
        self._handed = None
        self._ask("end_session")

    def close(self) -> None:
        """End the child (it also ends when the worker does)."""
        self._conn.close()
        self._process.join(timeout=5)
        if self._process.is_alive():
            self._process.kill()


def _start_context() -> ForkContext | SpawnContext:
    """`fork` where forking is sound and saves the child's torch import: torch imported, no
    CUDA context (CUDA can't be forked), one thread (a fork keeps only the caller's, and
    another's locks could be held). A worker forked by the zygote is that; one started by exec
    has imported no torch yet, or holds OpenBLAS's thread beside its own. Threads are counted
    first: torch may be half-imported by another (the prewarm thread), without `torch.cuda`."""
    torch = sys.modules.get("torch")
    if torch is None or _threads() > 1 or torch.cuda.is_initialized():
        return multiprocessing.get_context("spawn")
    return multiprocessing.get_context("fork")


def _threads() -> int:
    """This process's threads, native ones included where /proc tells."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _sendable(exc: BaseException) -> BaseException:
    """`exc`, or a RuntimeError saying what it was when it can't be pickled."""
    try:
        pickle.dumps(exc)
    except Exception:  # noqa: BLE001 - any pickling failure: said as text instead
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


class _QuestionReader(pickle.Unpickler):
    """Reads a question from the worker, where candidate code runs: plain values, torch's dtypes and
    sizes, and shared tensors; any other global is refused, since a plain pickle.loads would run
    whatever the candidate named in the one process where no candidate code may run."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SHARED_TENSOR_GLOBALS or (module == "torch" and _is_dtype(name)):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"the clean reference process refuses {module}.{name} from the candidate's "
            "process: a question may hold only plain values and tensors (candidate code tried "
            "to run code in the process where the expected outputs are made)"
        )


def _is_dtype(name: str) -> bool:
    import torch

    return isinstance(getattr(torch, name, None), torch.dtype)


def _importable(reference: str) -> None:
    """The reference's own modules import, as under `python reference.py`."""
    folder = str(Path(reference).parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)


def _serve(conn: Connection, device_name: str, answers: Mapping[str, Answer]) -> None:
    """The child's loop: one session at a time, one answer per question, until the worker's
    end of the pipe closes."""
    import torch

    from kernelblaster.harness.target.memory import return_cached
    from kernelblaster.harness.target.reference_session import ReferenceSession
    from kernelblaster.harness.target.reference_side import prepare_reference_side

    # The device is set and its context made by the first session (prepare_reference_side),
    # not here: a spare starts this process as soon as torch imports, but touches the GPU only
    # once the worker before it is done with it.
    device = torch.device(device_name)
    session: ReferenceSession | None = None
    while True:
        try:
            sent = conn.recv_bytes()
        except (EOFError, OSError):
            return
        try:
            question, args, kwargs = _QuestionReader(io.BytesIO(sent)).load()
        except Exception as exc:  # noqa: BLE001 - whatever it was, it gets its one answer
            conn.send(("error", _sendable(exc)))
            continue
        if device.type == "cuda" and session is not None:  # (no context before the first)
            # the sets the worker has let go of since, freed before this question makes more
            torch.cuda.ipc_collect()
            if question in _MAKES_SETS:
                return_cached(device, sets_per_trial=not session.plan.made_ahead)
        try:
            if question == "open":
                session = None  # its sets freed before the next session's are made
                path, trials, atol, rtol = args
                _importable(path)
                # A newer question can only be a newer session (or the worker's end: `ask`
                # reads every open's answer before it asks): this one then stops at its next
                # step, and its answer is an error nobody reads.
                side = prepare_reference_side(Path(path), device, trials=trials, abandon=conn.poll)
                if conn.poll():
                    raise RuntimeError("replaced by a newer session before it was made")
                session = ReferenceSession(side, atol=atol, rtol=rtol)
                del side
                if device.type == "cuda" and not session.plan.made_ahead:
                    # A large problem: the probe's blocks back to the device, not kept cached
                    # through a spare's wait for its request.
                    torch.cuda.empty_cache()
                answer: Any = session.facts
            elif question == "end_session":
                session = answer = None
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            elif question in _QUESTIONS and session is not None:
                answer = getattr(session, question)(*args, **kwargs)
            elif question in answers:
                _importable(args[0])
                answer = answers[question](device, *args, **kwargs)
            else:
                raise RuntimeError(f"the clean reference process can't answer {question!r} now")
            # The worker's tensors (outputs to compare) let go of before answering: the
            # worker frees them at once when it does, rather than at its next collection.
            args = kwargs = None
            conn.send(("ok", answer))
            answer = None
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the worker
            args = kwargs = None
            conn.send(("error", _sendable(exc)))
