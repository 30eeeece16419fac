"""Type-check the installed package with mypy, as CI does: `python tools/typecheck.py`.

The package's subpackages live in top-level folders (pyproject's package-dir: kernelblaster.harness
is harness/, ...), a mapping that type checkers can't read from an editable install. So the
package is laid out as Python sees it, in a temporary tree of links to the real files, and mypy
checks that tree; its messages are given back with the real paths."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUBPACKAGES = {"harness": "harness", "kb": "kb", "agents": "agents", "server": "server"}


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="kb-typecheck-") as tree:
        package = Path(tree) / "kernelblaster"
        package.mkdir()
        for path in (REPO / "kernelblaster").glob("*.py"):
            (package / path.name).symlink_to(path)
        for name, folder in SUBPACKAGES.items():
            (package / name).symlink_to(REPO / folder, target_is_directory=True)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "mypy",
                "--config-file",
                str(REPO / "pyproject.toml"),
                "-p",
                "kernelblaster",
            ],
            cwd=tree,
            capture_output=True,
            text=True,
        )
    output = done.stdout + done.stderr
    for name, folder in SUBPACKAGES.items():
        output = output.replace(f"kernelblaster/{name}/", f"{folder}/")
    sys.stdout.write(output)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
