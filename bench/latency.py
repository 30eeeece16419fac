"""Wall time of each harness phase for every example, through the real worker and language server.

    python -m bench.latency [--examples relu softmax ...]
    python -m bench.latency --server-only --examples relu softmax --part rhythms
    python -m bench.latency --server-only --examples relu --part per-file

Worker: cold (empty cache), warm, and on a spare worker after one-line edits, with the worker's
`PHASES`. Server: open, then saves 0.5 s after an edit and right after it, timing save → `timing`
and save → `state` diagnostics; the idle rhythm, the rapid rhythm (saves as soon as the last
timing appears) and a file opened while another profiles. Writes
bench/results/latency-<gpu>.json."""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import msgspec
from lsprotocol import types

from bench.common import RESULTS, device_name, slug, start_language_server, write_result
from kernelblaster.harness.protocol.worker_client import SpareWorkers, run_harness, run_harness_sync
from kernelblaster.harness.protocol.worker_protocol import WorkerRequest, WorkerResponse
from kernelblaster.server.editor.documents import path_to_uri, text_hash
from kernelblaster.server.pipeline.save import timed_runs
from kernelblaster.server.results.cache import ResultCache
from kernelblaster.settings import Settings

SERVER_EXAMPLES = ["relu", "softmax"]
# CheckResult.phase_seconds, as harness/check/check.py and harness/worker/serve.py record them. The
# reference_* parts run beside the nvcc build when the worker can (plain and extension targets
# on a GPU); otherwise inside "load".
PHASES = {
    "reference_load": "import the reference .py, build its Model on the GPU",
    "reference_probe": "seed-0 inputs: output shapes/dtypes, whether the reference aliases or "
    "changes its inputs",
    "clean_reference_load, clean_reference_probe, clean_reference_sets": "the same parts in "
    "the clean reference process, where no candidate code runs (harness/target/"
    "clean_reference.py); its sets: every trial's inputs, decoys and expected outputs made "
    "ahead (absent when they take over 1 GiB or a quarter of free GPU memory)",
    "clean_reference_wait": "how long the check waited for the clean reference process's "
    "session (its start, its reference and sets: 0 when made ahead)",
    "reference_checks_loaded": "verification's comparison and signatures run once on outputs "
    "of the reference's shapes (their torch kernels loaded ahead of the first trial)",
    "reference_after_build": "how long the reference side ran on after nvcc had finished (0: "
    "the build was the longer)",
    "ahead_reference_load, ahead_reference_probe": "the same parts, made "
    "by the spare worker before the request came (harness/worker/reference_ahead.py): "
    "not waited for",
    "reference_wait": "how long the request waited for the side its spare was still making",
    "load": "from the check's start to the candidate loaded (dlopen, launcher checks); "
    "includes the reference side when it was not made beside the build",
    "verify": "all of verification (>= 3 trials)",
    "verify_gate": "stream gate calibration and the sizing (warm-up) call",
    "verify_gate_calibration": "of verify_gate: the spin kernel's speed (0 where a spare "
    "calibrated it ahead)",
    "verify_gate_wait": "of verify_gate: the sizing call's input set, and the GPU's work before "
    "it (sets made ahead may still be on it)",
    "verify_gate_call": "of verify_gate: the sizing call, until the GPU is idle",
    "verify_watch": "the call whose launched kernels are watched (CUPTI's launch callbacks; "
    "torch.profiler where those can't be had): extensions and KernelBench solutions",
    "verify_reference_here": "the reference run once in the candidate's process, compared "
    "with the clean process's answer (reference_tampered)",
    "verify_calls": "the candidate's guarded calls, each until the GPU is idle",
    "verify_checks": "comparisons with the expected outputs, aliasing/in-place/cache checks",
    "time": "timing and the trial after it",
    "time_repetitions": "cold call, calibration, warm-up and the L2-flushed repetitions",
    "time_recheck": "one more verified trial after timing",
    "baselines": "PyTorch eager and torch.compile timed (cached per reference and GPU)",
    "ahead_clean_reference_load, ahead_clean_reference_probe, ahead_clean_reference_sets, "
    "ahead_clean_reference_checks_loaded": "the clean process's parts of a session its spare "
    "made before the request came: not waited for",
    "clean_reference_handed_over": "the session's sets made ahead handed over to the worker in "
    "one exchange (0 where its spare did it before the request)",
    "verify_setup": "of verify: the source's static checks and the verifier's set-up",
    "verify_sets": "of verify: each trial's sets taken from the clean process and released (a "
    "round trip unless handed over ahead)",
    "time_trim": "of time_repetitions: the clean process told to give its cached blocks back",
    "worker_before_check": "the worker from reading the request to starting the check: the "
    "build (a cache hit waits for the build ahead), the reference side, prewarm_wait",
    "worker_to_timing": "the worker from reading the request to sending the verified timing",
    "server_and_pipes_s": "(per save, not a phase) save -> timing minus worker_to_timing: the "
    "server's own time (the didSave, the GPU slot, taking a spare) and the pipes'",
    "spare_age": "how long the request's spare worker had been running when the request came",
    "prewarm_wait": "how long the request waited, once built, for its spare's prewarm (CUDA "
    "context, stream gate calibration, counters' set-up) to end",
}
EARLIER = "(profile of an earlier version of this file)"
# A user's pause between the last keystroke and the save; the server builds an edit ahead of
# its save once typing has paused 0.15 s (server/session/build_ahead.py). Saves right after the edit
# (no pause) are measured too.
PAUSE_BEFORE_SAVE_S = 0.5

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DEFAULT = ["relu", "row_sum", "softmax", "matmul", "bias_gelu_scale", "saxpy_program"]


