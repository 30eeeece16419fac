"""The fresh-machine acceptance run (issue 42): a new user's install and main jobs on a bare GPU.

    python3 -m bench.fresh_machine                 # on the GPU machine, .whl/ carried
    python3 -m bench.fresh_machine --installed .venv --budget-s 300   # a dry run elsewhere

With an empty HOME and XDG folders it installs from the carried wheels and runs, through the
installed `kernelblaster`: build and check of examples/softmax.cu, the check under
compute-sanitizer, optimize against a scripted endpoint, `bench kernelbench` on two problems, a
saved file under a real LSP client, and init. Writes
bench/results/fresh-machine-<gpu>.json (and to $OUT), prints a table, exits 1 when a step failed.
The first call of every device session (CONTRIBUTING.md); it fits one 10-minute call."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import site
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import kernelbench_mechanics, openai_server
from bench.common import REPO, RESULTS, device_name, slug

EXAMPLES = REPO / "examples"
KERNELBENCH = REPO / "bench" / "kernelbench"
ANSWERS = KERNELBENCH / "answers"
BENCH_PROBLEMS = (
    KERNELBENCH / "level1" / "19_ReLU.py",
    KERNELBENCH / "level2" / "12_Gemm_Multiply_LeakyReLU.py",
)
GEMM = "12_Gemm_Multiply_LeakyReLU"
SANITIZE_TARGET_S = 10.0  # issue 42: the GEMM's sanitizer step, at its KernelBench size
STEP_LIMIT_S = {  # each step's own limit; the run's budget caps them all
    "install": 180,
    "build": 120,
    "check": 120,
    "check_sanitize": 180,
    "optimize": 240,
    "bench_kernelbench": 360,
    "lsp_save": 180,
    "init": 180,
}
RESERVE_S = 10  # kept back at the end of the budget to write the results


class StepFailed(Exception):
    """The step ran and its result is not what a user must get; the message says what."""


@dataclass
class Step:
    name: str
    ok: bool = False
    seconds: float = 0.0
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. sanitize_s

    def record(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.ok,
            "seconds": round(self.seconds, 1),
            "detail": self.detail,
            **self.extra,
        }


class FreshMachine:
    """One acceptance run: its fresh home, its environment, its log and its steps."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.began = time.monotonic()
        self.root = Path(tempfile.mkdtemp(prefix="fresh-machine-", dir=args.scratch))
        self.home = self.root / "home"
        self.home.mkdir()
        self.home_empty = not any(self.home.iterdir())
        self.log_path = self.root / "fresh-machine.log"
        self.venv = args.installed.resolve() if args.installed else self.root / "venv"
        self.steps: list[Step] = []
        self._step_deadline = time.monotonic()
        self._endpoint: subprocess.Popen | None = None  # the scripted endpoint (llm_env)
        self._base_url = ""
        self.optimize: dict[str, Any] = {"improved": False, "speedup": None, "sanitizer": None}
        self.env = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(("KERNELBLASTER_", "XDG_", "PYTHON", "VIRTUAL_ENV"))
        }
        self.env.update(
            HOME=str(self.home),
            XDG_CACHE_HOME=str(self.home / ".cache"),
            XDG_DATA_HOME=str(self.home / ".local" / "share"),
            XDG_CONFIG_HOME=str(self.home / ".config"),
            PYTHONUNBUFFERED="1",
        )

    # --- running ------------------------------------------------------------------------

    def log(self, text: str) -> None:
        print(text, flush=True)
        with self.log_path.open("a", encoding="utf-8") as out:
            out.write(text + "\n")

    def left_s(self) -> float:
        return self.args.budget_s - RESERVE_S - (time.monotonic() - self.began)

    def run(
        self, command: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        """`command` in the fresh environment, its output in the log; within what is left of
        the step's limit (subprocess.TimeoutExpired past it)."""
        self.log("$ " + shlex.join(command))
        done = subprocess.run(
            command,
            cwd=cwd or self.root,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=max(1.0, min(self._step_deadline - time.monotonic(), self.left_s())),
        )
        for stream in (done.stdout, done.stderr):
            if stream.strip():
                self.log(stream.rstrip()[-6000:])
        self.log(f"(exit {done.returncode})")
        return done

    def kernelblaster(
        self, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        return self.run([str(self.venv / "bin" / "kernelblaster"), *args], cwd=cwd, env=env)

    def step(self, name: str, body: Callable[[Step], str]) -> None:
        """Run one step; its detail is what `body` returns, or why it failed."""
        step = Step(name)
        self.steps.append(step)
        limit = min(STEP_LIMIT_S[name], self.left_s())
        if limit < 5:
            step.detail = "not run: the run's time budget was spent before it"
            self.log(f"== {name}: {step.detail}")
            return
        self._step_deadline = time.monotonic() + limit
        self.log(f"== {name} (at most {limit:.0f} s)")
        began = time.monotonic()
        try:
            step.detail, step.ok = body(step), True
        except StepFailed as failed:
            step.detail = str(failed)
        except subprocess.TimeoutExpired as late:
            step.detail = f"ran past its {limit:.0f} s: {shlex.join(map(str, late.cmd))}"
        except (OSError, ValueError, KeyError) as exc:  # the script's own reading failed
            step.detail = f"{type(exc).__name__}: {exc}"
        step.seconds = time.monotonic() - began
        self.log(f"== {name}: {'ok' if step.ok else 'FAILED'} ({step.seconds:.1f} s) {step.detail}")

    # --- the steps ----------------------------------------------------------------------

    def install(self, step: Step) -> str:
        """A venv seeing the machine's PyTorch (its python3 is itself a venv, whose packages a
        --system-site-packages venv would not see: a .pth names them), then the project's
        dependencies from .whl/ and the project, editable, as the README says."""
        if self.args.installed:
            raise StepFailed(f"not run: --installed {self.args.installed} used instead")
        python = self.venv / "bin" / "python"
        self._must(
            self.run(
                [
                    sys.executable,
                    "-m",
                    "venv",
                    "--system-site-packages",
                    "--without-pip",
                    str(self.venv),
                ]
            ),
            "creating the venv",
        )
        purelib = Path(
            self._must(
                self.run(
                    [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
                ),
                "asking the venv for its site-packages",
            ).stdout.strip()
        )
        ncu_report = _ncu_report_folder()
        seen = [*site.getsitepackages(), *([str(ncu_report)] if ncu_report else [])]
        (purelib / "machine-packages.pth").write_text("\n".join(seen) + "\n")
        folder = self.args.wheels
        wheels = sorted(str(w) for w in folder.glob("*.whl"))
        if not wheels:
            raise StepFailed(f"no wheels in {folder}: run bench/device_wheels.sh, carry .whl")
        pip = [str(python), "-m", "pip", "install", "-q", "--no-index", "--no-cache-dir"]
        commands = [
            [*pip, "--find-links", str(folder), *wheels],
            [*pip, "--no-deps", "--no-build-isolation", "-e", str(REPO)],
        ]
        for command in commands:
            self._must(self.run(command), "pip install")
        found = self._must(self.run([str(python), "-c", _INSTALLED_PROBE]), "its dependencies")
        return (
            f"{' && '.join(shlex.join(c) for c in commands)} (venv --system-site-packages, "
            f"ncu_report from {ncu_report}); torch {found.stdout.strip()}"
        )

    def build(self, step: Step) -> str:
        built = self._json(self.kernelblaster("build", str(EXAMPLES / "softmax.cu"), "--json"))
        if not built.get("ok") or not built.get("resources"):
            raise StepFailed(f"build failed: {json.dumps(built)[:400]}")
        builds = self.home / ".cache" / "kernelblaster" / "builds"
        if not builds.is_dir():
            raise StepFailed(f"built, but not into the fresh cache {builds}")
        kernel = built["resources"][0]
        return (
            f"{kernel['demangled'].split('(')[0]}: {kernel['registers']} registers, "
            f"theoretical occupancy {kernel['theoretical_occupancy']:.2f} ({built['arch']}), "
            f"into {builds}"
        )

    def check(self, step: Step) -> str:
        check = self._checked(self.kernelblaster("check", str(EXAMPLES / "softmax.cu"), "--json"))
        return _timed(check)

    def check_sanitize(self, step: Step) -> str:
        done = self.kernelblaster("check", str(EXAMPLES / "softmax.cu"), "--sanitize", "--json")
        check = self._checked(done)
        sanitizer = check.get("sanitizer") or {}
        step.extra["sanitize_s"] = sanitizer.get("seconds")
        if sanitizer.get("status") != "passed":
            raise StepFailed(f"compute-sanitizer did not pass: {json.dumps(sanitizer)[:400]}")
        return f"{_timed(check)}; {_sanitized(sanitizer)}"

    def optimize_step(self, step: Step) -> str:
        folder = self.folder_of(
            "optimize",
            {
                "23_Softmax.py": KERNELBENCH / "level1" / "23_Softmax.py",
                "23_Softmax.cu": ANSWERS / "23_Softmax.init.cu",
            },
        )
        options = shlex.split("--rollouts 1 --depth 1 --seed 1 --json")
        done = self.kernelblaster(
            "optimize", "23_Softmax.cu", *options, cwd=folder, env=self.llm_env
        )
        result = self._json(done)
        sanitizer = result.get("sanitizer") or {}
        self.optimize = {
            "improved": result.get("improved", False),
            "speedup": result.get("speedup"),
            "sanitizer": sanitizer.get("status"),
        }
        step.extra["sanitize_s"] = sanitizer.get("seconds")
        steps = [
            f"{s['technique']} {s['outcome']} {s.get('measured_speedup') or 0:.2f}x"
            for s in result.get("steps", [])
        ]
        said = f"steps: {', '.join(steps) or 'none'}; {result.get('error') or ''}".strip("; ")
        if not result.get("improved"):
            passed = "; ".join(p["reason"] for p in result.get("passed_over", []))
            raise StepFailed(f"the faster rewrite was not kept ({said}) {passed}".strip())
        if sanitizer.get("status") != "passed":
            raise StepFailed(f"kept, but compute-sanitizer did not pass: {json.dumps(sanitizer)}")
        return f"improved {result['speedup']:.2f}x ({said}); {_sanitized(sanitizer)}"

    def bench_kernelbench(self, step: Step) -> str:
        problems = self.folder_of("kernelbench", {p.name: p for p in BENCH_PROBLEMS})
        results = self.root / "kernelbench-results"
        options = shlex.split("--mechanics --rollouts 1 --depth 1 --init-attempts 1 --seed 1")
        work = ["--results", str(results), "--work", str(self.root / "kernelbench-work")]
        done = self.kernelblaster(
            "bench", "kernelbench", str(problems), *options, *work, env=self.llm_env
        )
        files = sorted(results.glob("kernelbench-*.json"))
        if not files:
            raise StepFailed(f"no results file (exit {done.returncode}): {done.stderr[-400:]}")
        run = json.loads(files[0].read_text())
        step.extra["sanitize_s"] = {
            p["problem"]: (p.get("sanitizer") or {}).get("seconds") for p in run["problems"]
        }
        said, wrong = [], []
        for problem in run["problems"]:
            name, sanitizer = problem["problem"], problem.get("sanitizer") or {}
            gain = problem.get("optimize_speedup")
            said.append(
                f"{name}: {problem['status']}, optimize {gain or 0:.2f}x, {_sanitized(sanitizer)}"
            )
            if problem["status"] != "verified" or not problem.get("techniques") or not gain:
                wrong.append(f"{name} shows no optimize gain ({problem.get('detail', '')})")
            elif sanitizer.get("status") != "passed":
                wrong.append(f"{name}: compute-sanitizer {sanitizer.get('status')}")
            elif name == GEMM and sanitizer.get("seconds", 0) > SANITIZE_TARGET_S:
                wrong.append(
                    f"{name}: its sanitizer step took {sanitizer['seconds']:.1f} s, "
                    f"over {SANITIZE_TARGET_S:.0f} s"
                )
        if len(run["problems"]) != len(BENCH_PROBLEMS):
            wrong.append(f"{len(run['problems'])} of {len(BENCH_PROBLEMS)} problems ran")
        if wrong:
            raise StepFailed("; ".join([*wrong, *said]))
        return "; ".join(said)

    def lsp_save(self, step: Step) -> str:
        folder = self.folder_of(
            "lsp", {name: EXAMPLES / name for name in ("softmax.cu", "softmax.py")}
        )
        python = str(self.venv / "bin" / "python")
        done = self.run(
            [
                python,
                "-m",
                "bench.fresh_machine",
                "lsp-save",
                str(folder / "softmax.cu"),
                "--timeout-s",
                str(int(self._step_deadline - time.monotonic())),
            ],
            cwd=REPO,
        )
        answer = self._json(done)
        if not answer.get("ok"):
            raise StepFailed(answer.get("detail", "no answer"))
        return answer["detail"]

    def init(self, step: Step) -> str:
        name = "38_L1Norm_.py"
        problem = self.folder_of("init", {name: KERNELBENCH / "level1" / name}) / name
        result = self._json(
            self.kernelblaster("init", str(problem), "--attempts", "2", "--json", env=self.llm_env)
        )
        written = result.get("written")
        if not written or not Path(written).is_file():
            raise StepFailed(f"no kernel written: {result.get('error')}")
        check = result.get("check") or {}
        if not (check.get("verify") or {}).get("ok"):
            raise StepFailed(f"written but not verified: {json.dumps(check)[:400]}")
        return f"wrote {Path(written).name}, verified; {_timed(check)}"

    # --- helpers -------------------------------------------------------------------------

    def folder_of(self, name: str, files: dict[str, Path]) -> Path:
        """A new folder of the run holding copies of `files` (its name: the file copied)."""
        folder = self.root / name
        folder.mkdir()
        for copy, original in files.items():
            shutil.copyfile(original, folder / copy)
        return folder

    def _must(self, done: subprocess.CompletedProcess, what: str) -> subprocess.CompletedProcess:
        if done.returncode != 0:
            raise StepFailed(f"{what} failed (exit {done.returncode}): {done.stderr[-600:]}")
        return done

    def _json(self, done: subprocess.CompletedProcess) -> dict[str, Any]:
        try:
            return json.loads(done.stdout)
        except json.JSONDecodeError as exc:
            raise StepFailed(
                f"exit {done.returncode}, no JSON answer ({exc}): {done.stderr[-600:]}"
            ) from exc

    def _checked(self, done: subprocess.CompletedProcess) -> dict[str, Any]:
        response = self._json(done)
        check, error = response.get("check") or {}, response.get("error")
        if error or not (check.get("verify") or {}).get("ok") or not check.get("timing"):
            said = f"{error['kind']}: {error['message']} {error['fix']}" if error else ""
            raise StepFailed(f"not verified and timed: {said or json.dumps(check)[:400]}")
        return check

    # --- the whole run ------------------------------------------------------------------

    @property
    def llm_env(self) -> dict[str, str]:
        """The environment pointing the command at the scripted endpoint, started on first use
        in the venv's interpreter (the server reads the product's prompt templates)."""
        if self._endpoint is None:
            python = str(self.venv / "bin" / "python")
            command = [python, "-m", "bench.fresh_machine", "llm-endpoint"]
            self.log("$ " + shlex.join(command))
            self._endpoint = subprocess.Popen(
                command,
                cwd=REPO,
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert self._endpoint.stdout is not None
            self._base_url = self._endpoint.stdout.readline().strip()
        if not self._base_url.startswith("http"):
            raise StepFailed("the scripted endpoint did not start (see the log)")
        return {
            "KERNELBLASTER_LLM_BASE_URL": self._base_url,
            "KERNELBLASTER_LLM_MODEL": "test-model",
            "OPENAI_API_KEY": "sk-scripted",
        }

    def __call__(self) -> int:
        self.log(f"fresh home {self.home} (empty: {self.home_empty}), venv {self.venv}")
        try:
            for name, body in [
                ("install", self.install),
                ("build", self.build),
                ("check", self.check),
                ("check_sanitize", self.check_sanitize),
                ("optimize", self.optimize_step),
                ("bench_kernelbench", self.bench_kernelbench),
                ("lsp_save", self.lsp_save),
                ("init", self.init),
            ]:
                self.step(name, body)
        finally:
            if self._endpoint is not None:
                self._endpoint.communicate(input="")  # its stdin closed: it stops
        return self.finish()

    def finish(self) -> int:
        gpu = device_name()
        payload = {
            "gpu": gpu,
            "home_empty": self.home_empty,
            "steps": [s.record() for s in self.steps],
            "optimize": self.optimize,
        }
        path = self.args.results / f"fresh-machine-{slug(gpu)}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        self.log(f"wrote {path}")
        out = os.environ.get("OUT")
        if out:
            shutil.copy(path, Path(out) / path.name)
            shutil.copy(self.log_path, Path(out) / "fresh-machine.log")
        print(table(self.steps), flush=True)
        return 0 if all(s.ok for s in self.steps) else 1


# Run in the venv after the install: every dependency the project declares is there (ncu-report
# as the machine's module), and so is the machine's CUDA PyTorch. torch first, as in a worker:
# Nsight Compute's own ncu_report imported before torch crashed the interpreter (SIGSEGV) on
# an H200 machine (2026-11-29); the product imports them in this order only.
_INSTALLED_PROBE = r"""
import importlib.metadata as metadata, re, torch, ncu_report
wanted = [re.split(r"[ ;<>=!~\[]", r)[0] for r in metadata.requires("kernelblaster")
          if "extra ==" not in r and not r.startswith("ncu-report")]
missing = []
for name in wanted:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        missing.append(name)
if missing:
    raise SystemExit("not installed: " + ", ".join(missing))
print(torch.__version__, "on", torch.cuda.get_device_name() if torch.cuda.is_available() else
      "no GPU")
"""


def table(steps: list[Step]) -> str:
    rows = [f"{'step':<18} {'ok':<4} {'s':>6}  detail"]
    rows += [
        f"{s.name:<18} {'ok' if s.ok else 'FAIL':<4} {s.seconds:6.1f}  {s.detail[:110]}"
        for s in steps
    ]
    return "\n".join(rows)


def _ncu_report_folder() -> Path | None:
    """Nsight Compute's own `ncu_report` module, from the installation whose `ncu` is on PATH (the
    toolkit's and NVIDIA's standalone folders too): its 17 MB wheel would take a device call past
    the 64 MiB it carries."""
    ncu = shutil.which("ncu")
    if ncu is None:
        return None
    beside = list(Path(ncu).resolve().parents[:3])
    installs = [
        *beside,
        *(p for folder in beside for p in sorted(folder.glob("nsight-compute*"))),
        *sorted(Path("/opt/nvidia/nsight-compute").glob("*")),
    ]
    for folder in installs:
        if (folder / "extras" / "python" / "ncu_report.py").is_file():
            return folder / "extras" / "python"
    return None


def _timed(check: dict[str, Any]) -> str:
    eager = (check.get("eager") or {}).get("median_ms")
    versus = f" (PyTorch eager {eager:.4f} ms)" if eager else ""
    return f"verified, {check['timing']['median_ms']:.4f} ms{versus}"


def _sanitized(sanitizer: dict[str, Any]) -> str:
    if not sanitizer:
        return "no compute-sanitizer run"
    if sanitizer.get("status") == "not_run":
        return f"not checked for memory errors: {sanitizer.get('reason')}"
    return (
        f"compute-sanitizer {', '.join(sanitizer.get('tools', []))} {sanitizer['status']} on "
        f"{sanitizer.get('inputs')} in {sanitizer.get('seconds', 0):.1f} s"
    )


# --- the language-server step, in the venv's interpreter (it has pygls) ---------------------


def lsp_save(source: Path, timeout_s: float) -> dict[str, Any]:
    """Open and save `source` in `kernelblaster serve` (the venv's) under pygls' client; ok
    once a performance-state diagnostic arrives for it, not ok on a setup or run error."""
    import asyncio

    from lsprotocol import types
    from pygls.lsp.client import LanguageClient

    from kernelblaster.server.editor.documents import path_to_uri

    async def session() -> dict[str, Any]:
        client = LanguageClient("fresh-machine", "1")
        diagnostics: dict[str, list[types.Diagnostic]] = {}

        @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def published(params: types.PublishDiagnosticsParams) -> None:
            diagnostics[params.uri] = list(params.diagnostics)

        @client.feature("kernelblaster/jobStatus")
        def job_status(params: Any) -> None:
            pass  # the editor's status bar: not this step's concern

        kernelblaster = str(Path(sys.executable).parent / "kernelblaster")
        await client.start_io(kernelblaster, "serve")
        uri = path_to_uri(source)
        began = time.monotonic()
        try:
            await client.initialize_async(
                types.InitializeParams(
                    capabilities=types.ClientCapabilities(),
                    root_uri=path_to_uri(source.parent),
                    initialization_options={"trusted": True},
                )
            )
            client.initialized(types.InitializedParams())
            item = types.TextDocumentItem(
                uri=uri, language_id="cuda-cpp", version=1, text=source.read_text()
            )
            client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=item))
            client.text_document_did_save(
                types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri))
            )
            while time.monotonic() - began < timeout_s:
                got = diagnostics.get(uri, [])
                states = [d for d in got if d.code == "state"]
                if states:
                    return {
                        "ok": True,
                        "detail": f"state after {time.monotonic() - began:.1f} "
                        f"s: {states[0].message}",
                    }
                errors = [d for d in got if d.code in ("setup", "run")]
                if errors:
                    return {"ok": False, "detail": f"{errors[0].code}: {errors[0].message}"}
                await asyncio.sleep(0.2)
            said = "; ".join(f"{d.code}: {d.message}" for d in diagnostics.get(uri, []))
            return {"ok": False, "detail": f"no state diagnostic in {timeout_s:.0f} s ({said})"}
        finally:
            await client.shutdown_async(None)
            client.exit(None)
            await client.stop()

    return asyncio.run(session())


