"""The worker zygote: prewarming spares of the default worker are forked from a process that has
imported torch already (issue 34: spares taken 2-4 s old in a rapid editing rhythm were still
importing it; issue 35: an optimize step's worker waited 3.1 s for its spare). Real processes
throughout: the zygote, the forked harness workers (asked to check a source that is not there,
which any host answers at once), and the clean
reference process forked by a worker that holds torch."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from bench.lsp_session import wait_until
from kernelblaster.harness.protocol import worker_client
from kernelblaster.harness.protocol.processes import worker_environment
from kernelblaster.harness.protocol.worker_client import (
    SpareWorkers,
    default_harness_command,
    describe_exit,
    run_harness,
)
from kernelblaster.harness.protocol.worker_protocol import WorkerRequest
from kernelblaster.harness.protocol.zygote_client import ForkedProcess, Zygote
from kernelblaster.harness.worker import zygote
from kernelblaster.settings import Settings
from tests.process_leaks import started_settled
from tests.tests_paths import EXAMPLES

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/maps").exists(), reason="reads /proc/<pid>/maps"
)


def _maps_torch(pid: int) -> bool:
    try:
        return "libtorch_cpu" in Path(f"/proc/{pid}/maps").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False


def _ended(pid: int) -> bool:
    """Gone, or a zombie that init has not reaped yet (an orphan of the killed zygote). A
    process sent SIGKILL ends only once it is scheduled again: wait for it."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def _zygote_ready(spares: SpareWorkers) -> None:
    """Start spares until the zygote has imported torch (the first spare, started with it, is
    exec'd: nothing waits for the zygote's import)."""
    await spares.ready(default_harness_command(), 0)
    await wait_until(lambda: spares._zygote.usable, timeout=60)


def _missing(folder: Path) -> WorkerRequest:
    """A request every worker answers at once, on any host: a check of a source not there."""
    return WorkerRequest(task="check", source=str(folder / "missing.cu"), settings=Settings())


async def test_spares_forked_by_the_zygote_hold_torch_from_their_first_instant(tmp_path):
    spares = SpareWorkers(least=1, most=1)
    try:
        await _zygote_ready(spares)
        first = spares.waiting()[0]
        assert not isinstance(first, ForkedProcess)  # started with the zygote, by exec
        await run_harness(_missing(tmp_path), Settings(), spares=spares)
        # the spare that replaced it: forked, and torch is in it before it ran a line
        [forked] = spares.waiting()
        assert isinstance(forked, ForkedProcess)
        assert _maps_torch(forked.pid)
        assert psutil.Process(forked.pid).ppid() == spares._zygote._process.pid
        assert spares._zygote.ready.traceable is False  # no worker may ptrace the zygote
        # and it answers as a worker does
        response = await run_harness(_missing(tmp_path), Settings(), spares=spares)
        assert response.error is not None and response.error.kind == "bad_target"
        assert "missing.cu" in response.error.message
        assert isinstance(spares.waiting()[0], ForkedProcess)
        zygote_pid = spares._zygote._process.pid
    finally:
        await spares.close()
    # closing the spares ends the zygote too (and its children, once the SIGKILL sent them
    # has been acted on: their dying takes a turn on the CPU)
    await wait_until(lambda: _ended(forked.pid) and _ended(zygote_pid), timeout=10)


async def test_a_forked_workers_exit_is_its_own_as_the_zygote_reaped_it(tmp_path):
    spares = SpareWorkers(least=2, most=2)
    try:
        await _zygote_ready(spares)
        await spares.ready(default_harness_command(), 0)
        forked = [p for p in spares.waiting() if isinstance(p, ForkedProcess)]
        while not forked:  # the exec'd ones are replaced by forked ones as they are taken
            await run_harness(_missing(tmp_path), Settings(), spares=spares)
            forked = [p for p in spares.waiting() if isinstance(p, ForkedProcess)]
        victim = forked[0]
        os.kill(victim.pid, signal.SIGSEGV)
        assert describe_exit(await asyncio.wait_for(victim.wait(), 20)) == "killed by SIGSEGV"
        assert victim.returncode == -signal.SIGSEGV
        # a malformed request: the worker itself says so and exits 2
        process = await spares.take(default_harness_command(), 0)
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(b'{"task": "nonsense"}')
        process.stdin.close()
        line = await asyncio.wait_for(process.stdout.readline(), 20)
        assert b"Malformed worker request" in line
        assert await asyncio.wait_for(process.wait(), 20) == 2
    finally:
        await spares.close()


