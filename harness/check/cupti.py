"""The in-process counter library (cupti_counters.cpp): built through the build cache against the
CUPTI of the nvcc in use, loaded with ctypes, each call answered by a JSON document. Torch-free.

It links libcupti by soname, so a process that already holds one (torch's wheel) runs on that;
`load_library` loads the matching libnvperf pair first so CUPTI and nvperf come from one package,
and `preload_toolkit_cupti` (before torch) makes the toolkit's copy the shared one."""

from __future__ import annotations

import ctypes
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, Literal

import msgspec

from kernelblaster.harness.build.nvcc import BuildSpec, build
from kernelblaster.harness.protocol.profiling_lock import one_profile_at_a_time, profiler_busy
from kernelblaster.harness.protocol.records import BuildResult, HarnessError
from kernelblaster.harness.protocol.setup_errors import COUNTER_PERMISSION_FIX
from kernelblaster.settings import Settings

_log = logging.getLogger(__name__)

LIBRARY_SOURCE = Path(__file__).with_name("cupti_counters.cpp")
Replay = Literal["kernel", "user"]
_REPLAY_CODES = {"kernel": 0, "user": 1}
_NVPERF = ("libnvperf_host.so", "libnvperf_target.so")
_PERMISSION_RESULTS = (
    "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES",
    "CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES",
)
_NO_GPU_RESULTS = ("CUDA_ERROR_NO_DEVICE", "CUDA_ERROR_INVALID_DEVICE")
_FALLBACK_FIX = (
    "The profile is taken through Nsight Compute (ncu) instead. If this persists, run "
    "`python3 -m bench.counters_probe` on this machine and report its output."
)


class CuptiToolkit(msgspec.Struct, frozen=True, kw_only=True):
    """Where the CUDA toolkit of the nvcc in use keeps CUPTI."""

    root: str
    include_dir: str  # holds cupti_range_profiler.h
    lib_dir: str  # holds libcupti.so and libnvperf_*.so
    soname: str  # e.g. "libcupti.so.13"


