"""`init`'s records: an InitRequest to the agents worker, InitProgress lines back, then one
InitResult. Torch-free and LLM-free, so the language server can import it."""

from __future__ import annotations

import msgspec

from kernelblaster.harness.protocol.records import CheckResult
from kernelblaster.settings import Settings


class InitRequest(msgspec.Struct, kw_only=True, tag="init"):
    reference: str  # absolute path of the problem .py
    attempts: int | None = None  # LLM replies to try; None: settings.init_attempts
    settings: Settings = msgspec.field(default_factory=Settings)


class InitProgress(msgspec.Struct, kw_only=True, tag="progress"):
    attempt: int  # the reply it is about, 1-based; 0 before the first
    attempts: int
    message: str  # e.g. "building and verifying reply 2", "reply 1 rejected: compile_error: ..."


class InitResult(msgspec.Struct, kw_only=True, tag="result"):
    reference: str  # the problem .py
    target: str  # the .cu beside it
    source: str | None = None  # the verified CUDA file; None when there is none
    check: CheckResult | None = None  # the verifying check (times, baselines, warnings)
    attempts: int = 0  # LLM replies
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated_tokens: bool = False  # the endpoint sent no usage: characters / 4
    failures: list[str] = []  # one line per rejected reply, in order
    error: str | None = None  # why there is no verified kernel, with the last error
    # What stopped it: "attempts" (budget spent), "llm" (the endpoint failed: `llm_error`), or the
    # harness's error kind where the machine or the problem is at fault (no_gpu, bad_reference).
    error_kind: str | None = None
    llm_error: str | None = None
    written: str | None = None  # where the verified file was saved, by whoever saved it

    @property
    def verified(self) -> bool:
        return self.source is not None

    @property
    def usage(self) -> str:
        """ "2 replies, 300 prompt + 150 completion tokens" """
        replies = f"{self.attempts} repl{'y' if self.attempts == 1 else 'ies'}"
        estimated = " (estimated)" if self.estimated_tokens else ""
        return (
            f"{replies}, {self.prompt_tokens} prompt + {self.completion_tokens} completion "
            f"tokens{estimated}"
        )


InitMessage = InitProgress | InitResult
