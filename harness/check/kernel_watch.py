"""Which kernels one candidate call launches: verification's evidence for `calls_library` and
`no_kernel_launched` (harness/check/verify.py). Worker side: imports torch.

The call is watched through CUPTI's launch callbacks, in the counter library
(harness/check/cupti.py):
a subscription costs milliseconds and leaves nothing behind. torch.profiler (kineto) watches
instead where that library cannot be built or loaded, where CUPTI refuses the subscription
(another subscriber holds the process's one place), and where the call launched a CUDA graph:
the callbacks see the graph's launch, not the kernels inside it, which kineto's activity
records name. Kineto is the last resort because its first use costs seconds (~5 s of a torch
extension's verification on an H100), and because it then keeps CUPTI's subscriber for itself:
the worker's in-process counters (harness/profile/counters.py) record no launches after it, and that
profile goes through ncu instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

import torch

from kernelblaster.harness.analysis.ptxas import demangle
from kernelblaster.harness.check import cupti
from kernelblaster.settings import Settings

_log = logging.getLogger(__name__)

Way = Literal["cupti", "torch.profiler"]


def through_profiler(call: Callable[[list], object], inputs: list, device) -> set[str]:
    """The kernels one call launches, as torch.profiler (kineto's CUPTI activity records)
    saw them."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call(inputs)
        torch.cuda.synchronize(device)
    return {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}


class KernelWatch:
    """Watches candidate calls, through the counter library when `settings` can build and
    load it (it is built once per toolkit and taken from the build cache after), else through
    torch.profiler. `way`: how the last call was watched; `why_profiler`: why not through
    CUPTI, when it was not."""

    def __init__(self, settings: Settings | None = None):
        self.settings = settings
        self.way: Way | None = None
        self.why_profiler = ""
        self._library: cupti.CounterLibrary | None = None

    def launched(self, call: Callable[[list], object], inputs: list, device) -> set[str]:
        """The names (demangled, as torch.profiler gives them) of the kernels `call(inputs)`
        launches, its CUDA work finished."""
        seen = self._through_cupti(call, inputs, device)
        if seen is not None:
            self.way = "cupti"
            return seen
        _log.info("kernels watched with torch.profiler: %s", self.why_profiler)
        self.way = "torch.profiler"
        return through_profiler(call, inputs, device)

    def _through_cupti(self, call, inputs, device) -> set[str] | None:
        library = self._counter_library()
        if library is None:
            return None
        try:
            library.watch_begin()
        except cupti.CuptiFailure as failure:
            self.why_profiler = f"CUPTI refused the watch: {failure.error.describe()}"
            return None
        try:
            call(inputs)
            torch.cuda.synchronize(device)
        except BaseException:
            cupti.after_failure(library.watch_end, "ending the kernel watch")
            raise
        try:
            watched = library.watch_end()
        except cupti.CuptiFailure as failure:
            self.why_profiler = f"CUPTI failed to end the watch: {failure.error.describe()}"
            return None
        if watched.graph_launches:
            self.why_profiler = (
                f"the call launched {watched.graph_launches} CUDA graph(s), whose kernels the "
                "launch callbacks do not name"
            )
            return None
        readable = demangle(watched.kernels)
        return {readable.get(name, name) for name in watched.kernels}

    def _counter_library(self) -> cupti.CounterLibrary | None:
        if self._library is None:
            if self.settings is None:
                self.why_profiler = "no settings to build the counter library with"
            else:
                self._library, error = cupti.open_library(self.settings)
                if error is not None:
                    self.why_profiler = f"the counter library is not available: {error.message}"
        return self._library