@cache
def _toolkit_root(nvcc: str) -> Path | None:
    """The toolkit nvcc belongs to, as nvcc itself says (`TOP=` of a dry run): nvcc may be a
    wrapper script or a symlink outside the toolkit."""
    try:
        done = subprocess.run(
            [nvcc, "--dryrun", "-E", "-x", "cu", os.devnull],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    top = re.search(r"^#\$ TOP=(.+)$", done.stdout + done.stderr, re.MULTILINE)
    return Path(top.group(1).strip()).resolve() if top else None


def find_cupti(nvcc: str) -> CuptiToolkit | None:
    """CUPTI's headers and libraries in the toolkit of `nvcc` (the path of an executable):
    `<cuda>/include` and `<cuda>/lib64` since CUDA 12, `<cuda>/extras/CUPTI/...` before and in
    some installs. None without the Range Profiler's header (CUDA 12.6+) or a libcupti."""
    root = _toolkit_root(nvcc)
    if root is None:
        return None
    targets = sorted((root / "targets").glob("*-linux"))
    includes = [root / "include", root / "extras/CUPTI/include"] + [t / "include" for t in targets]
    libs = [root / "lib64", root / "extras/CUPTI/lib64"] + [t / "lib" for t in targets]
    include = next((d for d in includes if (d / "cupti_range_profiler.h").is_file()), None)
    lib = next((d for d in libs if sorted(d.glob("libcupti.so.*"))), None)
    if include is None or lib is None:
        return None
    sonames = sorted(
        p.name for p in lib.glob("libcupti.so.*") if re.fullmatch(r"[^.]+\.so\.\d+", p.name)
    )
    return CuptiToolkit(
        root=str(root),
        include_dir=str(include),
        lib_dir=str(lib),
        soname=sonames[0] if sonames else "libcupti.so",
    )


def build_library(
    settings: Settings, *, arch: str | None = None
) -> tuple[BuildResult, CuptiToolkit | None]:
    """The library (BuildResult.artifact) and the CUPTI it links, compiled by nvcc on first use
    and taken from the build cache after, until its source, a CUPTI header or nvcc changes.
    `arch`: any name nvcc takes (the library is host code); None detects the GPU's."""
    nvcc = shutil.which(settings.nvcc)
    toolkit = find_cupti(nvcc) if nvcc else None
    if toolkit is None:
        where = (
            f"the CUDA toolkit of {nvcc}" if nvcc else f"no toolkit ({settings.nvcc!r} not found)"
        )
        failed = HarnessError(
            kind="counters_failed",
            message="CUPTI's Range Profiler (cupti_range_profiler.h and libcupti, CUDA 12.6 or "
            f"newer) was not found: {where}.",
            fix="Install a CUDA toolkit 12.6 or newer with CUPTI and put its nvcc on PATH (or "
            "set `nvcc`). " + _FALLBACK_FIX,
        )
        return BuildResult(
            ok=False, source=str(LIBRARY_SOURCE), arch=arch or "", error=failed
        ), None
    # libcupti by soname, found through the run path; libcuda is opened at run time (see the
    # source); libnvperf_* are CUPTI's to open (see the module's docstring).
    spec = BuildSpec(
        source=str(LIBRARY_SOURCE),
        output_kind="shared",
        arch=arch,
        include_dirs=[toolkit.include_dir],
        library_dirs=[toolkit.lib_dir],
        libraries=["cupti", "dl"],
        flags=["-Xlinker", f"-rpath={toolkit.lib_dir}"],
    )
    return build(spec, settings), toolkit


# --- the library's replies -----------------------------------------------------------------


class CuptiError(msgspec.Struct, kw_only=True):
    """A failed call: `api` "cupti" (a CUptiResult), "cuda" (a CUresult) or "library" (the
    library's own check); `name` the result's name, `message` CUPTI's or the driver's words."""

    api: str
    call: str
    code: int
    name: str
    message: str

    def describe(self) -> str:
        words = self.message.strip()
        detail = self.name if words in ("", self.name) else f"{self.name}: {words}"
        return f"{self.call} failed ({detail})"


class CuptiFailure(Exception):
    def __init__(self, error: CuptiError):
        super().__init__(error.describe())
        self.error = error


class LibraryInfo(msgspec.Struct, kw_only=True):
    compiled_cupti_api: int  # CUPTI_API_VERSION of the headers it was built with
    runtime_cupti_api: int  # cuptiGetVersion() of the libcupti running it
    libcupti: str  # that libcupti's path

    @property
    def older_than_headers(self) -> bool:
        """A libcupti older than the headers may refuse the newer headers' parameter structs
        (CUPTI_ERROR_INVALID_PARAMETER): e.g. torch's copy under a newer toolkit."""
        return self.runtime_cupti_api < self.compiled_cupti_api


class UnsupportedMetric(msgspec.Struct, kw_only=True):
    metric: str
    reason: str


class MetricPlan(msgspec.Struct, kw_only=True):
    """Which requested metrics the chip supports, and the passes collecting those takes."""

    chip: str
    supported: list[str]
    unsupported: list[UnsupportedMetric]
    passes: int
    config_bytes: int


class Prepared(MetricPlan, kw_only=True):
    """The profiler set up for the current context's device (`cached`: as the last call left
    it); `seconds`: cupti_init and config_image."""

    cached: bool
    device_support: str  # what cuptiProfilerDeviceSupported said about the device
    device: int
    sm_count: int
    compute_capability: list[int]
    seconds: dict[str, float]

    @property
    def arch(self) -> str:
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"


class PassEnd(msgspec.Struct, kw_only=True):
    all_passes_submitted: bool
    next_pass_index: int


class LaunchRecord(msgspec.Struct, kw_only=True):
    """One kernel launch as the driver received it; -1 for an attribute that could not be read
    (`attribute_error` says why). `status`: the launch call's CUresult."""

    name: str  # mangled
    grid: list[int]
    block: list[int]
    cluster: list[int]  # [0, 0, 0] without thread-block clusters
    shared_dynamic: int
    registers: int
    shared_static: int
    local_bytes: int
    max_threads_per_block: int
    attribute_error: str
    status: int
    pass_index: int = msgspec.field(name="pass")


class RangeRecord(msgspec.Struct, kw_only=True):
    name: str
    values: list[float | None]  # per metric of the session; None where CUPTI gave no number


class SessionRecord(msgspec.Struct, kw_only=True):
    metrics: list[str]
    ranges: list[RangeRecord]
    dropped_ranges: int
    launches: list[LaunchRecord]
    launch_records_error: str  # why `launches` is empty, if launches could not be recorded
    seconds: dict[str, float]  # decode, evaluate


class WatchedLaunches(msgspec.Struct, kw_only=True):
    """What a kernel watch saw (kbc_watch_begin .. kbc_watch_end)."""

    kernels: list[str]  # the launched kernels' names, mangled, each once
    graph_launches: int  # CUDA graph launches: their kernels are not among `kernels`


class Begun(msgspec.Struct, kw_only=True):
    """`launch_records_error`: why launches are not recorded (another CUPTI callback
    subscriber holds the process's one place), empty when they are."""

    launch_records_error: str
    seconds: dict[str, float]  # enable


class _Done(msgspec.Struct):
    pass


class CounterLibrary:
    """The loaded library. Each method makes one call; a failed one raises CuptiFailure."""

    def __init__(self, path: str, *, cupti_directory: Path):
        self.path = path
        self.cupti_directory = cupti_directory  # where the libcupti it runs on lives
        self._library = ctypes.CDLL(path)
        names = ctypes.POINTER(ctypes.c_char_p)
        signatures: dict[str, list[Any]] = {
            "kbc_library_info": [],
            "kbc_check_metrics": [ctypes.c_char_p, names, ctypes.c_size_t],
            "kbc_prepare": [names, ctypes.c_size_t],
            "kbc_begin": [ctypes.c_int, ctypes.c_size_t],
            "kbc_start_pass": [],
            "kbc_stop_pass": [],
            "kbc_end": [],
            "kbc_abort": [],
            "kbc_watch_begin": [],
            "kbc_watch_end": [],
        }
        for name, arguments in signatures.items():
            function = getattr(self._library, name)
            function.argtypes = arguments
            function.restype = ctypes.c_void_p  # a malloc'd string, freed by kbc_free
        self._library.kbc_free.argtypes = [ctypes.c_void_p]
        self._library.kbc_free.restype = None

    def _call(self, name: str, reply_type: type, *arguments):
        pointer = getattr(self._library, name)(*arguments)
        if not pointer:
            raise MemoryError(f"{name} could not allocate its reply")
        try:
            reply = msgspec.json.decode(ctypes.string_at(pointer))
        finally:
            self._library.kbc_free(pointer)
        if not reply.get("ok"):
            raise CuptiFailure(msgspec.convert(reply["error"], CuptiError))
        return msgspec.convert(reply, reply_type)

    def info(self) -> LibraryInfo:
        return self._call("kbc_library_info", LibraryInfo)

    def check_metrics(self, chip: str, metrics: list[str]) -> MetricPlan:
        """Which of `metrics` the chip named `chip` (e.g. "GH100") supports: no GPU needed."""
        return self._call("kbc_check_metrics", MetricPlan, chip.encode(), *_names(metrics))

    def prepare(self, metrics: list[str], progress: Callable[..., None] | None = None) -> Prepared:
        """Set the profiler up for `metrics` on the calling thread's current CUDA context
        (`progress` hears of a wait for another profile). Refused where the process holds
        another package's nvperf (`foreign_nvperf`), checked on every call: a report read
        since the last one may have loaded it."""
        foreign = foreign_nvperf(self.cupti_directory)
        if foreign:
            raise CuptiFailure(
                CuptiError(
                    api="library",
                    call="kbc_prepare",
                    code=0,
                    name="foreign nvperf",
                    message=f"this process holds {', '.join(foreign)}, not the nvperf beside "
                    f"its CUPTI in {self.cupti_directory} (reading an ncu report in a process "
                    "loads Nsight Compute's own), and CUPTI would run on it; the counters need "
                    "a process that has not read an ncu report",
                )
            )
        # Its first call on a context asks the driver which counters are free
        # (cuptiProfilerGetCounterAvailability): beside another process's profile, that made
        # the other's ncu or CUPTI find the counters busy.
        with one_profile_at_a_time(progress):
            return self._call("kbc_prepare", Prepared, *_names(metrics))

    def begin(self, replay: Replay, max_ranges: int) -> Begun:
        return self._call("kbc_begin", Begun, _REPLAY_CODES[replay], max_ranges)

    def start_pass(self) -> None:
        self._call("kbc_start_pass", _Done)

    def stop_pass(self) -> PassEnd:
        return self._call("kbc_stop_pass", PassEnd)

    def end(self) -> SessionRecord:
        return self._call("kbc_end", SessionRecord)

    def abort(self) -> None:
        self._call("kbc_abort", _Done)

    def watch_begin(self) -> None:
        """Record every kernel launch from now on (refused while a profile runs, or where
        another CUPTI subscriber, e.g. torch.profiler's kineto, holds the process's place)."""
        self._call("kbc_watch_begin", _Done)

    def watch_end(self) -> WatchedLaunches:
        return self._call("kbc_watch_end", WatchedLaunches)


def _names(metrics: list[str]) -> tuple[Any, int]:
    return (ctypes.c_char_p * len(metrics))(*(name.encode() for name in metrics)), len(metrics)


# --- loading ---------------------------------------------------------------------------------

_loaded: dict[str, CounterLibrary] = {}


def library_files() -> list[str]:
    """The libcupti, libnvperf and libcuda files this process has loaded (its memory map)."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return []
    paths = {line.split(maxsplit=5)[-1] for line in lines if len(line.split(maxsplit=5)) == 6}
    wanted = re.compile(r"lib(cupti|nvperf_host|nvperf_target|cuda)\.so")
    return sorted(path for path in paths if wanted.search(Path(path).name))


def _soname_major(name: str) -> str | None:
    found = re.match(r"libcupti\.so\.(\d+)", name)
    return found.group(1) if found else None


def _cupti_directory(toolkit: CuptiToolkit) -> Path:
    """Where the libcupti the library will run on lives: a loaded one of the toolkit's soname
    (the dynamic loader binds the library to it), else the toolkit's."""
    major = _soname_major(toolkit.soname)
    for path in library_files():
        if major is not None and _soname_major(Path(path).name) == major:
            return Path(path).parent
    return Path(toolkit.lib_dir)


def _load_nvperf_beside(directory: Path) -> list[str]:
    """Load the nvperf libraries in `directory` (unless the process holds some already), so
    that CUPTI, opening them by soname, gets the ones of its own package."""
    held = {Path(path).name for path in library_files()}
    loaded = []
    for name in _NVPERF:
        path = directory / name
        if name not in held and path.is_file():
            ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
            loaded.append(str(path))
    return loaded


def foreign_nvperf(directory: Path) -> list[str]:
    """The nvperf libraries this process holds from a folder without its libcupti: CUPTI opens them
    by soname, so it would run on those. `ncu_report` loads its own libnvperf_host.so, and CUPTI
    on that one crashed the process on an H100."""
    held = [Path(path) for path in library_files()]
    cupti_directories = {p.parent.resolve() for p in held if p.name.startswith("libcupti.so")}
    cupti_directories.add(directory.resolve())
    return [
        str(p) for p in held if p.name in _NVPERF and p.parent.resolve() not in cupti_directories
    ]


def load_library(path: str, toolkit: CuptiToolkit) -> CounterLibrary:
    """The library at `path` loaded into this process (once per process), its CUPTI paired with
    that CUPTI's own nvperf libraries. OSError when the dynamic loader refuses it."""
    if path not in _loaded:
        directory = _cupti_directory(toolkit)
        _load_nvperf_beside(directory)
        _loaded[path] = CounterLibrary(path, cupti_directory=directory)
    return _loaded[path]


def open_library(
    settings: Settings, *, arch: str | None = None
) -> tuple[CounterLibrary | None, HarnessError | None]:
    """The counter library built (or found in the build cache) and loaded, or why it can't be
    (`counters_failed`)."""
    built, toolkit = build_library(settings, arch=arch)
    if not built.ok or built.artifact is None or toolkit is None:
        error = built.error
        if error is not None and error.kind == "counters_failed":
            return None, error
        return None, HarnessError(
            kind="counters_failed",
            message="The in-process counter library did not compile: "
            + (error.message if error else "nvcc wrote no library"),
            fix="It is profiled through Nsight Compute (ncu) instead; the log shows nvcc's output.",
            log=error.log if error else "",
        )
    try:
        return load_library(built.artifact, toolkit), None
    except OSError as exc:
        return None, HarnessError(
            kind="counters_failed",
            message=f"The in-process counter library could not be loaded: {exc}",
            fix="It is profiled through Nsight Compute (ncu) instead.",
        )


def after_failure(step: Callable[[], object], what: str) -> None:
    """Run a clean-up `step` (an abort, a watch's end) after a failure: the failure that got
    here is the one reported, so one of `step`'s own is only logged."""
    try:
        step()
    except CuptiFailure as failure:
        _log.warning("%s after a failure failed too: %s", what, failure)


def preload_toolkit_cupti(toolkit: CuptiToolkit) -> list[str]:
    """Load the toolkit's libcupti and nvperf libraries into the process, globally: called
    before torch is imported, torch and this library then share the toolkit's CUPTI instead
    of the copy torch's wheels bring. Returns the files loaded."""
    directory = Path(toolkit.lib_dir)
    loaded = _load_nvperf_beside(directory)
    cupti = directory / toolkit.soname
    ctypes.CDLL(str(cupti), mode=ctypes.RTLD_GLOBAL)
    return [*loaded, str(cupti)]


# --- errors ----------------------------------------------------------------------------------


def harness_error(error: CuptiError) -> HarnessError:
    """What a failed call means for the user. Counter permissions get the fix ncu's
    ERR_NVGPUCTRPERM gets; anything else is the in-process path's own failure, after which
    the profile is taken through ncu."""
    log = f"{error.api} call {error.call} returned {error.code} ({error.name}): {error.message}"
    if error.name in _PERMISSION_RESULTS:
        return HarnessError(
            kind="counter_permission",
            message=f"CUPTI may not read the GPU performance counters ({error.name} from "
            f"{error.call}): profiling is restricted to administrators on this machine.",
            fix=COUNTER_PERMISSION_FIX,
            log=log,
        )
    if error.name == "CUPTI_ERROR_HARDWARE_BUSY":
        return profiler_busy(f"CUPTI could not profile ({error.call})", log)
    if error.api == "library" and error.call.startswith("dlopen(libcuda"):
        return HarnessError(
            kind="no_driver",
            message=f"The NVIDIA driver could not be loaded for the counters: {error.message}",
            fix="Install the NVIDIA driver for your GPU (nvidia-smi must work).",
            log=log,
        )
    if error.name in _NO_GPU_RESULTS:
        return HarnessError(
            kind="no_gpu",
            message=f"No CUDA GPU to collect counters on: {error.describe()}.",
            fix="Check that nvidia-smi lists the GPU and that CUDA_VISIBLE_DEVICES does not "
            "hide it.",
            log=log,
        )
    return HarnessError(
        kind="counters_failed",
        message=f"The in-process counters could not be collected: {error.describe()}.",
        fix=_FALLBACK_FIX,
        log=log,
    )
