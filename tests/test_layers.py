"""The layers ARCHITECTURE.md draws, held over folders rather than module lists:

- harness/ is a stack of subpackages, lowest first (HARNESS_LAYERS): a module imports only its
  own layer and the layers below it;
- agents/ and server/ are stacks of rooms, lowest first (AGENTS_ROOMS, SERVER_ROOMS): a module
  imports only its own room and the rooms of lower ranks (rooms of one rank not each other);
  their top-level modules (CLIs, the agents worker, app.py) are the top rank;
- kb/ knows harness's protocol and analysis only, the server also no more (it never loads the
  worker's layers, torch or the LLM stack), agents/ reaches down to harness's target layer and
  runs the rest through worker processes; nothing below the command line imports it;
- no module imports (directly or through others) a module that imports it: no circles;
- every module of the torch-free layers loads without torch, the LLM stack or the editor's code,
  in a fresh interpreter, because every process (the server included) imports them.

Imports are read from the source (every `import` statement, also those inside functions, which
are imports all the same when they run); `if TYPE_CHECKING:` blocks are left out of the circle
check only, since they never run. The circle check is graphlib's topological sort.
"""

from __future__ import annotations

import ast
import graphlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = {
    "kernelblaster": REPO / "kernelblaster",
    "kernelblaster.harness": REPO / "harness",
    "kernelblaster.kb": REPO / "kb",
    "kernelblaster.agents": REPO / "agents",
    "kernelblaster.server": REPO / "server",
}
# harness's layers, lowest first
HARNESS_LAYERS = ["protocol", "analysis", "build", "target", "native", "check", "profile", "worker"]
TORCH_FREE_LAYERS = ["protocol", "analysis", "build"]
# agents/'s and server/'s rooms, by rank, lowest first; "" is the package's own folder (the top)
AGENTS_ROOMS = [["llm"], ["policy"], ["loop"], ["kernelbench", "replay"], [""]]
SERVER_ROOMS = [
    ["editor"],
    ["results"],
    ["views"],
    ["session"],
    ["pipeline"],
    ["requests", "notifications", "commands"],
    [""],
]
ROOMS = {"agents": AGENTS_ROOMS, "server": SERVER_ROOMS}
MAX_MODULES = 16  # per folder: a flat folder larger than this is several rooms in one
# kernelblaster/'s own modules are below everything (settings, trust, atomic writes, ...: what
# every layer may import), except its command line, above everything: cli, *_cli, __main__.
# harness/__init__.py is a docstring.
BASE_PACKAGES = {"kernelblaster", "kernelblaster.harness"}
# the one module of harness's target layer that the editor's process imports: the `<stem>.cu`
# beside `<stem>.py` convention (torch-free, imports nothing of harness)
SERVER_SAFE = {"kernelblaster.harness.target.pairing"}
HEAVY = ("torch", "openai", "pygls", "kernelblaster.agents", "kernelblaster.server")


def _modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGE_DIRS.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join([package, *parts])
            if name in PACKAGE_DIRS and name != package:
                continue  # a subpackage's folder belongs to its own entry
            found[name] = path
    return found


MODULES = _modules()


