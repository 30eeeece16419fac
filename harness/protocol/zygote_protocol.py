"""What the worker zygote and its client say to each other, a message per packet of one AF_UNIX
SOCK_SEQPACKET pair. Client → zygote: `Fork`, with the worker's descriptors as SCM_RIGHTS. Zygote
→ client: `Ready` once imported, `Forked` or `ForkFailed` per `Fork`, `Exited` per child reaped."""

from __future__ import annotations

import msgspec

ZYGOTE_FD_ENV = "KERNELBLASTER_ZYGOTE_FD"
ZYGOTE_MODULE = "kernelblaster.harness.worker.zygote"
MAX_PACKET = 1 << 20  # a Fork carries the worker's whole environment


class Fork(msgspec.Struct, tag="fork"):
    """Fork a worker: `env` is its whole environment (its PARENT_ENV becomes the zygote's
    pid), `cwd` its working directory, and each `fd_env` variable is set to the number the
    child gets for the passed descriptor at that index (0-2 are its stdin, stdout, stderr)."""

    id: int
    env: dict[str, str]
    cwd: str | None = None
    fd_env: dict[str, int] = {}


class Ready(msgspec.Struct, tag="ready"):
    """The imports are done. `refused`: why the zygote must not be forked from (no torch: a
    fork saves nothing; the GPU driver opened by an import: a forked CUDA is unusable)."""

    refused: str | None = None
    # Whether processes of its user may ptrace it or read its memory (prctl PR_SET_DUMPABLE
    # turned off on Linux; its children turn it back on)
    traceable: bool = True


class Forked(msgspec.Struct, tag="forked"):
    id: int
    pid: int


class ForkFailed(msgspec.Struct, tag="fork_failed"):
    id: int
    reason: str  # e.g. os.fork's error: the client starts that worker by exec


class Exited(msgspec.Struct, tag="exited"):
    pid: int
    returncode: int  # as subprocess reports it: negative for a signal


FromZygote = Ready | Forked | ForkFailed | Exited
