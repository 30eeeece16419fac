"""The clean reference process is started at once, beside the worker's own start, and its
session is opened before the worker's torch import: at open (a fresh worker, no spare ready)
the expected outputs are then ready when the worker's side is, not seconds after it (issue 34,
relu's cold open on an H100: 4.3 s waited for the clean process started after the torch
import). Real processes: the worker and its spawned clean child, observed from outside
(psutil, /proc/<pid>/maps), and a real clean process on the CPU for the session's order."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from kernelblaster.harness.check import check
from kernelblaster.harness.target.clean_reference import CleanReference
from kernelblaster.harness.target.targets import Target
from kernelblaster.harness.worker import serve
from kernelblaster.settings import Settings
from tests.tests_paths import EXAMPLES

HOST_WORKER = Path(__file__).resolve().parents[1] / "gpu_host_worker.py"


def _loaded_torch(pid: int) -> bool:
    """Whether process `pid` has torch's C++ library mapped (its `import torch` got that far)."""
    try:
        return "libtorch_cpu" in Path(f"/proc/{pid}/maps").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:  # gone, or not yet readable
        return []


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/<pid>/maps")
@pytest.mark.parametrize(
    "worker_command",
    [
        pytest.param([str(HOST_WORKER)], id="gpu_present_said"),
        # on a GPU host, the real worker as the server starts it: its own gpu_present()
        pytest.param(["-m", "kernelblaster.harness.worker"], id="real", marks=pytest.mark.gpu),
    ],
)
def test_a_spare_starts_its_clean_process_before_its_own_torch_import(tmp_path, worker_command):
    worker = subprocess.Popen(
        [sys.executable, *worker_command, str(tmp_path)],
        stdin=subprocess.PIPE,  # no request yet: a spare waiting for one
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "KERNELBLASTER_PREWARM": "0"},
    )
    try:
        process = psutil.Process(worker.pid)
        child: psutil.Process | None = None
        worker_had_torch_then = None
        deadline = time.monotonic() + 60
        while child is None and time.monotonic() < deadline:
            had_torch = _loaded_torch(worker.pid)  # read before the children: no false pass
            # (multiprocessing's resource tracker is a child too: not the clean process)
            spawned = [c for c in process.children() if "spawn_main" in " ".join(_cmdline(c))]
            if spawned:
                child, worker_had_torch_then = spawned[0], had_torch
            time.sleep(0.002)
        assert child is not None, "no clean reference process within 60 s"
        assert worker_had_torch_then is False  # started before the worker's torch import...
        while not _loaded_torch(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        # ...and imports torch on its own, with no session asked for: beside the worker's
        assert _loaded_torch(child.pid)
    finally:
        worker.kill()
        worker.wait()


def test_a_fresh_workers_session_is_opened_before_its_torch_import_and_not_again(
    tmp_path, monkeypatch
):
    """`_reference_side` without a spare's side: the session is asked for before the check
    module (torch) is imported, and the side made after it is told so instead of opening a
    second session (which would make the child's work twice)."""
    for suffix in (".cu", ".py"):
        (tmp_path / f"relu{suffix}").write_bytes((EXAMPLES / f"relu{suffix}").read_bytes())
    source, reference = tmp_path / "relu.cu", tmp_path / "relu.py"
    target = Target(kind="plain", source=str(source), entry="", reference=str(reference))
    clean = CleanReference("cpu")
    seen: list[tuple[str, object]] = []

    class Recording:
        def __init__(self, inner):
            self.inner = inner

        def open_for(self, target, settings):
            seen.append(("open", serve._IMPORTS.locked()))
            self.inner.open_for(target, settings)

    recording = Recording(clean)

    def prepare(target, settings, *, clean, abandon, session_open=False):
        seen.append(("prepare", session_open))
        return clean.inner.facts()  # the child's answer to the one session opened

    monkeypatch.setattr(serve, "gpu_present", lambda: True)
    monkeypatch.setattr(serve, "clean_reference", lambda gpu: recording)
    monkeypatch.setattr(serve, "_ahead", None)
    monkeypatch.setattr(check, "gpu_problem", lambda settings: None)
    monkeypatch.setattr(check, "prepare_reference", prepare)
    try:
        serve._IMPORTS.acquire()  # a prewarm still importing torch: the open doesn't wait
        opened_while_importing = []

        def release_later():
            time.sleep(0.3)
            opened_while_importing.append(list(seen))
            serve._IMPORTS.release()

        releaser = threading.Thread(target=release_later)
        releaser.start()
        facts = serve._reference_side(target, Settings(trials=3), lambda: False)
        releaser.join()
        assert opened_while_importing == [[("open", True)]]
        assert seen == [("open", True), ("prepare", True)]
        assert facts.trials == 3 and len(facts.seeds) == 4  # a session made, once
    finally:
        clean.close()