def _request(source: Path, settings: Settings) -> WorkerRequest:
    return WorkerRequest(task="check", source=str(source), settings=settings)


def measure(source: Path, settings: Settings) -> dict:
    began = time.perf_counter()
    response = run_harness_sync(_request(source, settings), settings)
    return _summary(response, time.perf_counter() - began)


def _summary(response: WorkerResponse, wall: float) -> dict:
    check = response.check
    build = response.build
    return {
        "wall_s": round(wall, 3),
        "build_s": round(build.seconds, 3) if build else None,
        "build_cached": build.cached if build else None,
        "nvcc_stages_ms": build.nvcc_stages_ms if build else {},
        # built in parts (an extension's kernels and bindings): each part's seconds, or "cached"
        "build_steps": {
            Path(step.what).name: "cached" if step.cached else round(step.seconds, 3)
            for step in (build.steps if build else [])
        },
        "phases_s": check.phase_seconds if check else {},
        "verified": bool(check and check.verify and check.verify.ok),
        "kernel_ms": check.timing.median_ms if check and check.timing else None,
        "timing_repetitions": check.timing.repetitions if check and check.timing else None,
        "speedup_vs_eager": check.speedup_vs_eager if check else None,
        "speedup_vs_compile": check.speedup_vs_compile if check else None,
        "error": f"{response.error.kind}: {response.error.message}" if response.error else None,
    }


async def on_spare_worker(source: Path, settings: Settings, edits: int) -> dict:
    """Saves as the language server runs them: each on a spare worker that started (imported
    torch, created its CUDA context) while the editor was idle. First the file as it is (its
    build cached by the runs before), then `edits` one-line edits, each built by nvcc."""
    spares = SpareWorkers()
    request = _request(source, settings)
    text = source.read_text()
    runs = []
    try:
        await run_harness(request, settings, spares=spares)
        for version in range(edits + 1):
            if version:
                source.write_text(f"// edit {version}\n" + text)
            await asyncio.sleep(8)  # the editor is idle; the spare warms up
            began = time.perf_counter()
            response = await run_harness(request, settings, spares=spares)
            runs.append(_summary(response, time.perf_counter() - began))
    finally:
        await spares.close()
        source.write_text(text)
    edited = [run["wall_s"] for run in runs[1:]]
    return {
        "build_cached": runs[0],
        "after_edit": runs[1:],
        "after_edit_wall_p50_s": statistics.median(edited) if edited else None,
    }


