"""The client of the worker zygote (harness/worker/zygote.py; messages:
harness/protocol/zygote_protocol.py): harness workers forked from a process that has imported
torch already, handled like the processes asyncio starts (`ForkedProcess`).

Used by SpareWorkers (harness/protocol/worker_client.py) for the default worker command only:
a configured `workerCommand` (a container, a remote shell) is started as given. Until the
zygote has imported torch, or where the environment changed since it started (what torch
read at import would differ), workers are started as before, by exec."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys

import msgspec

from kernelblaster.harness.protocol.processes import kill_worker, worker_environment
from kernelblaster.harness.protocol.zygote_protocol import (
    MAX_PACKET,
    ZYGOTE_FD_ENV,
    ZYGOTE_MODULE,
    Exited,
    Fork,
    Forked,
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
        self._process: asyncio.subprocess.Process | None = None
        self._sock: socket.socket | None = None
        self._env: dict[str, str] = {}
        self.ready: Ready | None = None  # what it said once its imports were done
        self._next_id = 0
        self._forking: dict[int, asyncio.Future[int]] = {}  # Fork id -> the child's pid
        self._exits: dict[int, asyncio.Future[int]] = {}  # pid -> its returncode

    @property
    def started(self) -> bool:
        return self._process is not None

    @property
    def usable(self) -> bool:
        """Ready (torch imported), alive, and started in the environment workers get now."""
        return (
            self.ready is not None
            and self.ready.refused is None
            and self._sock is not None
            and self._process is not None
            and self._process.returncode is None
            and self._env == dict(os.environ)
        )

    async def start(self) -> None:
        """Start the zygote; it is `usable` once it has said it is ready."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._env = dict(os.environ)
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
        """A worker forked with environment `env` plus, for each of `fds`, the variable naming
        the descriptor the child gets for that one of ours (the caller keeps its copy);
        `limit`: its pipes' line limit, as asyncio.create_subprocess_exec's."""
        assert self._sock is not None and self.usable
        loop = asyncio.get_running_loop()
        stdin_read, stdin_write = os.pipe()
        stdout_read, stdout_write = os.pipe()
        stderr_read, stderr_write = os.pipe()
        theirs = [stdin_read, stdout_write, stderr_write, *fds.values()]
        self._next_id += 1
        request = Fork(
            id=self._next_id,
            env=env,
            fd_env={name: 3 + index for index, name in enumerate(fds)},
        )
        forked: asyncio.Future[int] = loop.create_future()
        self._forking[request.id] = forked
        try:
            socket.send_fds(self._sock, [_encoder.encode(request)], theirs)
        except OSError:
            del self._forking[request.id]
            for fd in (stdin_write, stdout_read, stderr_read):
                os.close(fd)
            raise
        finally:
            for fd in (stdin_read, stdout_write, stderr_write):
                os.close(fd)
        pid = await forked
        exited = self._exits[pid]
        stdin = await _writer(stdin_write)
        stdout = await _reader(stdout_read, limit)
        return ForkedProcess(pid, stdin, stdout, await _reader(stderr_read, limit), exited)

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
            self._forking.pop(message.id).set_result(message.pid)
        elif isinstance(message, Exited):
            self._exits.pop(message.pid).set_result(message.returncode)

    def _gone(self) -> None:
        """The zygote ended: its children end with it (exit_with_parent); their exits can no
        longer be reported, so they are killed now and reported killed."""
        assert self._sock is not None
        asyncio.get_running_loop().remove_reader(self._sock.fileno())
        self._sock.close()
        self._sock = None
        for pid, exited in self._exits.items():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if not exited.done():
                exited.set_result(-signal.SIGKILL)
        self._exits.clear()
        for forking in self._forking.values():
            if not forking.done():
                forking.set_exception(OSError("the worker zygote ended"))
        self._forking.clear()

    async def close(self) -> None:
        """End the zygote (its children end with it)."""
        if self._sock is not None:
            self._gone()
        if self._process is not None:
            kill_worker(self._process)
            await self._process.wait()


async def _reader(fd: int, limit: int) -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    return reader


async def _writer(fd: int) -> asyncio.StreamWriter:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.connect_write_pipe(
        lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()),
        os.fdopen(fd, "wb", buffering=0),
    )
    return asyncio.StreamWriter(transport, protocol, None, loop)
