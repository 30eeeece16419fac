"""The language server object: the resources its features share (settings, trust, the job queue,
the worker pool) and the state each feature owns: `documents` (open sources), `knowledge` (the
KB and its rankings), `candidates` (the best verified rewrites), `cache` (last worker results),
`history` (timings and kept reports), `jobs` (per-file jobs, GPU slots), `ahead` (builds of
unsaved text), `writing_kernels`. The pipelines keep no state: they change these objects.
Feature modules import it from here, never from app.py."""

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
