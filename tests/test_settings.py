"""Settings: defaults, kernelblaster.toml, [tool.kernelblaster], environment, editor overrides."""

import pytest

from kernelblaster.settings import Settings, SettingsError, load_settings


def test_defaults_without_any_configuration(tmp_path):
    settings = load_settings(tmp_path, environ={})
    assert settings == Settings()


def test_pyproject_table_then_kernelblaster_toml_then_environment(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.kernelblaster]\nrollouts = 7\ndepth = 5\nllm_model = "from-pyproject"\n'
    )
    (tmp_path / "kernelblaster.toml").write_text('depth = 2\nllm_model = "from-toml"\n')
    (tmp_path / "sub").mkdir()
    settings = load_settings(
        tmp_path / "sub", environ={"KERNELBLASTER_LLM_MODEL": "from-env", "KERNELBLASTER_KB": "/k"}
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
