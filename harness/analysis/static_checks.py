"""Reward-hacking patterns in a candidate's source: warnings that deserve a look, never a verdict
(a stream API on a path never taken is no hack). The runtime checks of harness/check/verify.py
decide; a `calls_library` warning also has them watch a plain launcher's kernels. Pure: no torch,
no GPU."""

from __future__ import annotations

import ast
import re

from kernelblaster.harness.protocol.records import VerifyWarning

_LIBRARY_CALLS = re.compile(
    r"\b(cublas\w*|cublasLt\w*|cudnn\w*|cufft\w*|cusparse\w*)\s*\("
    r"|\b(?:torch|at)::(matmul|mm|bmm|addmm|linear|conv\w*|softmax|log_softmax|layer_norm|"
    r"batch_norm|relu|gelu|sigmoid|tanh|sum|mean|max|min|exp|add|mul|div|einsum|baddbmm)\s*\("
    r"|\.(matmul|mm|bmm|softmax|sum|mean|relu|exp)\s*\("
)
_SIDE_STREAM = re.compile(
    r"\b(cudaStreamCreate\w*|getStreamFromPool|cudaStreamNonBlocking|cudaLaunchHostFunc)\b"
)
_SPACE = re.compile(r"\s*")
_CATCH_ALL = re.compile(r"\bcatch\s*\(\s*(\.\.\.|const\s+std::exception\s*&\s*\w*|std::exception)")

# torch.cuda.Stream(...), torch.cuda.stream(...), torch.cuda.ExternalStream(...)
_PY_STREAMS = {"Stream", "stream", "ExternalStream"}
_PY_LIBRARY_CALLS = {
    "matmul", "mm", "bmm", "addmm", "einsum", "softmax", "log_softmax", "conv1d", "conv2d",
    "conv3d", "linear", "layer_norm", "batch_norm", "relu", "gelu", "sigmoid", "tanh",
}  # fmt: skip
# Only calls through torch's namespaces are flagged: `x.relu()` and an extension's `ext.relu(x)`
# look alike, and the profiler sees the kernels actually launched anyway.
_PY_TORCH_ROOTS = {"torch", "F", "nn", "functional"}


def _root_name(node: ast.expr) -> str:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def strip_comments(code: str) -> str:
    """Blank out // and /* */ comments, keeping offsets (so line numbers stay right)."""

    def blank(match: re.Match) -> str:
        return re.sub(r"[^\n]", " ", match.group(0))

    return re.sub(r"//[^\n]*|/\*.*?\*/", blank, code, flags=re.DOTALL)


def _wraps_a_match(code: str, match: re.Match[str]) -> bool:
    """`cublasCheck(cublasSgemm(...))` (llm.c's error check, named like the library): the call
    is the inner one, so the wrapper gets no warning of its own."""
    first_argument = _SPACE.match(code, match.end())
    return first_argument is not None and bool(_LIBRARY_CALLS.match(code, first_argument.end()))


def check_cuda_source(text: str, *, allow_library_calls: bool = False) -> list[VerifyWarning]:
    code = strip_comments(text)
    findings: list[VerifyWarning] = []
    if not allow_library_calls:
        for match in _LIBRARY_CALLS.finditer(code):
            if _wraps_a_match(code, match):
                continue
            findings.append(
                VerifyWarning(
                    kind="calls_library",
                    message=f"calls `{match.group(0).strip('( ')}`: the kernels it launches are "
                    "checked against the ones it defines",
                    line=_line_of(code, match.start()),
                )
            )
    stream_lines: set[int] = set()
    for match in _SIDE_STREAM.finditer(code):
        line = _line_of(code, match.start())
        if line in stream_lines:  # `cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)`
            continue
        stream_lines.add(line)
        findings.append(
            VerifyWarning(
                kind="side_stream",
                message=f"`{match.group(0)}`: work on another stream must still finish inside the "
                "caller's stream (checked when it runs)",
                line=line,
            )
        )
    for match in _CATCH_ALL.finditer(code):
        findings.append(
            VerifyWarning(
                kind="swallowed_exception",
                message="a catch-all handler can hide a failed kernel launch (its outputs are "
                "checked anyway)",
                line=_line_of(code, match.start()),
            )
        )
    return findings


def _handler_swallows(handler: ast.ExceptHandler) -> bool:
    broad = handler.type is None or (
        isinstance(handler.type, ast.Name)
        and handler.type.id in ("Exception", "BaseException", "RuntimeError")
    )
    reraises = any(isinstance(node, ast.Raise) for node in ast.walk(handler))
    return broad and not reraises


def check_python_solution(
    text: str, *, reference_module: str | None = None, allow_library_calls: bool = False
) -> list[VerifyWarning]:
    """Checks on a KernelBench solution file (ModelNew)."""
    findings: list[VerifyWarning] = []
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                if _handler_swallows(handler):
                    findings.append(
                        VerifyWarning(
                            kind="swallowed_exception",
                            message="a broad `except` without re-raise can hide a failed kernel",
                            line=handler.lineno,
                        )
                    )
        elif isinstance(node, ast.Name) and node.id == "Model":
            findings.append(
                VerifyWarning(
                    kind="reads_reference",
                    message="uses the reference's `Model`",
                    line=node.lineno,
                )
            )
        elif isinstance(node, ast.Import | ast.ImportFrom) and reference_module:
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            if any(n.split(".")[-1] == reference_module for n in names):
                findings.append(
                    VerifyWarning(
                        kind="reads_reference",
                        message=f"imports the reference module {reference_module}",
                        line=node.lineno,
                    )
                )
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _PY_STREAMS
            and "cuda" in ast.unparse(node.func.value)
        ):
            findings.append(
                VerifyWarning(
                    kind="side_stream",
                    message=f"`{ast.unparse(node.func)}`: work on another stream must still "
                    "finish inside the caller's stream (checked when it runs)",
                    line=node.lineno,
                )
            )
        elif (
            not allow_library_calls
            and isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _PY_LIBRARY_CALLS
            and _root_name(node.func) in _PY_TORCH_ROOTS
        ):
            findings.append(
                VerifyWarning(
                    kind="calls_library",
                    message=f"calls `{ast.unparse(node.func)}` instead of its own kernel",
                    line=node.lineno,
                )
            )
    for string in (n for n in ast.walk(tree) if isinstance(n, ast.Constant)):
        if isinstance(string.value, str) and "__global__" in string.value:
            for finding in check_cuda_source(string.value, allow_library_calls=allow_library_calls):
                finding.line = string.lineno + (finding.line or 1) - 1
                findings.append(finding)
    return findings
