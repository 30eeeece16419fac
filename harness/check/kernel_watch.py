"""Which kernels one candidate call launches: the evidence for `calls_library` and
`no_kernel_launched`. Worker side: imports torch.

CUPTI's launch callbacks (cupti.py) cost milliseconds; torch.profiler is the fallback where those
can't be had or the call launched a CUDA graph, because its first use costs ~5 s and keeps
CUPTI's subscriber, sending later profiles through ncu."""

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
