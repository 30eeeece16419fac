"""`python -m kernelblaster.harness.worker.zygote`: the worker zygote. It imports torch and what a
worker imports past its build, then forks a harness worker per request, which runs serve.main()
on the descriptors and environment it was sent.

Forking is sound because nothing but imports ran here: no CUDA context, no thread of its own, no
candidate code. A child leads its own session and ends with this process, which ends with its
client. A failed fork is answered ForkFailed, and the client execs that worker."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import selectors
import signal
import socket
import sys
import traceback
import warnings
from pathlib import Path

import msgspec

from kernelblaster.harness.protocol.processes import PARENT_ENV
from kernelblaster.harness.protocol.zygote_protocol import (
    MAX_PACKET,
    ZYGOTE_FD_ENV,
    Exited,
    Fork,
    Forked,
    ForkFailed,
    Ready,
)

_MAX_FDS = 16
_PARENT_POLL_S = 0.5
_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Fork)


def _preload() -> str | None:
    """The worker's imports, up to those past its build (serve.import_past_build); why forking
    from this process is refused after them, if it is."""
    from kernelblaster.harness.worker.serve import import_past_build

    try:
        if not import_past_build():
            return "no torch to import ahead"
    except ModuleNotFoundError as exc:  # each exec'd worker then reports it (dependency_missing)
        return f"a module the worker needs is missing: {exc.name}"
    if driver := _driver_opened(Path("/proc/self/fd")):
        # An import asked the driver something (a device count, say: CUDA or NVML initialized,
        # which opens its device files): a child's CUDA calls could then fail.
        return f"an import opened the GPU driver ({driver}): a fork would inherit it"
    return None


def _driver_opened(fd_folder: Path) -> str | None:
    """The NVIDIA device file this process holds open, if any (`fd_folder`: /proc/self/fd). A
    CUDA library merely loaded opens none; cuInit and nvmlInit do."""
    try:
        descriptors = list(fd_folder.iterdir())
    except OSError:  # no /proc: torch's own bad-fork error remains
        return None
    for descriptor in descriptors:
        with contextlib.suppress(OSError):  # closed meanwhile (the listing's own)
            if (link := os.readlink(descriptor)).startswith("/dev/nvidia"):
                return link
    return None


def _run_worker(request: Fork, fds: list[int], zygote: int) -> int:
    """In the child: become the worker `request` describes, and run it. `zygote`: its parent's
    pid, taken before the fork (read here, it could already be init's)."""
    os.setsid()  # its own process group, killed as one (harness/protocol/processes.py)
    _set_dumpable(True)  # a worker as an exec'd one is: its user's tools may attach to it
    for number, fd in enumerate(fds[:3]):  # received above 2: the zygote's 0-2 are open
        os.dup2(fd, number)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request.env)
    os.environ[PARENT_ENV] = str(zygote)
    for name, index in request.fd_env.items():
        os.environ[name] = str(fds[index])
    if request.cwd is not None:
        os.chdir(request.cwd)
    from kernelblaster.harness.worker.serve import main

    return main()


_PR_GET_DUMPABLE, _PR_SET_DUMPABLE = 3, 4  # prctl(2)