async def test_when_the_zygote_dies_its_workers_end_and_spares_start_by_exec_again():
    spares = SpareWorkers(least=1, most=1)
    try:
        await _zygote_ready(spares)
        process = await spares.take(default_harness_command(), 0)
        await spares.ready(default_harness_command(), 0)
        [forked] = spares.waiting()
        assert isinstance(forked, ForkedProcess)
        os.kill(spares._zygote._process.pid, signal.SIGKILL)
        assert await asyncio.wait_for(forked.wait(), 20) == -signal.SIGKILL
        assert not spares._zygote.usable
        worker_client.kill_worker(process)
        await process.wait()
        await spares.ready(default_harness_command(), 0)
        [replacement] = spares.waiting()
        assert not isinstance(replacement, ForkedProcess)
        assert replacement.returncode is None
    finally:
        await spares.close()
    await wait_until(lambda: _ended(forked.pid), timeout=10)  # killed with its zygote


async def test_after_two_forked_spares_die_untaken_spares_start_by_exec(caplog):
    """A forked spare that dies before any request has run no candidate code: the forked
    workers are broken on this host. The second such death turns the zygote off (the zygote
    itself lives on, and is closed with the spares)."""
    spares = SpareWorkers(least=1, most=1)
    try:
        await _zygote_ready(spares)
        process = await spares.take(default_harness_command(), 0)  # the exec'd first spare
        worker_client.kill_worker(process)
        await process.wait()
        killed = []
        for _ in range(worker_client.FORKED_DEATHS_TO_GIVE_UP):
            assert spares.forking
            await spares.ready(default_harness_command(), 0)
            [forked] = spares.waiting()
            assert isinstance(forked, ForkedProcess)
            os.kill(forked.pid, signal.SIGABRT)
            await asyncio.wait_for(forked.wait(), 20)
            killed.append(forked.pid)
        await spares.ready(default_harness_command(), 0)  # finds the dead one, then starts one
        [replacement] = spares.waiting()
        assert not isinstance(replacement, ForkedProcess) and replacement.returncode is None
        assert not spares.forking and spares._zygote.usable
        [warning] = [r.getMessage() for r in caplog.records if "died before any" in r.getMessage()]
        assert all(f"{pid}: killed by SIGABRT" in warning for pid in killed), warning
        assert "started by exec from now on" in warning
    finally:
        await spares.close()


async def test_a_client_gone_with_answers_unread_ends_the_zygote_quietly():
    """The language server closing its end while the zygote's Exited is still unread (its
    shutdown, at any moment): the zygote's next read is a reset connection, which ends it with
    0 instead of a traceback in the server's log and exit status 1."""
    zygote = Zygote()
    try:
        await zygote.start()
        await wait_until(lambda: zygote.usable, timeout=60)
        process = await zygote.fork(worker_environment(), {}, 2**16)
        assert zygote._sock is not None
        asyncio.get_running_loop().remove_reader(zygote._sock.fileno())  # nothing read from now
        worker_client.kill_worker(process)
        await wait_until(lambda: _ended(process.pid), timeout=10)  # reaped: its Exited sent
        await asyncio.sleep(0.2)
        zygote._sock.close()
        zygote._sock = None
        assert zygote._process is not None
        assert await asyncio.wait_for(zygote._process.wait(), 20) == 0
    finally:
        await zygote.close()


