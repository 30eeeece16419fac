"""Repositories that try, through their configuration file, to run a program, read options or
code from elsewhere, write outside the build folder, send traffic somewhere or read a secret.
Until the user trusts the file nothing runs (a fake host compiler would leave a marker), nothing
is written (not even the build cache) and nothing is sent (a real HTTP server records every
request); once trusted, the same file works as before. The harmless settings need no trust."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.openai_server import OpenAITestServer, reply
from kernelblaster.cli import main
from kernelblaster.config_trust import BUDGET_SETTINGS, INERT_SETTINGS, RESTRICTED_SETTINGS
from kernelblaster.settings import Settings, UntrustedConfigError, load_settings
from kernelblaster.trust import TRUST_ENV, trust

SECRET = "aws-SECRET-do-not-send-0123456789"


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A private user: trust list, build cache and KB under tmp_path, no trust for the run."""
    for name in ("CONFIG", "CACHE", "DATA"):
        monkeypatch.setenv(f"XDG_{name}_HOME", str(tmp_path / f"{name.lower()}-home"))
    monkeypatch.setenv(TRUST_ENV, "0")  # restored afterwards, whatever `--trust` set
    for name in [n for n in os.environ if n.startswith("KERNELBLASTER_") and n != TRUST_ENV]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("MY_AWS_SECRET", SECRET)
    return tmp_path


@pytest.fixture
def evil(home) -> Path:
    """A "host compiler" that leaves a marker, then compiles as g++ would."""
    script = home / "evilcc"
    script.write_text(f'#!/bin/sh\ntouch "{home / "ran"}"\nexec g++ "$@"\n')
    script.chmod(0o755)
    return script


def _repo(home: Path, toml: str, *, pyproject: bool = False) -> Path:
    repo = home / "repo"
    repo.mkdir(exist_ok=True)
    (repo / ".git").mkdir(exist_ok=True)
    if pyproject:
        toml = toml.replace("[[targets]]", "[[tool.kernelblaster.targets]]")
        (repo / "pyproject.toml").write_text("[tool.kernelblaster]\n" + toml)
    else:
        (repo / "kernelblaster.toml").write_text(toml)
    (repo / "k.cu").write_text("__global__ void k(float* y) { y[0] = 1.0f; }\n")
    (repo / "opts.txt").write_text(f"-ccbin {home / 'evilcc'}\n")
    # a response file for gcc: more options, here a program to run the compiler through
    (repo / "inc.rsp").write_text(f"include -wrapper {home / 'evilcc'}\n")
    (repo / "include").mkdir(exist_ok=True)
    (repo / "x.h").write_text("#define X 1\n")
    # a folder of the repository that is a link to one outside it (the user's keys)
    (home / "secret").mkdir(exist_ok=True)
    (home / "secret" / "key.h").write_text('#define KEY "the user\'s key"\n')
    (repo / "inc").unlink(missing_ok=True)
    (repo / "inc").symlink_to(home / "secret")
    return repo


def _nothing_happened(home: Path) -> None:
    assert not (home / "ran").exists(), "a program the repository named ran"
    assert not (home / "cache-home").exists(), "something was written before trust"
    assert not (home / "out").exists()


