"""`kernelblaster.knowledgeBase`: the knowledge-base view's data, with this workspace's part."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from pygls.exceptions import JsonRpcInternalError

from kernelblaster.server.editor.documents import is_kernel_source, uri_to_path
from kernelblaster.server.session.language_server import KernelBlasterServer
from kernelblaster.server.views.knowledge import knowledge_base_answer


async def knowledge_base_command(ls: KernelBlasterServer, *args: Any) -> dict:
    await ls.ready.wait()
    documents = {
        path: document.source
        for uri, document in ls.workspace.text_documents.items()
        if (path := uri_to_path(uri)) is not None and is_kernel_source(path)
    }
    kb = ls.knowledge.kb
    if kb is None:
        raise JsonRpcInternalError(
            "The knowledge base could not be opened: see kernelblaster.kbPath."
        )
    answer = await asyncio.to_thread(
        knowledge_base_answer, kb, documents, ls.candidates.by_source()
    )
    return msgspec.to_builtins(answer)