def _set_dumpable(dumpable: bool) -> None:
    """prctl(PR_SET_DUMPABLE): whether processes of the same user may ptrace this one or read
    its memory through /proc (Linux; elsewhere nothing)."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, int(dumpable), 0, 0, 0)


def dumpable() -> bool:
    """prctl(PR_GET_DUMPABLE) of this process (True off Linux, where nothing is set)."""
    if sys.platform != "linux":
        return True
    return ctypes.CDLL(None, use_errno=True).prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0) == 1


def _exit_code(exc: SystemExit) -> int:
    """What the interpreter would exit with for `exc`: 0 for None, the code, or 1 after
    printing a message."""
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)
    return 1


class _Server:
    """The zygote's loop: its socket, the wake-up pipe its SIGCHLD handler writes, and the
    selector over both; a child closes all of them before it becomes a worker."""

    def __init__(self, sock: socket.socket, parent: int) -> None:
        self.sock, self.parent = sock, parent
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_write, False)
        os.set_blocking(self.wake_read, False)
        signal.set_wakeup_fd(self.wake_write)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler: the wake-up fd hears it
        self.selector = selectors.DefaultSelector()
        self.selector.register(sock, selectors.EVENT_READ, "socket")
        self.selector.register(self.wake_read, selectors.EVENT_READ, "child")

    def serve(self) -> None:
        """Fork workers for the client at the other end of the socket until it closes it or
        its process (`parent`) is gone. No thread watches the parent, as exit_with_parent's
        does in a worker: a fork must find this process with no thread of ours."""
        self.sock.send(_encoder.encode(Ready(refused=_preload(), traceable=dumpable())))
        while os.getppid() == self.parent:
            for key, _ in self.selector.select(timeout=_PARENT_POLL_S):
                if key.data == "child":
                    self._reap()
                    continue
                message, fds, _, _ = socket.recv_fds(self.sock, MAX_PACKET, _MAX_FDS)
                if not message:  # the client closed its end: its workers end with this process
                    return
                request = _decoder.decode(message)
                try:
                    answer: Forked | ForkFailed = Forked(
                        id=request.id, pid=self._fork(request, fds)
                    )
                except OSError as exc:  # EAGAIN from a pid limit, ENOMEM: that worker by exec
                    for fd in fds:
                        os.close(fd)
                    answer = ForkFailed(id=request.id, reason=f"fork failed: {exc}")
                self.sock.send(_encoder.encode(answer))

    def _fork(self, request: Fork, fds: list[int]) -> int:
        """Fork the worker; the parent closes its copies of `fds` and returns the child's pid."""
        zygote = os.getpid()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                self.selector.close()
                for fd in (self.sock.fileno(), self.wake_read, self.wake_write):
                    os.close(fd)
                code = _run_worker(request, fds, zygote)
            except SystemExit as exc:
                code = _exit_code(exc)
            except BaseException:  # noqa: BLE001 - a child must never return into the zygote's loop
                traceback.print_exc()
            finally:
                # What the interpreter's exit would do (the clean reference process ended,
                # logging flushed), without unwinding into the zygote's frames above.
                atexit._run_exitfuncs()
                for stream in (sys.stdout, sys.stderr):
                    with contextlib.suppress(OSError, ValueError):  # its reader gone
                        stream.flush()
                os._exit(code)
        for fd in fds:
            os.close(fd)
        return pid

    def _reap(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.wake_read, 512):
                pass
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            exited = Exited(pid=pid, returncode=os.waitstatus_to_exitcode(status))
            self.sock.send(_encoder.encode(exited))


def main() -> int:
    parent = int(os.environ.get(PARENT_ENV, os.getppid()))
    told = os.environ.pop(ZYGOTE_FD_ENV, "")
    if not told.isdigit():
        print(f"{ZYGOTE_FD_ENV} names no socket: started by hand?", file=sys.stderr)
        return 2
    # Out of reach of the workers' ptrace and /proc/<pid>/mem (where the system would allow
    # them between a user's processes): a change here would reach every later worker.
    _set_dumpable(False)
    # The one extra thread a torch import leaves (OpenBLAS's server) handles fork itself
    # (pthread_atfork); Python 3.12's warning about forking a threaded process is not for it.
    warnings.filterwarnings("ignore", r".*multi-threaded, use of fork\(\)", DeprecationWarning)
    # A broken pipe or a reset connection (the client closed its end with our answers unread):
    # the client is gone, and so is the need for this process; nothing to print.
    with socket.socket(fileno=int(told)) as sock, contextlib.suppress(ConnectionError):
        _Server(sock, parent).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