# Each class of setting beyond the harmless ones, in each of nvcc's spellings. {evil} is the
# marker-writing program, {out} a folder outside the repository.
FLAG_CASES = [
    # names or selects a program
    ["-ccbin", "{evil}"],
    ["-ccbin={evil}"],
    ["--compiler-bindir", "{evil}"],
    ["--compiler-bindir={evil}"],
    ["-arbin", "{evil}"],
    ["-Xcompiler", "-fplugin={out}/p.so"],
    ["-Xcompiler=-B{out}"],
    ["--compiler-options", "-specs={out}/s"],
    ["-Xcompiler", "@opts.txt"],
    ["-Xcompiler", "-Wl,-rpath,{out}"],
    ["-Xlinker", "--plugin={out}/p.so"],
    ["--linker-options=-T{out}/script"],
    ["-Xnvlink", "-x"],
    ["-L{out}"],
    ["--library-path={out}"],
    ["-l{out}/libx.so"],
    ["-forward-unknown-to-host-compiler", "-fplugin=x.so"],
    # makes nvcc run a program
    ["-run"],
    ["--run"],
    ["-run-args", "x"],
    ["--run-args=x"],
    # reads options or code from another file
    ["--options-file", "opts.txt"],
    ["--options-file=opts.txt"],
    ["-optf", "opts.txt"],
    ["-optf=opts.txt"],
    ["-include", "x.h"],
    ["--pre-include=x.h"],
    ["-I{out}"],
    ["-I", "../out"],
    ["--include-path={out}"],
    ["-isystem", "{out}"],
    ["-ldir", "{out}"],
    ["--libdevice-directory={out}"],
    ["-Xptxas", "--options-file=opts.txt"],
    ["{out}/extra.o"],
    # writes outside the build folder
    ["-o", "{out}/k.so"],
    ["--output-file={out}/k.so"],
    ["-odir", "{out}"],
    ["-keep-dir={out}"],
    ["-keep"],
    ["-save-temps"],
    ["-MF", "{out}/deps"],
    ["--dependency-output={out}/deps"],
    ["--time={out}/t.csv"],
    ["-fdevice-time-trace={out}/trace"],
    # a macro or a value that nvcc's shell would expand
    ["-DX=$(touch {out})"],
    ["-D", "X=`touch {out}`"],
    # a word gcc or the linker would read as a response file (`@file`: any options)
    ["-isystem", "@inc.rsp"],
    ["--system-include=@inc.rsp"],
    ["-I", "@inc.rsp"],
    ["-D", "@inc.rsp"],
    ["--define-macro=@inc.rsp"],
    ["-Xcompiler", "-O3,@inc.rsp"],
    ["-Xcompiler=@inc.rsp"],
    ["-Xptxas", "-v,@inc.rsp"],
    ["-l@inc.rsp"],
    # a blank, a quote or a backslash: the tool would see other words than those judged
    ["-Xcompiler", "-O3 -B{out}"],
    ["-DX=a b"],
    ['-DX="q"'],
    ["-DX=a\\b"],
    ["-DX=\u00a0"],
    # a folder that is a link out of the repository, in each spelling
    ["-Iinc"],
    ["-I", "inc"],
    ["--include-path=inc"],
    ["-isystem", "inc"],
    ["-I{repo}/inc"],
    ["-Iinc/."],
    # a value nvcc may split into another option, a case nvcc doesn't accept, an unknown option
    ["-arch=sm_90,-ccbin={evil}"],
    ["-CCBIN={evil}"],
    ["--Options-File=opts.txt"],
    ["--an-option-of-a-later-nvcc"],
]


def _flags(flags: list[str], home: Path) -> list[str]:
    return [f.format(evil=home / "evilcc", out=home / "out", repo=home / "repo") for f in flags]


def _toml_list(flags: list[str]) -> str:
    return "[" + ", ".join(json.dumps(flag) for flag in flags) + "]"


@pytest.mark.parametrize("flags", FLAG_CASES, ids=" ".join)
def test_nvcc_flags_beyond_the_harmless_ones_need_trust(home, evil, capsys, flags):
    repo = _repo(home, f"nvcc_flags = {_toml_list(_flags(flags, home))}\n")
    assert main(["build", str(repo / "k.cu"), "--arch", "sm_90"]) == 2
    err = capsys.readouterr().err
    assert "nvcc_flags with" in err and f"kernelblaster trust {repo}" in err
    assert err.count("\n") == 1
    _nothing_happened(home)


@pytest.mark.parametrize("pyproject", [False, True], ids=["kernelblaster.toml", "pyproject"])
@pytest.mark.parametrize("flags", [["-optf=opts.txt"], ["-ccbin", "{evil}"], ["-run"]], ids=str)
def test_a_target_entry_is_judged_like_the_top_level(home, evil, capsys, flags, pyproject):
    toml = f'[[targets]]\nsource = "k.cu"\nnvcc_flags = {_toml_list(_flags(flags, home))}\n'
    repo = _repo(home, toml, pyproject=pyproject)
    assert main(["build", str(repo / "k.cu"), "--arch", "sm_90"]) == 2
    assert "targets[0].nvcc_flags with" in capsys.readouterr().err
    _nothing_happened(home)


SETTING_CASES = {
    "nvcc": "'{evil}'",
    "ncu_path": "'{evil}'",
    "compute_sanitizer_path": "'{evil}'",
    "worker_command": "['{evil}']",
    "optimize_worker_command": "['sh', '-c', 'touch {out}']",
    "llm_base_url": "'http://127.0.0.1:9/v1'",
    "llm_api_key_env": "'MY_AWS_SECRET'",
    "kb_path": "'{out}/kb.sqlite3'",
    "cache_dir": "'{out}'",
}


