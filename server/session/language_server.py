"""The language server object: the resources its features share (settings, trust, the job
queue, the worker pool) and the features that own their own state. Handlers are wired to
it in app.py; the feature modules take it as their `ls` argument and import it from here, never
from app.py.

Feature map (state owner → who reads it):
- `documents` (OpenDocuments): the open kernel sources and the text each file's last job read
  → the save pipeline, the watcher's re-runs, diagnostics.
- `knowledge` (KnowledgeFeature): the open KB and its ranked techniques per file and kernel
  → hover, code actions, the knowledge-base view; refreshed by the save pipeline and optimize.
- `candidates` (KeptCandidates): the best verified rewrite per kernel → code actions,
  `showDiff`, the knowledge-base view; written by optimize.
- `cache` (ResultCache): each file's last worker result → hover, diagnostics, ranking.
- `history` (SaveHistory): each file's timing history per GPU and reference, and its kept
  Nsight Compute reports → the deltas in diagnostics, hover and status, the code lens, the
  profile view; written by the save pipeline.
- `jobs` (JobManager): one debounced, cancellable job per file and the GPU's slots (interactive
  work first, background work yields) → the save pipeline, optimize, writing a kernel.
- `ahead` (AheadBuilds): each open file's build of its unsaved text, started when typing pauses
  → the save pipeline lets the one of the saved text finish (starts it, if it still waits
  out the pause) and cancels any other.
- `writing_kernels`: the references whose first kernel the LLM is writing → write_kernel.py
  refuses a second run for the same file.
The save pipeline (pipeline.py), optimize (optimize.py) and writing a kernel (write_kernel.py)
keep no state of their own: they read and change these objects through their methods."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pygls.lsp.server import LanguageServer

from kernelblaster import __version__
from kernelblaster.harness.protocol.worker_client import SpareWorkers
from kernelblaster.server.editor.configuration import InitOptions
from kernelblaster.server.editor.documents import OpenDocuments, is_kernel_source, uri_to_path
from kernelblaster.server.editor.progress import CancelRegistry
from kernelblaster.server.editor.protocol import KernelBlasterProtocol, report_out_of_band
from kernelblaster.server.editor.trust import TrustGate
from kernelblaster.server.editor.watcher import SourceWatcher
from kernelblaster.server.results.cache import ResultCache
from kernelblaster.server.results.candidates import KeptCandidates
from kernelblaster.server.results.history import SaveHistory
from kernelblaster.server.results.knowledge import KnowledgeFeature
from kernelblaster.server.session.build_ahead import AheadBuilds
from kernelblaster.server.session.jobs import JobManager
from kernelblaster.settings import Settings

if TYPE_CHECKING:
    from pygls.server import ServerErrors


class KernelBlasterServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("kernelblaster", __version__, protocol_cls=KernelBlasterProtocol)
        self.trust = TrustGate(False)
        self.init_options = InitOptions()
        self.settings = Settings()
        self.ready = asyncio.Event()  # set once the first settings are loaded
        self.jobs = JobManager()
        self.ahead = AheadBuilds()
        self.cancels = CancelRegistry()
        self.cache = ResultCache()
        self.history = SaveHistory(self.cache)
        self.documents = OpenDocuments()
        self.knowledge = KnowledgeFeature()
        self.candidates = KeptCandidates()
        self.writing_kernels: set[Path] = set()
        self.watcher: SourceWatcher | None = None
        # Three: a developer who starts saving every second or two, over several open files,
        # finds warm spares for the first saves while their replacements warm up (3-4 s);
        # four while saves keep coming that fast (worker_client.py). Each holds a CUDA context
        # and the reference side of the request it expects.
        self.spare_workers = SpareWorkers(least=3, most=4)
        self._background: set[asyncio.Task[Any]] = set()

    def report_server_error(self, error: Exception, source: ServerErrors) -> None:
        # Out-of-band errors are logged, never shown as pygls' "Error in server" popup.
        report_out_of_band(self.protocol, error)

    def kernel_source(self, uri: str):
        """The open kernel source at `uri` and its path, or (None, None)."""
        document = self.workspace.text_documents.get(uri)
        path = uri_to_path(uri)
        if document is None or not is_kernel_source(path, document.language_id):
            return None, None
        return document, path

    def workspace_root(self) -> Path | None:
        root = self.workspace.root_path
        return Path(root) if root else None

    def background(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
