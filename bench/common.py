"""Helpers shared by the benchmark scripts: where results go and what machine they came from."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from kernelblaster.atomic_files import write_atomically

RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parents[1]


def repo_relative(path: Path) -> str:
    """`path` as recorded in a result: relative to the repository when it is inside it, so a
    result reads the same on every machine."""
    resolved = path.resolve()
    return str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else str(path)


def first_visible_gpu() -> str:
    """The GPU this process's CUDA device 0 is, as nvidia-smi's `-i` takes it: nvidia-smi
    ignores CUDA_VISIBLE_DEVICES, so a bench run on one GPU of a multi-GPU host names it."""
    return os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip() or "0"


def host_gpu_models() -> set[str]:
    """The models of this host's GPUs, as nvidia-smi names them (none without it)."""
    if not shutil.which("nvidia-smi"):
        return set()
    done = subprocess.run(
        ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True
    )
    return {line.strip() for line in done.stdout.splitlines() if line.strip()}


def device_name() -> str:
    """The GPU's name from nvidia-smi, or "cpu-<hostname>" on a machine without one."""
    if shutil.which("nvidia-smi"):
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", first_visible_gpu()],
            capture_output=True,
            text=True,
        )
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip().splitlines()[0]
    return f"cpu-{platform.node()}"


def slug(device: str) -> str:
    """A device name as a file-name part: "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"."""
    return re.sub(r"[^A-Za-z0-9]+", "-", device).strip("-").lower()


def write_result(kind: str, payload: dict, path: Path | None = None) -> Path:
    """The result, as bench/results/<kind>-<gpu>.json (or `path`), written in one step: a run
    killed while writing leaves the previous file whole."""
    device = device_name()
    path = path or RESULTS / f"{kind}-{slug(device)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps({"device": device, **payload}, indent=2) + "\n")
    return path


def tree_files(folder: Path) -> list[Path]:
    """Every file under `folder` but Python's byte-code caches."""
    return [
        path
        for path in folder.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    ]


def files_digest(files: Iterable[Path], root: Path) -> str:
    """sha256 over each file's path relative to `root` and its content, in path order: the
    same files give the same digest on every machine, and any edit, addition or removal
    changes it."""
    digest = hashlib.sha256()
    for path in sorted({Path(f).resolve() for f in files}):
        relative = path.relative_to(root.resolve()) if path.is_relative_to(root.resolve()) else path
        digest.update(f"\0{relative}\0".encode() + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def git_commit(folder: Path = REPO) -> str | None:
    """The checkout's commit, with "-dirty" when its tracked files differ from it; None where
    `folder` is no git checkout (a copy of the working tree)."""
    try:
        head = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
        )
    except OSError:
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


async def start_language_server(root: Path, settings: dict, log: Path | None = None):
    """`kernelblaster serve` over stdio under pytest-lsp's client, initialized on the trusted
    workspace `root` with the `kernelblaster.*` `settings`; its INFO log appended to `log`, if
    given (when each build ahead ran, how long it took). The caller shuts it down."""
    from lsprotocol import types
    from pytest_lsp import ClientServerConfig, client_capabilities

    from kernelblaster.server.editor.documents import path_to_uri

    command = [sys.executable, "-m", "kernelblaster", "serve"]
    if log is not None:
        command = ["sh", "-c", 'exec "$@" --log-level INFO 2>>"$0"', str(log), *command]
    config = ClientServerConfig(server_command=command)
    client = await config.start()
    client.set_configuration({"kernelblaster": settings})
    await client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=path_to_uri(root),
            initialization_options={"trusted": True},
        )
    )
    return client
