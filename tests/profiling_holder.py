"""Another process's profile, as the profiling lock sees one: a process that holds
harness/profiling_lock's lock for a while, as a second server's ncu would."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

_HOLD = """
import sys, time
from kernelblaster.harness.protocol.profiling_lock import one_profile_at_a_time
with one_profile_at_a_time():
    print("held", flush=True)
    time.sleep(float(sys.argv[1]))
"""


@contextmanager
def another_profile(seconds: float) -> Iterator[int]:
    """The lock held by another process for `seconds` from when the body starts; yields its
    pid. The process is ended when the body is."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(seconds)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()