@pytest.mark.parametrize("key", sorted(SETTING_CASES))
def test_settings_naming_programs_places_endpoints_or_secrets_need_trust(home, evil, capsys, key):
    value = SETTING_CASES[key].format(evil=evil, out=home / "out")
    repo = _repo(home, f"{key} = {value}\n")
    assert main(["build", str(repo / "k.cu"), "--arch", "sm_90"]) == 2
    err = capsys.readouterr().err
    assert f"{key} = " in err and RESTRICTED_SETTINGS[key] in err
    _nothing_happened(home)


@pytest.mark.parametrize("key", ["source", "reference", "golden"])
def test_a_target_file_outside_the_repository_needs_trust(home, key):
    (home / "elsewhere.py").write_text("import os\n")
    source = "" if key == "source" else 'source = "k.cu"\n'
    toml = f'[[targets]]\n{source}{key} = "../elsewhere.py"\n'
    with pytest.raises(UntrustedConfigError, match="a file outside the repository"):
        load_settings(_repo(home, toml))


def test_every_setting_is_either_harmless_or_restricted():
    """A setting added later must be placed on one side: only the harmless list lets through."""
    every = set(Settings.__struct_fields__)
    sides = [INERT_SETTINGS, set(BUDGET_SETTINGS), set(RESTRICTED_SETTINGS)]
    assert every == set().union(*sides) | {"nvcc_flags", "targets"}
    assert sum(map(len, sides)) == len(set().union(*sides))  # each on one side only


def test_harmless_settings_and_flags_need_no_trust(home):
    flags = [
        "-O3", "-O", "2", "--optimize=3", "-arch=sm_90", "-gencode", "arch=compute_90,code=sm_90",
        "--gpu-architecture", "sm_80", "-lineinfo", "--use_fast_math", "-std=c++17",
        "-DTILE=32,USE_FAST", "-D", "N=(1<<20)", "-UNDEBUG", "-maxrregcount=64",
        "-Xptxas", "-v", "-Xptxas=-O3,-dlcm=ca,--maxrregcount=32", "-Iinclude", "-I", "include",
        "--include-path=include", "--extended-lambda", "--expt-relaxed-constexpr", "-rdc=true",
        "-Xcompiler", "-fopenmp,-Wall,-O3", "-lcublas", "--diag-suppress=177", "-res-usage",
    ]  # fmt: skip
    repo = _repo(
        home,
        f"nvcc_flags = {_toml_list(flags)}\nrollouts = 2\ndepth = 3\ntop_k = 1\n"
        "build_timeout_s = 30\ntrials = 3\natol = 1e-3\nllm_model = 'gpt-4o'\n"
        '[[targets]]\nsource = "k.cu"\nreference = "k.py"\nnvcc_flags = ["-O1"]\nrtol = 0.1\n',
    )
    settings = load_settings(repo / "k.cu")
    assert settings.nvcc_flags == flags and settings.rollouts == 2 and settings.top_k == 1
    assert not (home / "config-home").exists()  # nothing asked of the trust list


@pytest.mark.nvcc
def test_a_trusted_file_works_as_before_until_a_file_it_names_changes(home, evil, capsys):
    """The options file's program runs once the user trusts the file; a later edit of the
    options file, or an options file of the same name beside the source, needs trust again."""
    repo = _repo(home, "nvcc_flags = ['--options-file', 'opts.txt']\n")
    (repo / "kernels").mkdir()
    source = repo / "kernels" / "k.cu"
    source.write_text("__global__ void k2(float* y) { y[0] = 2.0f; }\n")
    assert main(["trust", str(repo)]) == 0
    assert "1 file(s) or folder(s) it names" in capsys.readouterr().out
    assert main(["build", str(repo / "k.cu"), "--arch", "sm_90"]) == 0
    assert (home / "ran").exists()  # the trusted host compiler did run
    (home / "ran").unlink()

    # an options file beside the source, which nvcc would read instead: not trusted
    (repo / "kernels" / "opts.txt").write_text(f"-ccbin {evil}\n")
    assert main(["build", str(source), "--arch", "sm_90"]) == 2
    assert f"kernelblaster trust {repo / 'kernels'}" in capsys.readouterr().err
    assert not (home / "ran").exists()
    assert main(["trust", str(repo / "kernels")]) == 0
    assert main(["build", str(source), "--arch", "sm_90"]) == 0
    assert (home / "ran").exists()
    (home / "ran").unlink()
    assert main(["build", str(repo / "k.cu"), "--arch", "sm_90"]) == 0  # the first still holds

    # the options file edited after trust
    (repo / "opts.txt").write_text(f"-ccbin {evil} -DCHANGED\n")
    assert main(["build", str(repo / "k.cu"), "--arch", "sm_90"]) == 2
    assert not (home / "ran").exists()
    assert main(["--trust", "build", str(repo / "k.cu"), "--arch", "sm_90"]) == 0  # one run