async def _first_seen(client, uri: str, code: str, began: float, timeout: float = 600) -> float:
    """Seconds from `began` until the client holds a diagnostic `code` of the current text
    (polled every 5 ms; a state from an earlier version doesn't count)."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        for d in client.diagnostics.get(uri, []):
            if d.code == code and not d.message.endswith(EARLIER):
                return round(time.perf_counter() - began, 3)
            if d.code in ("run", "setup") or (d.code == "verify" and d.severity == 1):
                raise RuntimeError(f"{d.code}: {d.message}")  # nothing to time
        await asyncio.sleep(0.005)
    raise TimeoutError(f"no {code} diagnostic within {timeout} s")


async def _job_ended(running: dict[str, bool], uri: str, timeout: float = 120.0) -> None:
    deadline = time.perf_counter() + timeout
    while running.get(uri, True):
        if time.perf_counter() > deadline:
            raise TimeoutError(f"the run of {uri} did not end within {timeout} s")
        await asyncio.sleep(0.05)
    await asyncio.sleep(5.0)  # the spare that replaces its worker warms up (torch, CUDA context)


async def through_server(
    source: Path, cache_dir: Path, saves: int, log: Path | None = None
) -> dict:
    client = await start_language_server(
        source.parent, {"cacheDir": str(cache_dir), "kbPath": str(cache_dir / "kb.db")}, log
    )
    # Each edit waits for the previous run to end (ncu's pass for the source lines goes on
    # after the state is shown): a save that cancels a running job measures a fresh worker's
    # start, not the save pipeline.
    running: dict[str, bool] = {}

    @client.feature("kernelblaster/jobStatus")
    def _job_status(params) -> None:
        running[params.uri] = params.running

    try:
        uri = path_to_uri(source)
        text = source.read_text()
        began = time.perf_counter()
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(
                    uri=uri, language_id="cuda-cpp", version=1, text=text
                )
            )
        )
        opened = {
            "timing_s": await _first_seen(client, uri, "timing", began),
            "state_s": await _first_seen(client, uri, "state", began),
        }
        made: list[dict] = []  # in order: after a pause, right after the edit, ...
        for version in range(2, 2 * saves + 2):
            await _job_ended(running, uri)
            # the previous run's result is saved now that it has ended
            (made[-1] if made else opened).update(_saved_run(cache_dir, source))
            pause = PAUSE_BEFORE_SAVE_S if version % 2 == 0 else 0.0
            text = f"// edit {version}\n" + text  # one line more: the kernels move down
            made.append(await _edit_and_save(client, uri, source, text, version, pause))
        await _job_ended(running, uri)
        made[-1].update(_saved_run(cache_dir, source))
    finally:
        await client.shutdown_session()
        await client.stop()
    for run in made:  # what the worker's phases leave of save -> timing
        worker = run.pop("worker_to_timing_s", None)
        if worker is not None:
            run["server_and_pipes_s"] = round(run["save_to_timing_s"] - worker, 3)
    opened.pop("worker_to_timing_s", None)

    runs = {
        pause: [run for run in made if run["pause_s"] == pause]
        for pause in (0.0, PAUSE_BEFORE_SAVE_S)
    }

    def p50(pause: float, key: str) -> float:
        return statistics.median(run[key] for run in runs[pause])

    return {
        "open_cold": opened,
        "pause_before_save_s": PAUSE_BEFORE_SAVE_S,
        "saves": runs[PAUSE_BEFORE_SAVE_S],
        "save_to_timing_p50_s": p50(PAUSE_BEFORE_SAVE_S, "save_to_timing_s"),
        "save_to_state_p50_s": p50(PAUSE_BEFORE_SAVE_S, "save_to_state_s"),
        "saves_right_after_the_edit": runs[0.0],
        "save_right_after_the_edit_to_timing_p50_s": p50(0.0, "save_to_timing_s"),
        "save_right_after_the_edit_to_state_p50_s": p50(0.0, "save_to_state_s"),
    }


async def _edit_and_save(
    client, uri: str, source: Path, text: str, version: int, pause: float
) -> dict:
    """The user types `text` (didChange: the server builds it ahead once typing pauses, the
    `buildOnChange` setting), waits `pause` seconds, and saves: seconds from the save to the
    `timing` and `state` diagnostics of the new text. As in an editor, the file on disk
    changes at the save, not while the user types."""
    client.diagnostics.pop(uri, None)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )
    await asyncio.sleep(pause)
    client.diagnostics.pop(uri, None)
    began = time.perf_counter()
    source.write_text(text)
    client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    return {
        "pause_s": pause,
        "save_to_timing_s": await _first_seen(client, uri, "timing", began),
        "save_to_state_s": await _first_seen(client, uri, "state", began),
    }


def _saved_run(cache_dir: Path, source: Path) -> dict:
    """Where the time of the server's last run of `source` went (its result, saved under
    `cache_dir` once the run ended): whether its build was a cache hit (the edit's build ahead
    of the save had made it), the build's seconds, and the check's phases (`PHASES`)."""
    result = ResultCache(cache_dir).load(source)
    if result is None or result.response.build is None:
        return {}
    check = result.response.check
    timing = check.timing if check is not None else None
    return {
        "worker_to_timing_s": check.phase_seconds.get("worker_to_timing") if check else None,
        "build_cached": result.response.build.cached,
        "build_s": round(result.response.build.seconds, 3),
        "nvcc_stages_ms": result.response.build.nvcc_stages_ms,
        "phases_s": check.phase_seconds if check is not None else {},
        # how many repetitions the timing needed to pin its median (harness/check/timing.py), and
        # the spread that decided it
        "timing_ms": msgspec.to_builtins(timing) if timing is not None else None,
    }


def _measure_server(scratch: Path, name: str, saves: int, log_dir: Path | None) -> dict:
    """`through_server` on a fresh copy of the example, with an empty cache; the server's log
    in `log_dir`, if given."""
    fresh = scratch / f"{name}-server"
    fresh.mkdir()
    for file in EXAMPLES.glob(f"{name}.*"):
        shutil.copy(file, fresh / file.name)
    try:
        log = log_dir / f"{name}-server.log" if log_dir is not None else None
        measured = asyncio.run(through_server(fresh / f"{name}.cu", fresh / "cache", saves, log))
    except (RuntimeError, TimeoutError) as exc:  # recorded; the others still run
        measured = {"error": str(exc)}
    print(f"{name:16} through the server: {measured}", flush=True)
    return measured


PARTS = ("rhythms", "per-file")


def _earlier_result() -> dict:
    """The latency-server result of this GPU already written (a part run before this one), or
    an empty one: a part replaces its own rows and keeps the others."""
    path = RESULTS / f"latency-server-{slug(device_name())}.json"
    try:
        earlier = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    earlier.pop("device", None)  # written again by write_result
    return earlier


def _server_only(
    names: list[str], saves: int, rapid_saves: int, log_dir: Path | None, parts: list[str]
) -> int:
    """The rapid rhythm and the busy open (`rhythms`), then each file's open and saves, which
    make the idle rhythm (`per-file`), each in a server of its own, merged into this GPU's
    result written before (so that the parts can run apart, each within a time limit); the
    result written after each measurement (a run cut short keeps what it measured)."""
    payload = _earlier_result()
    rhythms = payload.setdefault("rhythms", {})
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        if "rhythms" in parts and len(names) >= 2:
            rhythms["rapid"] = _measure_together(
                root, "rapid", names, rapid_rhythm, rapid_saves, log_dir=log_dir
            )
            path = write_result("latency-server", payload)
            payload["open_while_busy"] = _measure_together(
                root, "busy", names, open_while_busy, log_dir=log_dir
            )
            path = write_result("latency-server", payload)
        if "per-file" in parts:
            server = payload.setdefault("through_language_server", {})
            for name in names:
                server[name] = _measure_server(root, name, saves, log_dir)
                rhythms["idle"] = idle_rhythm(server)
                path = write_result("latency-server", payload)
    print(f"wrote {path}")
    return 0


def idle_rhythm(server: dict) -> dict:
    """The idle rhythm over every example and both pauses: each save after the previous job
    ended (`through_server`)."""
    saves = [
        run
        for measured in server.values()
        for run in measured.get("saves", []) + measured.get("saves_right_after_the_edit", [])
    ]
    if not saves:
        return {"error": "no save measured"}
    return {
        "what": "each save after the previous job (ncu's pass, baselines) ended, 5 s later",
        "saves": len(saves),
        "save_to_timing_p50_s": statistics.median(run["save_to_timing_s"] for run in saves),
        "save_to_fresh_state_p50_s": statistics.median(run["save_to_state_s"] for run in saves),
        "save_to_timing_max_s": max(run["save_to_timing_s"] for run in saves),
        "save_to_fresh_state_max_s": max(run["save_to_state_s"] for run in saves),
    }


# The server's line for each spare a request took (harness/protocol/worker_client.py)
_TAKEN = re.compile(r"spare worker \d+ taken on GPU \d+: [\d.]+ s old, (?P<how>[^,]+),")


def spares_taken(log: Path) -> dict[str, int]:
    """How the spares the run's requests took had been started, counted: forked by the worker
    zygote, exec'd to prewarm, or exec'd for builds only (the builds ahead of saves)."""
    found = collections.Counter(
        match["how"] for line in log.read_text(errors="replace").splitlines()
        if (match := _TAKEN.search(line))
    )  # fmt: skip
    return dict(found)


def worker_runs(log: Path, name: str) -> list[dict]:
    """Each run of `<name>.cu` that reached its timing, in order (its open's first), as the
    language server logged it: whether its build was cached, and the worker's phase seconds
    (`PHASES`: spare_age, reference_wait, clean_reference_wait, ... say why a save was slow)."""
    runs = []
    for run in timed_runs(log.read_text(errors="replace").splitlines()):
        if run.file == f"{name}.cu":
            runs.append({"build": run.build, "phases_s": run.phases_s})
    return runs


def _measure_together(
    scratch: Path, label: str, names: list[str], how, *args, log_dir: Path | None = None
) -> dict:
    """`how(workspace, names, *args, log)` on fresh copies of the examples in one workspace,
    with an empty cache; the server's log in `log_dir`, or in the workspace (the rhythms read
    each run's worker phases from it)."""
    fresh = scratch / f"{label}-server"
    fresh.mkdir()
    for name in names:
        for file in EXAMPLES.glob(f"{name}.*"):
            shutil.copy(file, fresh / file.name)
    log = (log_dir or fresh) / f"{label}-server.log"
    try:
        measured = asyncio.run(how(fresh, names, *args, log))
    except (RuntimeError, TimeoutError) as exc:  # recorded; the others still run
        measured = {"error": str(exc)}
    print(f"{label}: {measured}", flush=True)
    return measured


class _Session:
    """A language server on `root` (empty cache), its client, and every file's job status."""

    def __init__(self, client, root: Path) -> None:
        self.client = client
        self.root = root
        self.cache_dir = root / "cache"
        self.statuses: list[tuple[float, object]] = []
        self.running: dict[str, bool] = {}

    @classmethod
    async def start(cls, root: Path, log: Path | None) -> _Session:
        cache_dir = root / "cache"
        client = await start_language_server(
            root, {"cacheDir": str(cache_dir), "kbPath": str(cache_dir / "kb.db")}, log
        )
        session = cls(client, root)

        @client.feature("kernelblaster/jobStatus")
        def _job_status(params) -> None:
            session.statuses.append((time.perf_counter(), params))
            session.running[params.uri] = params.running

        return session

    def open(self, name: str) -> str:
        source = self.root / f"{name}.cu"
        uri = path_to_uri(source)
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(
                    uri=uri, language_id="cuda-cpp", version=1, text=source.read_text()
                )
            )
        )
        return uri

    async def said(self, uri: str, words: str, timeout: float) -> bool:
        """Whether the file's job status says `words` within `timeout` seconds."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if any(p.uri == uri and words in p.message for _, p in self.statuses):
                return True
            await asyncio.sleep(0.01)
        return False

    async def ended(self, uri: str, timeout: float) -> float:
        """When the file's job ended (its last job status: not running), once it has."""
        deadline = time.perf_counter() + timeout
        while self.running.get(uri, True):
            if time.perf_counter() > deadline:
                raise TimeoutError(f"the job of {uri} did not end within {timeout} s")
            await asyncio.sleep(0.05)
        return max(at for at, p in self.statuses if p.uri == uri and not p.running)

    def reached(self, name: str, text: str) -> dict:
        """What the file's saved result (written when its job ended) holds: whether it is of
        `text`, with ncu's profile (not only the in-process counters') and the baselines."""
        source = self.root / f"{name}.cu"
        result = ResultCache(self.cache_dir).load(source)
        response = result.response if result is not None else None
        profile = response.profile if response is not None else None
        check = response.check if response is not None else None
        return {
            "of_the_last_text": result is not None and result.text_hash == text_hash(text),
            "ncu_profile": profile is not None and profile.program != "in_process",
            "baselines": check is not None and check.eager is not None,
        }

    async def close(self) -> None:
        await self.client.shutdown_session()
        await self.client.stop()