def _in_type_checking(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def _imports(name: str, *, runtime_only: bool) -> set[str]:
    """The project's modules that module `name` imports."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = set()
    for node in ast.walk(tree):
        if runtime_only and _in_type_checking(node, parents):
            continue
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{name}:{node.lineno}: the project imports by absolute names"
            base = node.module or ""
            candidates = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        found |= {c for c in candidates if c in MODULES and c != name}
    return found


def _place(module: str) -> str:
    """Which layer a module is in: a harness layer's name, kb, a room of agents or server
    ("agents.loop"; "agents" for its top), base or cli."""
    parts = module.split(".")
    if module in BASE_PACKAGES:
        return "base"
    if len(parts) == 2 and parts[1] not in ("harness", "kb", "agents", "server"):
        is_command_line = parts[1] in ("cli", "__main__") or parts[1].endswith("_cli")
        return "cli" if is_command_line else "base"
    if module in SERVER_SAFE:
        return "pairing"
    if parts[1:2] == ["harness"]:
        assert len(parts) >= 3, f"{module}: harness/ holds only subpackages"
        return parts[2]
    if (parts[1] in ROOMS and len(parts) >= 4) or module in _ROOM_PACKAGES:
        return ".".join(parts[1:3])  # agents.loop, server.views, ...
    return parts[1]  # kb, or agents' or server's top


def _room_places(package: str) -> list[list[str]]:
    """The places of `package`'s rooms by rank ("agents.loop"; "agents" for its top)."""
    return [[f"{package}.{room}" if room else package for room in rank] for rank in ROOMS[package]]


_ROOM_PACKAGES = {
    f"kernelblaster.{place}"
    for package in ROOMS
    for rank in _room_places(package)
    for place in rank
}


def _rooms_below(place: str) -> set[str]:
    """`place`'s own room and every room of a lower rank of its package."""
    ranks = _room_places(place.split(".")[0])
    rank = next(i for i, names in enumerate(ranks) if place in names)
    return {place, *(name for names in ranks[:rank] for name in names)}


def _every_room(package: str) -> set[str]:
    return {name for names in _room_places(package) for name in names}


def _allowed(place: str) -> set[str]:
    if place == "pairing":
        return {"base"}
    if place in HARNESS_LAYERS:
        return {"base", "pairing", *HARNESS_LAYERS[: HARNESS_LAYERS.index(place) + 1]}
    if place.split(".")[0] == "server":
        return {"base", "kb", "protocol", "analysis", "pairing", *_rooms_below(place)}
    if place.split(".")[0] == "agents":
        harness = HARNESS_LAYERS[: HARNESS_LAYERS.index("target") + 1]
        return {"base", "kb", "pairing", *harness, *_rooms_below(place)}
    return {
        "base": {"base"},
        "kb": {"base", "kb", "protocol", "analysis"},  # (and not the pairing: kb knows no files)
        "cli": {
            "base",
            "cli",
            "kb",
            "pairing",
            *_every_room("agents"),
            *_every_room("server"),
            *HARNESS_LAYERS,
        },
    }[place]


def test_harness_holds_only_its_layers():
    top = {p.name for p in (REPO / "harness").iterdir() if not p.name.startswith((".", "_"))}
    assert top == set(HARNESS_LAYERS)
    for layer in HARNESS_LAYERS:
        modules = list((REPO / "harness" / layer).glob("*.py"))
        assert len(modules) <= 16, f"harness/{layer} has {len(modules)} modules: split it"


def test_agents_and_server_hold_only_their_rooms():
    for package, ranks in ROOMS.items():
        rooms = {room for rank in ranks for room in rank if room}
        folder = REPO / package
        found = {
            p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
        }
        assert found == rooms, f"{package}/ has rooms the layer test lacks"
        for room in ["", *rooms]:
            modules = list((folder / room).glob("*.py"))
            assert len(modules) <= MAX_MODULES, f"{package}/{room} has {len(modules)}: split it"


PLACES = [
    *HARNESS_LAYERS,
    "pairing",
    "kb",
    *sorted(_every_room("agents")),
    *sorted(_every_room("server")),
    "base",
    "cli",
]


@pytest.mark.parametrize("place", PLACES)
def test_each_layer_imports_only_the_layers_below_it(place):
    offenders = [
        f"{module} imports {imported} ({_place(imported)})"
        for module in sorted(MODULES)
        if _place(module) == place
        for imported in sorted(_imports(module, runtime_only=False))
        if _place(imported) not in _allowed(place)
    ]
    assert offenders == []


def test_no_import_circles():
    graph = {module: _imports(module, runtime_only=True) for module in MODULES}
    # a package's __init__ importing its own modules is how Python loads them, not a circle
    for module, imported in graph.items():
        if MODULES[module].name == "__init__.py":
            graph[module] = {i for i in imported if not i.startswith(module + ".")}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as circle:
        pytest.fail(f"import circle: {' -> '.join(circle.args[1])}")


TORCH_FREE = sorted(m for m in MODULES if _place(m) in [*TORCH_FREE_LAYERS, "pairing"])


@pytest.mark.parametrize("module", TORCH_FREE)
def test_torch_free_layers_load_without_torch_llm_or_editor_code(module):
    probe = (
        f"import sys, json; import {module}; "
        f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({HEAVY!r}))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert json.loads(done.stdout) == [], f"{module} loads them"


def test_the_layer_check_sees_a_violation(tmp_path, monkeypatch):
    """The checks above would fail on an upward import: an analysis module importing the
    worker is reported (guards against a walker that silently finds no imports)."""
    fake = tmp_path / "fake.py"
    fake.write_text("def f():\n    from kernelblaster.harness.worker import serve\n")
    monkeypatch.setitem(MODULES, "kernelblaster.harness.analysis.fake", fake)
    assert "kernelblaster.harness.worker.serve" in _imports(
        "kernelblaster.harness.analysis.fake", runtime_only=False
    )
    assert "worker" not in _allowed(_place("kernelblaster.harness.analysis.fake"))


@pytest.mark.parametrize(
    ("module", "imported"),
    [
        # a lower room importing a higher one (the KernelBench runner importing the CLI)
        ("kernelblaster.agents.kernelbench.runner", "kernelblaster.agents.optimize_cli"),
        ("kernelblaster.agents.llm.lowering", "kernelblaster.agents.loop.evaluation"),
        # rooms of one rank
        ("kernelblaster.agents.replay.mode", "kernelblaster.agents.kernelbench.runner"),
        ("kernelblaster.server.requests.hover", "kernelblaster.server.commands.optimize"),
        # the views are pure: no session, no pipeline
        ("kernelblaster.server.views.hover", "kernelblaster.server.session.language_server"),
        ("kernelblaster.server.results.cache", "kernelblaster.server.views.diagnostics"),
    ],
)
def test_the_room_check_sees_an_upward_import(module, imported):
    assert _place(imported) not in _allowed(_place(module))


def test_the_room_check_allows_a_downward_import():
    assert _place("kernelblaster.server.editor.documents") in _allowed(
        _place("kernelblaster.server.commands.optimize")
    )
    assert _place("kernelblaster.agents.llm.client") in _allowed(_place("kernelblaster.agents"))