def test_no_secret_is_sent_to_a_repository_endpoint_until_trusted(home, capsys):
    repo = _repo(home, "")
    (repo / "problem.py").write_text(
        "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
        "        return torch.relu(x)\n\ndef get_inputs():\n    return [torch.randn(8)]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    with OpenAITestServer(models=["test-model"]) as server:
        (repo / "kernelblaster.toml").write_text(
            f"llm_base_url = '{server.base_url}'\nllm_api_key_env = 'MY_AWS_SECRET'\n"
            "llm_model = 'test-model'\n"
        )
        assert main(["init", str(repo / "problem.py"), "--attempts", "1"]) == 2
        err = capsys.readouterr().err
        assert "llm_base_url" in err and "llm_api_key_env" in err
        assert server.requests == []

        server.push(reply("no code in this reply"))
        main(["--trust", "init", str(repo / "problem.py"), "--attempts", "1"])
        (sent,) = server.chat_requests
        assert sent.headers["authorization"] == f"Bearer {SECRET}"  # the user said so
    assert not (repo / "problem.cu").exists()


# --- the cases, end to end ------------------------------------------------------------


def test_a_response_file_through_an_include_path_runs_nothing(home, evil, capsys):
    """`-isystem @inc.rsp`: nvcc hands the word to gcc, which reads the file as more options
    (here `-wrapper`, a program the compiler runs through)."""
    repo = _repo(home, 'nvcc_flags = ["-isystem", "@inc.rsp"]\n')
    assert main(["build", str(repo / "k.cu"), "--arch", "sm_90"]) == 2
    assert "nvcc_flags with -isystem @inc.rsp" in capsys.readouterr().err
    _nothing_happened(home)


@pytest.mark.nvcc
def test_a_redirection_in_a_macro_of_a_two_architecture_build_leaves_the_kb_whole(home):
    """The flags are harmless (no trust asked): no shell reads them, so the build compiles
    the macro and the user's KB keeps its bytes."""
    kb = home / "data-home" / "kernelblaster" / "kb.sqlite3"
    kb.parent.mkdir(parents=True)
    kb.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 16)
    before = kb.read_bytes()
    flags = [
        "-Xcompiler",
        f"-DKB_TUNE=>{kb}",
        "-gencode",
        "arch=compute_80,code=sm_80",
        "-gencode",
        "arch=compute_90,code=sm_90",
    ]
    repo = _repo(home, f"nvcc_flags = {_toml_list(flags)}\n")
    assert main(["build", str(repo / "k.cu")]) == 0
    assert kb.read_bytes() == before


def test_an_include_folder_linked_out_of_the_repository_is_judged_from_the_sources_folder(
    home, capsys
):
    """`-Iinc` at the top is inside; from kernels/, where nvcc runs for kernels/k.cu, `inc` is a
    link to the user's keys."""
    repo = _repo(home, 'nvcc_flags = ["-Iinclude"]\n')
    (repo / "kernels").mkdir()
    (repo / "kernels" / "k.cu").write_text('#include "key.h"\n__global__ void k() {}\n')
    (repo / "kernels" / "include").symlink_to(home / "secret")
    assert main(["build", str(repo / "kernels" / "k.cu"), "--arch", "sm_90"]) == 2
    assert "nvcc_flags with -Iinclude" in capsys.readouterr().err
    _nothing_happened(home)


@pytest.mark.nvcc
def test_trust_covers_the_programs_a_trusted_options_file_names(home, capsys):
    """An options file naming `-ccbin tools`: trusting it records the programs in tools/; an
    edit of one needs trust again, and nothing runs meanwhile."""
    repo = _repo(home, "nvcc_flags = ['--options-file', 'host.txt']\n")
    (repo / "host.txt").write_text("-ccbin tools\n")
    (repo / "tools").mkdir()
    for name in ("gcc", "g++"):
        (repo / "tools" / name).write_text(f'#!/bin/sh\nexec {name} "$@"\n')
        (repo / "tools" / name).chmod(0o755)
    assert main(["trust", str(repo)]) == 0
    assert main(["build", str(repo / "k.cu"), "--arch", "sm_90"]) == 0
    (repo / "tools" / "gcc").write_text(f'#!/bin/sh\ntouch "{home / "ran"}"\nexec gcc "$@"\n')
    (repo / "k.cu").write_text("__global__ void k(float* y) { y[0] = 2.0f; }\n")  # no cache hit
    capsys.readouterr()
    assert main(["build", str(repo / "k.cu"), "--arch", "sm_90"]) == 2
    assert "kernelblaster trust" in capsys.readouterr().err
    assert not (home / "ran").exists()
    assert main(["trust", str(repo)]) == 0
    assert main(["build", str(repo / "k.cu"), "--arch", "sm_90"]) == 0
    assert (home / "ran").exists()  # as the user trusted it now