async def rapid_rhythm(root: Path, names: list[str], saves: int, log: Path | None) -> dict:
    """`saves` one-line edits over the examples in turn, each saved as soon as the previous save's
    timing diagnostic appeared: save → timing, save → state (None where saved again first), when
    each file's job ended after its last save, and whether its profile reached its last text."""
    session = await _Session.start(root, log)
    client = session.client
    uris = {name: session.open(name) for name in names}
    texts = {name: (root / f"{name}.cu").read_text() for name in names}
    made: list[dict] = []
    last_saved: dict[str, float] = {}
    try:
        for uri in uris.values():  # opened cold: nvcc, baselines; then the editing starts
            await _job_ended(session.running, uri, timeout=600)
        states: dict[str, tuple[dict, asyncio.Task[float]]] = {}
        for version in range(2, saves + 2):
            name = names[version % len(names)]
            uri = uris[name]
            if name in states:  # the file's previous save: its state, or superseded now
                _settle(*states.pop(name))
            texts[name] = f"// rapid edit {version}\n" + texts[name]
            client.diagnostics.pop(uri, None)
            client.text_document_did_change(
                types.DidChangeTextDocumentParams(
                    text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                    content_changes=[
                        types.TextDocumentContentChangeWholeDocument(text=texts[name])
                    ],
                )
            )
            began = last_saved[name] = time.perf_counter()
            (root / f"{name}.cu").write_text(texts[name])
            client.text_document_did_save(
                types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
            )
            timing = await _first_seen(client, uri, "timing", began)
            run = {"file": name, "save_to_timing_s": timing}
            made.append(run)
            watch = asyncio.create_task(_first_seen(client, uri, "state", began, timeout=120))
            states[name] = (run, watch)
        for run, watch in states.values():
            await asyncio.wait([watch], timeout=120)
            _settle(run, watch)
        background = {}
        for name, uri in uris.items():
            ended = await session.ended(uri, timeout=600)
            background[name] = {
                "ended_after_its_last_save_s": round(ended - last_saved[name], 3),
                **session.reached(name, texts[name]),
            }
    finally:
        await session.close()
    if log is not None:  # each save's worker phases, in the order of the file's saves
        later = {name: worker_runs(log, name)[1:] for name in names}  # [0]: its open's run
        for run in made:
            saved = later[run["file"]]
            run["worker"] = saved.pop(0) if saved else None
    fresh = [run["save_to_state_s"] for run in made if run["save_to_state_s"] is not None]
    timings = [run["save_to_timing_s"] for run in made]
    return {
        "what": "one-line edits over the files in turn, each saved as soon as the previous "
        "save's timing diagnostic appeared, the edit and its save together",
        "files": names,
        "saves": made,
        "save_to_timing_p50_s": statistics.median(timings),
        "save_to_timing_max_s": max(timings),
        "save_to_fresh_state_p50_s": statistics.median(fresh) if fresh else None,
        "save_to_fresh_state_max_s": max(fresh) if fresh else None,
        "states_superseded": sum(run["save_to_state_s"] is None for run in made),
        "spares_taken": spares_taken(log) if log is not None else None,
        "background_after_the_last_save": background,
    }


