"""k9bench.inference.registry: the backends' names and their torch-free facts, which the checks and settings
read instead of comparing backend names."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import typing
from dataclasses import dataclass
from pathlib import Path

import pytest

from k9bench.inference import registry
from k9bench.inference.backend import Backend, backend_class
from k9bench.inference.planning import UsageError, check_model_path, preflight
from k9bench.inference.resume_check import frame_fingerprint
from k9bench.inference import settings as inference_settings
from k9bench.inference.openai_compat.settings import OpenAISettings
from k9bench.inference.settings import FrameSettings, ModelSettings, RunConfig, config_from_namespace, resolve, sections
from k9bench.settings import setting
from k9bench.validators import positive_int

ROOT = Path(__file__).resolve().parent.parent


def _flip(monkeypatch, name: str, **facts) -> None:
    """Registry entry ``name`` with ``facts`` changed: the behaviour must follow the fact, not the name."""
    monkeypatch.setitem(registry.REGISTRY, name, dataclasses.replace(registry.REGISTRY[name], **facts))


def _openai(**openai) -> RunConfig:
    return RunConfig(model=ModelSettings(backend="openai"), openai=OpenAISettings(base_url="http://127.0.0.1:9/v1", **openai),
                     frames=FrameSettings())


def test_every_entry_names_a_section_and_a_backend_class_of_that_name():
    for name, entry in registry.REGISTRY.items():
        assert entry.settings_section in sections() and entry.summary, name
        assert entry.settings_section in {f.name for f in dataclasses.fields(RunConfig)}, name
        cls = backend_class(name)  # imports no backend package (torch, openai, vllm are imported at load)
        assert issubclass(cls, Backend) and cls.name == name, name


def test_every_entry_names_its_settings_class_the_type_of_its_config_section():
    hints = typing.get_type_hints(RunConfig)
    for name, entry in registry.REGISTRY.items():
        cls = registry.load(entry.settings)
        assert dataclasses.is_dataclass(cls) and hints[entry.settings_section] is cls, name
        assert type(getattr(RunConfig(), entry.settings_section)) is cls and sections()[entry.settings_section] is cls, name
        assert entry.flag_group, name
        if entry.add_flags:
            assert callable(registry.load(entry.add_flags)), name


@dataclass(frozen=True)
class EchoSettings:
    """The settings of a backend registered only by the tests below."""

    echo_words: int = setting(3, "--backend echo: words echoed back (default: %(default)s)", type=positive_int)


def add_echo_flags(group) -> None:
    """An ``add_flags`` function: EchoSettings' flag, also as ``-E``."""
    group.add_argument("-E", "--echo_words", type=positive_int, default=3, help="--backend echo: words echoed back, -E for short")


def _register_echo(monkeypatch, **facts) -> None:
    row = registry.BackendEntry(f"{__name__}:EchoBackend", "echo", local_weights=False, summary="test only",
                                settings=f"{__name__}:EchoSettings", flag_group="echo backend (--backend echo)")
    monkeypatch.setitem(registry.REGISTRY, "echo", dataclasses.replace(row, **facts))


def _group_of(parser, flag: str) -> str:
    return next(g.title for g in parser._action_groups for a in g._group_actions if flag in a.option_strings)


def test_a_registered_backend_gets_its_flag_group_and_its_config_section(monkeypatch):
    from k9bench.inference.stage import build_parser

    _register_echo(monkeypatch)
    parser = build_parser()
    text = parser.format_help()
    assert "echo backend (--backend echo):" in text and "words echoed back (default: 3)" in text
    titles = [g.title for g in parser._action_groups]
    assert titles.index("vLLM in-process (--backend vllm)") < titles.index("echo backend (--backend echo)") < titles.index("data (reference flags)")
    assert _group_of(parser, "--echo_words") == "echo backend (--backend echo)"
    # RunConfig needs the section's field: the shortest way is a subclass with it
    with_echo = dataclasses.make_dataclass("RunConfig", [("echo", EchoSettings, dataclasses.field(default_factory=EchoSettings))],
                                           bases=(RunConfig,), frozen=True)
    monkeypatch.setattr(inference_settings, "RunConfig", with_echo)
    config = config_from_namespace(parser.parse_args(["--echo_words", "7"]))
    assert config.echo == EchoSettings(echo_words=7) and config.flat()["echo_words"] == 7
    assert config.hf == RunConfig().hf and config_from_namespace(parser.parse_args([])).echo.echo_words == 3


