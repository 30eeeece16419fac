"""Property-based: whatever a configuration file holds and whatever the command line says, the
command ends with a result or one line of error and exit status 2, never a traceback.

The configuration: any TOML value (of any type, nested, NaN and infinities included) for any
setting, a target's setting or an unknown key. The command line: each command's own option
names mixed with arbitrary words (`serve`, which reads the editor's messages from stdin, and
`bench`, which needs a GPU and an LLM, are left out). Both run the real entry point in this
process, so each example takes milliseconds."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelblaster.cli import build_parser, main
from kernelblaster.settings import Settings, SettingsError, TargetConfig, load_settings
from kernelblaster.trust import TRUST_ENV

FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "150")),
    deadline=None,  # the first example imports the command modules
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(autouse=True)
def private_user(tmp_path, monkeypatch):
    for name in ("CONFIG", "CACHE", "DATA"):
        monkeypatch.setenv(f"XDG_{name}_HOME", str(tmp_path / f"{name.lower()}-home"))
    monkeypatch.setenv(TRUST_ENV, "0")
    for name in [n for n in os.environ if n.startswith("KERNELBLASTER_") and n != TRUST_ENV]:
        monkeypatch.delenv(name)


def _run(argv: list[str], cwd: Path) -> tuple[int, str, str]:
    """The entry point as a shell would run it: its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    previous = Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exit_:  # argparse's usage errors and --help
                code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        os.chdir(previous)
    return code, out.getvalue(), err.getvalue()


def _assert_one_line_error(code: int, err: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    assert err.endswith("\n") and err.count("\n") == 1, err


# --- the configuration file ----------------------------------------------------------------

_scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
_setting_keys = st.sampled_from([*Settings.__struct_fields__, "unknown_key", "Rollouts"])
_target_keys = st.sampled_from([*TargetConfig.__struct_fields__, "unknown_key"])


def _toml(value) -> str:
    """A TOML value (tomllib only reads)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):  # JSON's escapes are TOML's, but for DEL, which TOML escapes
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return "{" + ", ".join(f"{_toml(str(k))} = {_toml(v)}" for k, v in value.items()) + "}"


@FUZZ
@given(
    top=st.dictionaries(_setting_keys, _values, max_size=3),
    target=st.none() | st.dictionaries(_target_keys, _values, max_size=3),
)
def test_any_configuration_loads_or_is_one_line_and_exit_status_2(top, target):
    lines = [f"{key} = {_toml(value)}" for key, value in top.items() if key != "targets"]
    if target is not None:
        lines.append("[[targets]]")
        lines += [f"{key} = {_toml(value)}" for key, value in target.items()]
    with tempfile.TemporaryDirectory() as folder:
        repo = Path(folder)
        (repo / "kernelblaster.toml").write_text("\n".join(lines) + "\n")
        source = repo / "k.cu"
        source.write_text("__global__ void k() {}\n")
        try:
            load_settings(source)
        except SettingsError as exc:
            assert "\n" not in str(exc) and str(repo) in str(exc)
        else:
            return  # a configuration that loads is a build's business, not this test's
        code, out, err = _run(["build", str(source)], repo)
        assert out == ""
        _assert_one_line_error(code, err)


# --- the command line ----------------------------------------------------------------------

_COMMANDS = ["build", "check", "profile", "analyze", "optimize", "init", "kb", "trust"]


def _option_words(command: str) -> list[str]:
    """The option strings and subcommand names the command's parser knows."""
    parser = build_parser([command])._subparsers._group_actions[0].choices[command]
    words = []
    for action in parser._actions:
        words += action.option_strings
        if isinstance(action.choices, dict):  # subcommands, e.g. kb's
            words += list(action.choices)
    return [word for word in words if word not in ("-h", "--help")]


# No control characters (no shell passes a NUL; a name with a line break is printed as it is,
# over two lines) and no absolute path a test must not touch: a few fixed ones instead.
_words = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), max_size=12).filter(
        lambda word: not word.startswith("/")
    ),
    st.sampled_from(["/", ".", "..", "/nonexistent/k.cu", "0", "-1", "nan", "x.cu", "x.py"]),
)


@st.composite
def _command_lines(draw) -> list[str]:
    command = draw(st.sampled_from(_COMMANDS))
    known = st.sampled_from(_option_words(command))
    return [command, *draw(st.lists(st.one_of(known, _words), min_size=1, max_size=5))]


@FUZZ
@given(argv=st.one_of(_command_lines(), st.lists(_words, max_size=4)))
def test_any_command_line_ends_in_a_result_or_one_line_and_exit_status_2(argv):
    with tempfile.TemporaryDirectory() as folder:
        code, _, err = _run(argv, Path(folder))
    if code != 0:
        _assert_one_line_error(code, err)
