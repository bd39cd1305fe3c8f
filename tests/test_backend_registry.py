"""k9bench.inference.registry: the backends' names and their torch-free facts, which the checks and settings
read instead of comparing backend names."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from k9bench.inference import registry
from k9bench.inference.backend import Backend, backend_class
from k9bench.inference.planning import UsageError, check_model_path, preflight
from k9bench.inference.resume_check import frame_fingerprint
from k9bench.inference.settings import SECTIONS, FrameSettings, ModelSettings, OpenAISettings, RunConfig, resolve

ROOT = Path(__file__).resolve().parent.parent


def _flip(monkeypatch, name: str, **facts) -> None:
    """Registry entry ``name`` with ``facts`` changed: the behaviour must follow the fact, not the name."""
    monkeypatch.setitem(registry.REGISTRY, name, dataclasses.replace(registry.REGISTRY[name], **facts))


def _openai(**openai) -> RunConfig:
    return RunConfig(model=ModelSettings(backend="openai"), openai=OpenAISettings(base_url="http://127.0.0.1:9/v1", **openai),
                     frames=FrameSettings())


def test_every_entry_names_a_section_and_a_backend_class_of_that_name():
    for name, entry in registry.REGISTRY.items():
        assert entry.settings_section in SECTIONS and entry.summary, name
        assert entry.settings_section in {f.name for f in dataclasses.fields(RunConfig)}, name
        cls = backend_class(name)  # imports no backend package (torch, openai, vllm are imported at load)
        assert issubclass(cls, Backend) and cls.name == name, name


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