def llm_endpoint() -> None:
    """The scripted OpenAI-compatible endpoint (bench/kernelbench_mechanics.py's answers): its
    base URL on stdout, then serving until stdin closes."""
    with openai_server.OpenAITestServer(
        responder=kernelbench_mechanics.responder(openai_server, ANSWERS)
    ) as server:
        print(server.base_url, flush=True)
        sys.stdin.read()


def main() -> int:
    if sys.argv[1:2] == ["llm-endpoint"]:
        llm_endpoint()
        return 0
    if sys.argv[1:2] == ["lsp-save"]:
        parser = argparse.ArgumentParser(prog="python -m bench.fresh_machine lsp-save")
        parser.add_argument("source", type=Path)
        parser.add_argument("--timeout-s", type=float, default=150.0)
        args = parser.parse_args(sys.argv[2:])
        print(json.dumps(lsp_save(args.source.resolve(), args.timeout_s)))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument(
        "--wheels", type=Path, default=REPO / ".whl", help="the carried wheels (device_wheels.sh)"
    )
    parser.add_argument("--budget-s", type=float, default=560.0, help="the whole run's limit")
    parser.add_argument("--scratch", type=Path, help="where the fresh home goes (default: /tmp)")
    parser.add_argument(
        "--installed", type=Path, help="use this venv instead of installing (a dry run)"
    )
    return FreshMachine(parser.parse_args())()


if __name__ == "__main__":
    sys.exit(main())