def test_a_trusted_kb_inside_the_repository_is_trusted_by_where_it_is(home, capsys):
    """Its contents change with every write; a link put in its place points elsewhere."""
    repo = _repo(home, "kb_path = 'team.sqlite3'\n")
    assert main(["kb", "init", str(repo / "team.sqlite3")]) == 0
    assert main(["trust", str(repo)]) == 0
    assert load_settings(repo / "k.cu").kb_path == str(repo / "team.sqlite3")
    with (repo / "team.sqlite3").open("ab") as kb:
        kb.write(b"\0" * 4096)  # as a write to it would change it
    assert load_settings(repo / "k.cu").kb_path == str(repo / "team.sqlite3")
    (repo / "team.sqlite3").rename(repo / "moved.sqlite3")
    (repo / "team.sqlite3").symlink_to(home / "data-home" / "kb.sqlite3")
    with pytest.raises(UntrustedConfigError, match="kb_path"):
        load_settings(repo / "k.cu")


def test_a_configuration_above_the_repository_is_not_read(home, evil):
    """A kernelblaster.toml in a folder above the repository (a shared one) names nothing for
    the repository below, which has none."""
    (home / "kernelblaster.toml").write_text(f"nvcc = '{evil}'\n")
    repo = _repo(home, "")
    (repo / "kernelblaster.toml").unlink()
    assert load_settings(repo / "k.cu").nvcc == "nvcc"
    (repo / ".git").rmdir()  # outside any repository: the source's own folder alone
    assert load_settings(repo / "k.cu").nvcc == "nvcc"


# The values: above each maximum, an error naming the setting, the value and the limit
UNBOUNDED = {
    "rollouts": (1_000_000, 64),
    "depth": (1_000_000, 32),
    "top_k": (1_000_000, 32),
    "init_attempts": (1_000_000, 32),
    "llm_max_retries": (1_000_000, 10),
    "trials": (1_000_000_000, 100),
    "parallel_gpu_jobs": (100_000, 32),
}


@pytest.mark.parametrize("key", sorted(UNBOUNDED))
def test_a_budget_above_its_maximum_is_an_error_naming_it(home, capsys, key):
    value, limit = UNBOUNDED[key]
    repo = _repo(home, f"{key} = {value}\n")
    assert main(["build", str(repo / "k.cu"), "--arch", "sm_90"]) == 2
    err = capsys.readouterr().err
    assert f"{key} = {value}" in err and f"<= {limit}" in err and err.count("\n") == 1
    _nothing_happened(home)


ABOVE_DEFAULTS = {
    "rollouts": 5,
    "depth": 4,
    "top_k": 4,
    "init_attempts": 5,
    "llm_max_retries": 4,
    "trials": 4,
    "parallel_gpu_jobs": 2,
    "build_timeout_s": 301,
    "run_timeout_s": 61,
    "profile_timeout_s": 181,
    "ncu_depth": "'full'",
}


@pytest.mark.parametrize("key", sorted(ABOVE_DEFAULTS))
def test_a_budget_above_its_default_needs_trust(home, key):
    assert set(ABOVE_DEFAULTS) == set(BUDGET_SETTINGS)
    repo = _repo(home, f"{key} = {ABOVE_DEFAULTS[key]}\n")
    with pytest.raises(UntrustedConfigError, match=rf"{key} = \S+ \(above its default"):
        load_settings(repo / "k.cu")
    trust(repo / "kernelblaster.toml", [], [])
    assert load_settings(repo / "k.cu") != Settings()


def test_a_model_other_than_the_default_needs_trust(home):
    repo = _repo(home, "llm_model = 'o1-pro'\n")
    with pytest.raises(UntrustedConfigError, match=r"llm_model = 'o1-pro' .*which model"):
        load_settings(repo / "k.cu")


@pytest.mark.parametrize("spelled", ['"5"', "5.0"])
def test_a_budget_spelled_as_another_type_is_judged_as_its_value(home, spelled):
    repo = _repo(home, f"rollouts = {spelled}\n")
    with pytest.raises(UntrustedConfigError, match=r"rollouts = \S+ \(above its default 4"):
        load_settings(repo / "k.cu")
