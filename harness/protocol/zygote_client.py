"""The client of the worker zygote (harness/worker/zygote.py): harness workers forked from a process
that has imported torch, handled like asyncio's processes (`ForkedProcess`).

Only for the default worker command; a configured `workerCommand` is started as given. Wherever the
zygote is not ready, refused, failed to fork, or predates an environment change, workers are started
by exec."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys

import msgspec

from kernelblaster.harness.protocol.processes import (
    kill_worker,
    kill_worker_pid,
    worker_environment,
)
from kernelblaster.harness.protocol.zygote_protocol import (
    MAX_PACKET,
    ZYGOTE_FD_ENV,
    ZYGOTE_MODULE,
    Exited,
    Fork,
    Forked,
    ForkFailed,
    FromZygote,
    Ready,
)

_log = logging.getLogger(__name__)
_decoder = msgspec.json.Decoder(FromZygote)
_encoder = msgspec.json.Encoder()


class ForkedProcess:
    """A worker the zygote forked: its pipes, and its exit as the zygote reported it."""

    def __init__(
        self,
        pid: int,
        stdin: asyncio.StreamWriter,
        stdout: asyncio.StreamReader,
        stderr: asyncio.StreamReader,
        exited: asyncio.Future[int],
    ) -> None:
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self._exited = exited

    @property
    def returncode(self) -> int | None:
        return self._exited.result() if self._exited.done() else None

    async def wait(self) -> int:
        code = await asyncio.shield(self._exited)
        self.stdin.close()  # as asyncio's own processes do on exit: its reader is gone
        return code


class Zygote:
    """One zygote process, started by `start`, forking workers on `fork` once `usable`.
    Used from one event loop."""

    def __init__(self) -> None:
        self._starting: asyncio.Future[None] | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._sock: socket.socket | None = None
        self._env: dict[str, str] = {}
        self.ready: Ready | None = None  # what it said once its imports were done
        self._stalled = False  # a fork went unanswered: nothing more is asked of it
        self._next_id = 0
        self._forking: dict[int, asyncio.Future[int]] = {}  # Fork id -> the child's pid
        self._exits: dict[int, asyncio.Future[int]] = {}  # pid -> its returncode

    @property
    def started(self) -> bool:
        return self._starting is not None

    @property
    def outdated(self) -> bool:
        """Started in another environment than the one workers get now: what torch read at
        its import could differ."""
        return self.started and self._env != dict(os.environ)

    @property
    def usable(self) -> bool:
        """Ready (torch imported, nothing refused), alive, answering, and not `outdated`."""
        return (
            self.ready is not None
            and self.ready.refused is None
            and not self._stalled
            and self._sock is not None
            and self._process is not None
            and self._process.returncode is None
            and not self.outdated
        )

    def begin(self) -> None:
        """Start the zygote, once however many callers ask, without waiting for its process."""
        if self._starting is None:
            self._env = dict(os.environ)
            self._starting = asyncio.ensure_future(self._start())

    async def start(self) -> None:
        """`begin`, and wait for its process; it is `usable` once it has said it is ready."""
        self.begin()
        assert self._starting is not None
        await asyncio.shield(self._starting)

    async def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                ZYGOTE_MODULE,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,  # its children's go where they are sent
                env=worker_environment({ZYGOTE_FD_ENV: str(theirs.fileno())}),
                start_new_session=True,
                pass_fds=(theirs.fileno(),),
            )
        except OSError as exc:
            ours.close()
            _log.warning("no worker zygote (%s): workers start by exec", exc)
            return
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock = ours
        asyncio.get_running_loop().add_reader(ours.fileno(), self._read)

    async def fork(self, env: dict[str, str], fds: dict[str, int], limit: int) -> ForkedProcess:
        """A worker forked with environment `env` plus, for each of `fds`, a variable naming the
        descriptor the child gets for it; `limit`: its pipes' line limit. OSError where the zygote
        could not fork (the caller then execs); a fork whose caller is cancelled or fails is killed,
        leaving nothing open here."""
        assert self._sock is not None and self.usable
        stdin_read, stdin_write = os.pipe()
        stdout_read, stdout_write = os.pipe()
        stderr_read, stderr_write = os.pipe()
        ours = [stdin_write, stdout_read, stderr_read]
        self._next_id += 1
        request = Fork(
            id=self._next_id,
            env=env,
            cwd=os.getcwd(),
            fd_env={name: 3 + index for index, name in enumerate(fds)},
        )
        forked: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._forking[request.id] = forked
        pid: int | None = None
        try:
            try:
                socket.send_fds(
                    self._sock,
                    [_encoder.encode(request)],
                    [stdin_read, stdout_write, stderr_write, *fds.values()],
                )
            finally:
                for fd in (stdin_read, stdout_write, stderr_write):
                    os.close(fd)
            try:
                # not wait_for: Python 3.11's hands back an answer that came with a
                # cancellation, 3.12's raises; this raises on both (the child killed below)
                async with asyncio.timeout(_FORK_TIMEOUT_S):
                    pid = await asyncio.shield(forked)
            except TimeoutError as exc:
                self._stalled = True
                raise OSError(f"the worker zygote did not fork in {_FORK_TIMEOUT_S:.0f} s") from exc
            return await _wrapped(pid, ours, self._exits[pid], limit)
        except BaseException:
            if pid is None:  # a Forked still to come finds no one waiting: _read kills it
                self._forking.pop(request.id, None)
                for fd in ours:
                    os.close(fd)
                if forked.done() and not forked.cancelled() and forked.exception() is None:
                    # it came, but this caller was cancelled before it resumed to hear it
                    kill_worker_pid(forked.result())
            else:
                kill_worker_pid(pid)  # _wrapped closed what it did not hand over
            raise

    def _read(self) -> None:
        assert self._sock is not None
        try:
            packet = self._sock.recv(MAX_PACKET)
        except BlockingIOError:
            return
        except OSError:
            packet = b""
        if not packet:
            self._gone()
            return
        message = _decoder.decode(packet)
        if isinstance(message, Ready):
            self.ready = message
            if message.refused is not None:
                _log.info("workers start by exec, not from the zygote: %s", message.refused)
        elif isinstance(message, Forked):
            # before fork() resumes: the child's Exited may be read first
            self._exits[message.pid] = asyncio.get_running_loop().create_future()
            waiting = self._forking.pop(message.id, None)
            if waiting is None:  # its caller gave up (cancelled, timed out): it has no use
                kill_worker_pid(message.pid)
            else:
                waiting.set_result(message.pid)
        elif isinstance(message, ForkFailed):
            waiting = self._forking.pop(message.id, None)
            if waiting is not None:
                waiting.set_exception(OSError(message.reason))
        elif isinstance(message, Exited) and (exited := self._exits.pop(message.pid, None)):
            exited.set_result(message.returncode)

    def _gone(self) -> None:
        """The zygote ended: its children end with it (exit_with_parent); their exits can no
        longer be reported, so they are killed now and reported killed."""
        assert self._sock is not None
        asyncio.get_running_loop().remove_reader(self._sock.fileno())
        self._sock.close()
        self._sock = None
        for pid, exited in self._exits.items():
            kill_worker_pid(pid)
            if not exited.done():
                exited.set_result(-signal.SIGKILL)
        self._exits.clear()
        for forking in self._forking.values():
            if not forking.done():
                forking.set_exception(OSError("the worker zygote ended"))
        self._forking.clear()

    async def close(self) -> None:
        """End the zygote (its children end with it)."""
        if self._starting is not None:
            await asyncio.shield(self._starting)
        if self._sock is not None:
            self._gone()
        if self._process is not None:
            kill_worker(self._process)
            await self._process.wait()


# A fork takes milliseconds once the zygote is ready (nothing is asked of it before)
_FORK_TIMEOUT_S = 10.0


async def _wrapped(
    pid: int, fds: list[int], exited: asyncio.Future[int], limit: int
) -> ForkedProcess:
    """The ForkedProcess over our ends of its pipes; on failure, whatever was not handed to a
    transport is closed, and so is every transport made."""
    stdin_fd, stdout_fd, stderr_fd = fds
    left = list(fds)
    made: list[asyncio.BaseTransport] = []
    try:
        stdin = await _writer(stdin_fd)
        left.remove(stdin_fd)
        made.append(stdin.transport)
        stdout, transport = await _reader(stdout_fd, limit)
        left.remove(stdout_fd)
        made.append(transport)
        stderr, transport = await _reader(stderr_fd, limit)
        left.remove(stderr_fd)
        made.append(transport)
    except BaseException:
        for transport in made:
            transport.close()
        for fd in left:
            os.close(fd)
        raise
    return ForkedProcess(pid, stdin, stdout, stderr, exited)


async def _reader(fd: int, limit: int) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    return reader, transport


async def _writer(fd: int) -> asyncio.StreamWriter:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.connect_write_pipe(
        lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()),
        os.fdopen(fd, "wb", buffering=0),
    )
    return asyncio.StreamWriter(transport, protocol, None, loop)
