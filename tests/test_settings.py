"""Settings: defaults, kernelblaster.toml, [tool.kernelblaster], environment, editor overrides."""

from pathlib import Path

import msgspec
import pytest

from kernelblaster.settings import Settings, SettingsError, load_settings


def test_defaults_without_any_configuration(tmp_path):
    settings = load_settings(tmp_path, environ={})
    assert settings == Settings()


def test_pyproject_table_then_kernelblaster_toml_then_environment(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        '[tool.kernelblaster]\nrollouts = 7\ndepth = 5\nllm_model = "from-pyproject"\n'
    )
    (tmp_path / "kernelblaster.toml").write_text('depth = 2\nllm_model = "from-toml"\n')
    (tmp_path / "sub").mkdir()
    settings = load_settings(
        tmp_path / "sub",
        environ={"KERNELBLASTER_LLM_MODEL": "from-env", "KERNELBLASTER_KB": "/k"},
        trusted=True,
    )
    assert (settings.rollouts, settings.depth, settings.llm_model) == (7, 2, "from-env")
    assert settings.kb_path == "/k"


def test_environment_values_are_converted_to_their_types(tmp_path):
    settings = load_settings(tmp_path, environ={"KERNELBLASTER_RUN_TIMEOUT_S": "12.5"})
    assert settings.run_timeout_s == 12.5


def test_target_paths_resolve_against_the_config_file(tmp_path):
    (tmp_path / "kernelblaster.toml").write_text(
        '[[targets]]\nsource = "k/a.cu"\nreference = "ref.py"\natol = 0.01\n'
    )
    (target,) = load_settings(tmp_path, environ={}).targets
    assert target.source == str(tmp_path / "k" / "a.cu")
    assert target.reference == str(tmp_path / "ref.py") and target.atol == 0.01


def test_unknown_key_is_a_clear_error(tmp_path):
    (tmp_path / "kernelblaster.toml").write_text("rolouts = 3\n")
    with pytest.raises(SettingsError, match="rolouts"):
        load_settings(tmp_path, environ={})


def test_broken_toml_names_the_file(tmp_path):
    (tmp_path / "kernelblaster.toml").write_text("depth = \n")
    with pytest.raises(SettingsError, match=r"kernelblaster\.toml"):
        load_settings(tmp_path, environ={})


def test_editor_overrides_merge_and_none_keeps_the_value():
    merged = Settings(depth=4).merged({"rollouts": 9, "depth": None})
    assert (merged.rollouts, merged.depth) == (9, 4)
    with pytest.raises(SettingsError):
        Settings().merged({"no_such_setting": 1})


def test_api_key_is_read_from_the_named_variable_only(monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-test")
    settings = Settings(llm_api_key_env="MY_KEY")
    assert settings.llm_api_key() == "sk-test"
    assert "sk-test" not in repr(settings)


def test_configuration_is_read_up_to_the_repository_or_workspace_root_never_above(tmp_path):
    """A file above the repository (a shared folder's) or above the editor's workspace folder
    applies to nothing below it; outside both, only the source's own folder's does."""
    (tmp_path / "kernelblaster.toml").write_text("depth = 1\n")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "kernels").mkdir()
    assert load_settings(repo / "kernels", environ={}).depth == 3
    (repo / "kernelblaster.toml").write_text("depth = 2\n")
    assert load_settings(repo / "kernels", environ={}).depth == 2  # the repository's own
    assert load_settings(repo / "kernels", environ={}, workspace=repo / "kernels").depth == 3
    plain = tmp_path / "plain" / "sub"
    plain.mkdir(parents=True)
    (tmp_path / "plain" / "kernelblaster.toml").write_text("depth = 2\n")
    assert load_settings(plain, environ={}).depth == 3
    assert load_settings(plain.parent, environ={}).depth == 2


def test_a_folder_anyone_may_write_to_holds_no_configuration_and_ends_the_search(tmp_path):
    shared = tmp_path / "shared"
    (shared / "repo" / ".git").mkdir(parents=True)
    (shared / ".git").mkdir()  # planted: would make shared/ a repository root
    (shared / "kernelblaster.toml").write_text("depth = 1\n")
    shared.chmod(0o777)
    repo = shared / "repo"
    (repo / ".git").rmdir()
    assert load_settings(repo, environ={}).depth == 3
    (repo / "kernelblaster.toml").write_text("depth = 2\n")
    assert load_settings(repo, environ={}).depth == 2
    repo.chmod(0o777)
    assert load_settings(repo, environ={}).depth == 3


@pytest.mark.parametrize(
    ("toml", "said"),
    [
        ("rollouts = 1000000", "rollouts = 1000000: Expected `int` <= 64"),
        ("trials = 1000000000", "trials = 1000000000: Expected `int` <= 100"),
        ("gpu_index = 100000", "gpu_index = 100000: Expected `int` <= 255"),
        (
            "nvcc_flags = [" + ", ".join(f'"-DA{i}"' for i in range(30_000)) + "]",
            "nvcc_flags = a list of 30,000 items: Expected `array` of length <= 1024",
        ),
        (
            'nvcc_flags = ["-DBIG=' + "x" * 200_000 + '"]',
            "nvcc_flags[0] = a string of 200,006 characters: Expected `str` of length <= 4096",
        ),
        (
            "nvcc_flags = [" + ", ".join([f'"-D{"x" * 4000}"'] * 9) + "]",
            "nvcc_flags: 36,018 characters in all, at most 32,768",
        ),
        (
            '[[targets]]\nsource = "a.cu"\nargs = ["' + "x" * 5000 + '"]',
            "targets[0].args[0] = a string of 5,000 characters: Expected `str` of length <= 4096",
        ),
    ],
    ids=[
        "rollouts",
        "trials",
        "gpu-index",
        "30k-flags",
        "200k-macro",
        "flags-in-all",
        "target-args",
    ],
)
def test_a_value_past_its_bound_names_the_setting_the_value_and_the_limit(tmp_path, toml, said):
    (tmp_path / "kernelblaster.toml").write_text(toml + "\n")
    with pytest.raises(SettingsError) as refused:
        load_settings(tmp_path, environ={}, trusted=True)
    assert said in str(refused.value) and str(tmp_path / "kernelblaster.toml") in str(refused.value)


def test_the_environment_and_the_editor_are_bounded_too():
    with pytest.raises(SettingsError, match="depth = 100: Expected `int` <= 32"):
        Settings().merged({"depth": 100})
    with pytest.raises(SettingsError, match="parallel_gpu_jobs = '1000'"):
        load_settings(environ={"KERNELBLASTER_PARALLEL_GPU_JOBS": "1000"}, read_files=False)


def test_the_manual_documents_every_counts_maximum():
    """The maxima are documented where the trust page says what is bounded."""
    trust = (Path(__file__).resolve().parents[1] / "docs" / "trust.md").read_text()
    bounded = {}
    for field in msgspec.inspect.type_info(Settings).fields:
        kinds = getattr(field.type, "types", (field.type,))
        for kind in kinds:
            if isinstance(kind, msgspec.inspect.IntType) and kind.le is not None:
                bounded[field.name] = kind.le
    assert {"trials", "rollouts", "depth", "top_k", "gpu_index"} <= bounded.keys()
    assert [
        f"`{name}` {most}" for name, most in bounded.items() if f"`{name}` {most}" not in trust
    ] == []
