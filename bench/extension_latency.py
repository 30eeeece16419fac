"""Torch-extension targets after a one-line edit, single-file and split (kernels apart from
bindings).

    python -m bench.extension_latency --form two_file|single_file [--saves 2]

Through the real worker (cold, then a one-line edit) and the real language server (open, then
`--saves` edits: save → `timing` and save → `state` diagnostics). One form per run, to stay
within a few minutes. Writes bench/results/extension-latency-<form>-<gpu>.json."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

from bench.common import write_result
from bench.latency import EXAMPLES, measure, through_server
from kernelblaster.settings import Settings

FORMS = {"two_file": "bias_gelu_scale_split", "single_file": "bias_gelu_scale"}
# The same code change in both forms: the scale argument of the last launch.
ONE_LINE_EDIT = ("0.5f, n);", "0.5f * 1.0f, n);")


def copy_example(name: str, directory: Path) -> Path:
    directory.mkdir()
    for file in EXAMPLES.glob(f"{name}.*"):
        shutil.copy(file, directory / file.name)
    return directory / f"{name}.cu"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--form", choices=sorted(FORMS), required=True)
    parser.add_argument("--saves", type=int, default=2, help="edits saved through the server")
    args = parser.parse_args()
    name = FORMS[args.form]
    with tempfile.TemporaryDirectory() as scratch:
        source = copy_example(name, Path(scratch) / "worker")
        settings = Settings(cache_dir=str(source.parent / "cache"))
        cold = measure(source, settings)
        print(f"{name} cold: {cold}", flush=True)
        text = source.read_text()
        if ONE_LINE_EDIT[0] not in text:
            raise SystemExit(f"{source.name} no longer has {ONE_LINE_EDIT[0]!r} to edit")
        source.write_text(text.replace(*ONE_LINE_EDIT, 1))
        edited = measure(source, settings)
        print(f"{name} after a one-line edit: {edited}", flush=True)
        server_source = copy_example(name, Path(scratch) / "server")
        try:
            server = asyncio.run(
                through_server(server_source, server_source.parent / "cache", args.saves)
            )
        except (RuntimeError, TimeoutError) as exc:  # recorded with what was measured
            server = {"error": str(exc)}
        print(f"{name} through the server: {server}", flush=True)
    path = write_result(
        f"extension-latency-{args.form.replace('_', '-')}",
        {
            "form": args.form,
            "example": name,
            "worker": {"cold": cold, "after_one_line_edit": edited},
            "through_language_server": server,
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