def _settle(run: dict, watch: asyncio.Task[float]) -> None:
    """The save's seconds to its fresh state, or None: superseded by a newer save first."""
    if watch.done() and not watch.cancelled() and watch.exception() is None:
        run["save_to_state_s"] = watch.result()
    else:
        watch.cancel()
        run["save_to_state_s"] = None


async def open_while_busy(root: Path, names: list[str], log: Path | None) -> dict:
    """The first example opened (cold), then the second opened once the first's job is in
    its background work (its baselines if they are measured, else ncu's pass): open → the
    second's timing and state, then whether both files' background work reached them."""
    first, second = names[0], names[1]
    session = await _Session.start(root, log)
    client = session.client
    try:
        first_uri = session.open(first)
        await _first_seen(client, first_uri, "state", time.perf_counter(), timeout=300)
        if await session.said(first_uri, "timing PyTorch", timeout=60):
            busy_with = "baselines"
        elif await session.said(first_uri, "ncu", timeout=1):
            busy_with = "ncu"
        else:
            busy_with = "nothing seen"
        began = time.perf_counter()
        second_uri = session.open(second)
        measured = {
            "first_file": first,
            "first_file_busy_with": busy_with,
            "second_file": second,
            "timing_s": await _first_seen(client, second_uri, "timing", began),
            "state_s": await _first_seen(client, second_uri, "state", began),
        }
        for name, uri in ((first, first_uri), (second, second_uri)):
            await session.ended(uri, timeout=600)
            text = (root / f"{name}.cu").read_text()
            measured[f"{name}_background"] = session.reached(name, text)
    finally:
        await session.close()
    if log is not None:  # where the second file's seconds to its timing went
        opened = worker_runs(log, second)
        measured["second_file_worker"] = opened[0] if opened else None
    return measured


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", nargs="*", default=DEFAULT)
    parser.add_argument(
        "--saves", type=int, default=3, help="edits saved, on a spare worker and through the server"
    )
    parser.add_argument(
        "--server-only",
        action="store_true",
        help="only the language server's measurements (open, saves) of the plain examples; "
        "written to latency-server-<gpu>.json",
    )
    parser.add_argument(
        "--rapid-saves",
        type=int,
        default=10,
        help="with --server-only: saves of the rapid rhythm, over the examples in turn",
    )
    parser.add_argument(
        "--part",
        choices=PARTS,
        action="append",
        help="with --server-only: only this part (repeatable; default: all), merged into the "
        "result already written for this GPU: rhythms (the rapid rhythm and the busy open, "
        "over the first two of --examples), per-file (each example's open and saves, and the "
        "idle rhythm over every file measured so far)",
    )
    parser.add_argument(
        "--server-logs",
        type=Path,
        help="a directory for the language server's INFO log of each example (<name>-server.log)",
    )
    args = parser.parse_args()
    if args.server_logs is not None:
        args.server_logs.mkdir(parents=True, exist_ok=True)
    if args.server_only:
        names = [name for name in args.examples if name in SERVER_EXAMPLES]
        if "rhythms" in (args.part or PARTS) and len(names) < 2:
            parser.error("the rhythms part edits two files: give two of " + str(SERVER_EXAMPLES))
        parts = args.part or list(PARTS)
        return _server_only(names, args.saves, args.rapid_saves, args.server_logs, parts)
    results = {}
    server = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.examples:
            work = Path(scratch) / name
            work.mkdir()
            for file in EXAMPLES.glob(f"{name}.*"):
                shutil.copy(file, work / file.name)
            source = work / f"{name}.cu"
            settings = Settings(cache_dir=str(work / "cache"))
            cold = measure(source, settings)
            warm = measure(source, settings)
            spare = asyncio.run(on_spare_worker(source, settings, args.saves))
            entry = {"cold": cold, "warm": warm, "on_spare_worker": spare}
            if name == "bias_gelu_scale":
                text = source.read_text()
                source.write_text(text.replace("0.5f, n);", "0.5f * 1.0f, n);"))
                entry["after_one_line_edit"] = measure(source, settings)
            results[name] = entry
            if name in SERVER_EXAMPLES:
                server[name] = _measure_server(Path(scratch), name, args.saves, args.server_logs)
            print(
                f"{name:16} cold {cold['wall_s']:7.2f}s  warm {warm['wall_s']:6.2f}s  "
                f"verified={warm['verified']} err={warm['error']}",
                flush=True,
            )
            for run in spare["after_edit"]:
                print(
                    f"{name:16} edit on a spare worker {run['wall_s']:.3f}s  "
                    f"build {run['build_s']}s  phases {run['phases_s']}",
                    flush=True,
                )
    payload = {"examples": results, "through_language_server": server, "phases": PHASES}
    path = write_result("latency", payload)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