async def test_a_changed_environment_gets_a_zygote_that_imported_in_it(monkeypatch):
    spares = SpareWorkers(least=1, most=1)
    try:
        await _zygote_ready(spares)
        old = spares._zygote
        monkeypatch.setenv("TORCH_SHOW_CPP_STACKTRACES", "1")  # read by torch at import
        assert old.outdated and not old.usable
        process = await spares.take(default_harness_command(), 0)
        worker_client.kill_worker(process)
        await process.wait()
        await spares.ready(default_harness_command(), 0)
        # that spare by exec, beside a new zygote importing in the new environment
        assert not isinstance(spares.waiting()[0], ForkedProcess)
        assert spares._retired == [old] and spares._zygote is not old
        await _zygote_ready(spares)
        process = await spares.take(default_harness_command(), 0)
        worker_client.kill_worker(process)
        await process.wait()
        await spares.ready(default_harness_command(), 0)
        [forked] = spares.waiting()
        assert isinstance(forked, ForkedProcess)
        assert psutil.Process(forked.pid).ppid() == spares._zygote._process.pid
        old_pid = old._process.pid
    finally:
        await spares.close()
    await wait_until(lambda: _ended(old_pid), timeout=10)


def _forked_children(zygote: Zygote) -> list[psutil.Process]:
    return [
        child
        for child in psutil.Process(zygote._process.pid).children()
        if child.status() != psutil.STATUS_ZOMBIE
    ]


async def test_one_zygote_however_many_start_it_at_once_and_a_cancelled_fork_leaves_nothing():
    zygote = Zygote()
    try:
        await asyncio.gather(zygote.start(), zygote.start(), zygote.start())
        started_settled()  # its command line shown
        zygotes = [
            child
            for child in psutil.Process().children()
            if "kernelblaster.harness.worker.zygote" in child.cmdline()
        ]
        assert [z.pid for z in zygotes] == [zygote._process.pid]
        await wait_until(lambda: zygote.usable, timeout=60)
        descriptors = len(os.listdir("/proc/self/fd"))
        forking = asyncio.ensure_future(zygote.fork(worker_environment(), {}, 2**16))
        await asyncio.sleep(0)  # the Fork sent; its answer not read yet
        forking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await forking
        # The zygote serves the next; and as it answers in order, the cancelled fork's answer
        # has been read by then, the child it named killed (looked for before, that child
        # could be still to come)
        process = await zygote.fork(worker_environment(), {}, 2**16)
        assert zygote.usable
        worker_client.kill_worker(process)
        assert await asyncio.wait_for(process.wait(), 20) == -signal.SIGKILL
        await wait_until(lambda: not _forked_children(zygote) and not zygote._exits, timeout=10)
        # none of the cancelled fork's pipes left open (the next one's close as its output ends)
        await wait_until(lambda: len(os.listdir("/proc/self/fd")) == descriptors, timeout=10)
    finally:
        await zygote.close()


async def test_a_fork_cancelled_as_its_answer_comes_is_killed():
    """The caller gives up in the very turn that the zygote's Forked is read: the child it no
    longer waits for is killed then, not left to run until it reads its closed pipes."""
    zygote = Zygote()
    read = zygote._read
    forking: asyncio.Future[ForkedProcess] | None = None
    exits: list[asyncio.Future[int]] = []

    def read_then_cancel() -> None:
        read()
        if forking is not None and not forking.done() and not zygote._forking and zygote._exits:
            exits.extend(zygote._exits.values())  # the child's, before its Exited pops it
            forking.cancel()

    zygote._read = read_then_cancel  # type: ignore[method-assign]  # before start adds it
    try:
        await zygote.start()
        await wait_until(lambda: zygote.usable, timeout=60)
        forking = asyncio.ensure_future(zygote.fork(worker_environment(), {}, 2**16))
        with pytest.raises(asyncio.CancelledError):
            await forking
        (exited,) = exits
        assert await asyncio.wait_for(exited, 20) == -signal.SIGKILL
        await wait_until(lambda: not _forked_children(zygote), timeout=10)
    finally:
        await zygote.close()