def test_a_backend_in_the_model_group_stands_before_backend_and_add_flags_replaces_add_arguments(monkeypatch):
    from k9bench.inference.stage import build_parser

    _register_echo(monkeypatch, flag_group=registry.MODEL_FLAGS_GROUP, add_flags=f"{__name__}:add_echo_flags")
    parser = build_parser()
    model = next(g for g in parser._action_groups if g.title == registry.MODEL_FLAGS_GROUP)
    flags = [a.option_strings[-1] for a in model._group_actions]
    assert flags[0] == "--model_name_or_path" and flags[-1] == "--backend"
    assert flags.index("--max_memory") < flags.index("--echo_words") < flags.index("--backend")
    assert "echo backend (--backend echo)" not in [g.title for g in parser._action_groups]
    text = parser.format_help()
    assert parser.parse_args(["-E", "4"]).echo_words == 4 and "-E for short" in text and "echoed back (default" not in text
    assert sum("--echo_words" in a.option_strings for a in parser._actions) == 1


def test_the_registry_imports_no_project_module_and_no_heavy_package():
    code = "import sys, k9bench.inference.registry as r; print(sorted(m for m in sys.modules if m.startswith(('k9bench', 'torch'))))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert json.loads(out.replace("'", '"')) == ["k9bench", "k9bench.inference", "k9bench.inference.registry"]


def test_backend_flag_choices_and_help_come_from_the_registry():
    from k9bench.inference.stage import build_parser

    action = next(a for a in build_parser()._actions if "--backend" in a.option_strings)
    assert tuple(action.choices) == registry.BACKEND_NAMES
    for name, entry in registry.REGISTRY.items():
        assert f"{name} ({entry.summary})" in action.help


def test_exact_frame_size_raises_max_pixels_by_the_fact(monkeypatch):
    config = _openai(frame_size="512x384")
    assert resolve(config).adjustments["max_pixels"]["to"] == 2 * 512 * 384
    _flip(monkeypatch, "openai", exact_frame_size=False)
    assert "max_pixels" not in resolve(config).adjustments


def test_audio_part_refuses_video_url_and_enters_the_fingerprint_by_the_fact(monkeypatch):
    config = dataclasses.replace(_openai(video_transport="video_url", audio_format="mp3"), frames=FrameSettings(audio=True))
    with pytest.raises(UsageError, match="input_audio part beside the frames: use --video_transport frames"):
        preflight(config)
    assert frame_fingerprint(config, 14)["audio_format"] == "mp3"
    _flip(monkeypatch, "openai", audio_part=False)
    preflight(config)
    assert "audio_format" not in frame_fingerprint(config, 14) and frame_fingerprint(config, 14)["audio"] is True


def test_api_key_without_base_url_by_the_fact(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    config = dataclasses.replace(_openai(), openai=OpenAISettings())
    with pytest.raises(UsageError, match="OPENAI_API_KEY"):
        preflight(config)
    _flip(monkeypatch, "openai", api_key_without_base_url=False)
    preflight(config)


def test_transformers_load_needs_config_json_by_the_fact(monkeypatch, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    config = RunConfig(model=ModelSettings(backend="hf", model_name_or_path=str(folder)))
    assert "has no config.json" in check_model_path(config)
    _flip(monkeypatch, "hf", transformers_load=False)
    assert check_model_path(config) is None
