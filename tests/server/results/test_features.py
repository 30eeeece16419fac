"""The server's feature objects on their own: each owns its state and is changed only through
its methods (the LSP tests drive them through the server)."""

from __future__ import annotations

from pathlib import Path

from kernelblaster.harness.analysis.classify import classify
from kernelblaster.server.editor.documents import OpenDocuments
from kernelblaster.server.results.cache import KeptCandidate
from kernelblaster.server.results.candidates import KeptCandidates
from kernelblaster.server.results.knowledge import KnowledgeFeature
from kernelblaster.server.views.knowledge import knowledge_base_answer
from tests.server.conftest import softmax_response


def softmax_states(source: Path):
    profile = softmax_response(source).profile
    return {k.name: classify(k, arch=profile.arch, device=profile.device) for k in profile.kernels}


async def test_the_knowledge_feature_ranks_with_the_kb_it_opened_and_keeps_it_on_a_bad_path(
    tmp_path,
):
    source = tmp_path / "softmax.cu"
    states = softmax_states(source)
    knowledge = KnowledgeFeature()
    assert knowledge.kb is None  # no KB yet: the view says so
    await knowledge.refresh(source, states)
    assert knowledge.for_kernel(source, "softmax_rowthread") == []

    assert await knowledge.use(tmp_path / "kb.sqlite3") is None
    await knowledge.refresh(source, states)
    ranked = knowledge.for_kernel(source, "softmax_rowthread")
    assert ranked and ranked == sorted(ranked, key=lambda t: -t.predicted_speedup)
    assert await knowledge.use(tmp_path / "kb.sqlite3") is None  # the same KB: kept open

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    problem = await knowledge.use(blocker / "kb.sqlite3")
    assert problem is not None and problem.startswith(f"knowledge base {blocker / 'kb.sqlite3'}")
    assert problem.endswith("set kernelblaster.kbPath")
    await knowledge.refresh(source, states)  # still ranked by the KB that was open
    assert knowledge.for_kernel(source, "softmax_rowthread") == ranked
    assert knowledge.kb is not None
    text = "__global__ void k(float* x) { x[0] = 1.f; }\n"
    answer = knowledge_base_answer(knowledge.kb, {source: text}, {})
    assert answer.kb.summary.path == str(tmp_path / "kb.sqlite3")
    assert [link.kernel for link in answer.workspace.kernels] == ["k"]

    knowledge.forget(source)
    assert knowledge.for_kernel(source, "softmax_rowthread") == []
    knowledge.close()
    await knowledge.refresh(source, states)
    assert knowledge.for_kernel(source, "softmax_rowthread") == []


def test_open_documents_name_files_as_the_client_does_and_remember_what_was_read(tmp_path):
    documents = OpenDocuments()
    path = tmp_path / "k.cu"
    documents.open(path, "file:///client/spelling/k.cu")
    assert documents.uri_for(path) == "file:///client/spelling/k.cu"
    assert documents.uri_of(path) == "file:///client/spelling/k.cu"
    assert documents.changed_since_read(path, "text")  # never read
    documents.record_read(path, "text")
    assert not documents.changed_since_read(path, "text")
    assert documents.changed_since_read(path, "text, edited")
    assert documents.close(path) and not documents.close(path)
    assert documents.uri_of(path) is None
    assert documents.uri_for(path) == path.as_uri()
    assert documents.paths() == []


def test_kept_candidates_are_replaced_per_source_and_copied_for_readers(tmp_path):
    source = tmp_path / "k.cu"
    kept = KeptCandidates()
    old = KeptCandidate(kernel="k", path="old.cu", base_hash="")
    kept.replace(source, {"k": old})
    assert kept.get(source, "k") is old
    new = KeptCandidate(kernel="k", path="new.cu", speedup=2.0, base_hash="h")
    kept.keep(source, new)
    snapshot = kept.by_source()
    kept.keep(source, KeptCandidate(kernel="j", path="j.cu", base_hash="h"))
    assert snapshot == {source: {"k": new}}  # a reader's copy does not change under it
    assert kept.get(source, "j") is not None and kept.get(tmp_path / "other.cu", "k") is None