_CLEAN_CHILD = textwrap.dedent(
    """
    import json, os, sys, threading, time
    from pathlib import Path
    import psutil
    import torch
    from kernelblaster.harness.target.clean_reference import CleanReference

    def start_clean():
        clean = CleanReference("cpu")
        clean.open(Path(sys.argv[1]), trials=3, atol=None, rtol=None)
        facts = clean.facts()
        child = psutil.Process(clean.pid)
        print(json.dumps({
            "forked": child.cmdline() == psutil.Process().cmdline(),
            "trials": facts.trials,
        }), flush=True)
        clean.close()

    if sys.argv[2] == "zygote-like":  # as a worker forked by the zygote: one thread left
        pid = os.fork()
        if pid == 0:
            start_clean()
            os._exit(0)
        os.waitpid(pid, 0)
    else:  # a thread of ours beside (besides OpenBLAS's, which the fork above drops)
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
        start_clean()
    """
)


@pytest.mark.parametrize(("how", "forked"), [("zygote-like", True), ("thread", False)])
def test_the_clean_process_is_forked_only_from_a_one_thread_process_holding_torch(
    tmp_path, how, forked
):
    """A worker forked by the zygote holds torch and runs one thread when it starts its clean
    process: that child is forked (no torch import of its own) and answers a session. With
    another thread running, a fork could inherit a lock it holds: spawned instead."""
    reference = tmp_path / "relu.py"
    reference.write_bytes((EXAMPLES / "relu.py").read_bytes())
    done = subprocess.run(
        [sys.executable, "-c", _CLEAN_CHILD, str(reference), how],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith(f'{{"forked": {str(forked).lower()}, "trials": 3}}')


async def test_a_zygote_that_could_not_import_torch_forks_nothing(tmp_path, monkeypatch):
    """A zygote without torch would fork workers that import it all the same: it refuses, says
    why, and spares start by exec (here torch is hidden by a module that is not there)."""
    hidden = tmp_path / "hidden"
    (hidden / "torch").mkdir(parents=True)
    (hidden / "torch" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n"
    )
    monkeypatch.setenv("PYTHONPATH", f"{hidden}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    spares = SpareWorkers(least=1, most=1)
    try:
        await spares.ready(default_harness_command(), 0)
        zygote = spares._zygote
        await wait_until(lambda: zygote.ready is not None, timeout=60)
        assert zygote.ready is not None and zygote.ready.refused == "no torch to import ahead"
        assert not zygote.usable
        process = await spares.take(default_harness_command(), 0)
        worker_client.kill_worker(process)
        await process.wait()
        await spares.ready(default_harness_command(), 0)
        assert not isinstance(spares.waiting()[0], ForkedProcess)
    finally:
        await spares.close()


def test_the_driver_is_seen_open_only_through_an_nvidia_device_file(tmp_path):
    """cuInit and nvmlInit open /dev/nvidia*; a CUDA library only loaded opens nothing."""
    fds = tmp_path / "fd"
    fds.mkdir()
    (fds / "0").symlink_to("/dev/null")
    (fds / "3").symlink_to("/usr/lib/x86_64-linux-gnu/libcuda.so.1")
    assert zygote._driver_opened(fds) is None
    (fds / "7").symlink_to("/dev/nvidiactl")
    assert zygote._driver_opened(fds) == "/dev/nvidiactl"
    assert zygote._driver_opened(tmp_path / "no-such-folder") is None


async def test_a_forked_spare_counts_as_warm_sooner_than_an_execd_one():
    """Which spare a request takes first: a warm one. A forked spare's warm-up is its CUDA
    context and its reference side, an exec'd one's a torch import too."""
    exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    forked = ForkedProcess(1, None, None, None, exited)  # type: ignore[arg-type]
    execd = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await execd.wait()
    now = time.monotonic()
    three_s_old = now - 3.0
    assert worker_client.FORKED_WARM_UP_S < 3.0 < worker_client.WARM_UP_S
    assert not worker_client._Spare(forked, {}, three_s_old).young(now)
    assert worker_client._Spare(execd, {}, three_s_old).young(now)


def test_a_process_is_made_untraceable_and_traceable_again():
    """The zygote's guard (its workers may not ptrace it) and its children's release of it."""
    script = (
        "from kernelblaster.harness.worker import zygote as z; "
        "z._set_dumpable(False); a = z.dumpable(); z._set_dumpable(True); print(a, z.dumpable())"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == (["False", "True"] if sys.platform == "linux" else ["True"] * 2)
