"""The download stage's typed settings (issue 12): flags generated from the dataclasses, each
default defined once, the engine given frozen objects (never a Namespace), the module split
without import loops."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import sys
from pathlib import Path

import pytest

import download_videos
from k9bench.data.dataset import DatasetSettings
from k9bench.download.stage import DownloadConfig, DownloadJob
from k9bench.settings import default_of

REPO = Path(__file__).resolve().parent.parent
DOWNLOAD_MODULES = ("k9bench.download.stage", "k9bench.download.failures", "k9bench.download.ytdlp", "k9bench.download.manifest",
                    "k9bench.download.settings", "k9bench.download.checks", "k9bench.download.run", "k9bench.download.one")
PARTS = DOWNLOAD_MODULES[1:]
SETTINGS_CLASSES = (DatasetSettings, DownloadJob, DownloadConfig)


def parser_actions() -> dict[str, argparse.Action]:
    return {a.dest: a for a in download_videos.build_parser()._actions if a.option_strings}


@pytest.mark.parametrize("cls", SETTINGS_CLASSES, ids=lambda c: c.__name__)
def test_every_flag_comes_from_a_settings_field_with_its_default(cls):
    actions = parser_actions()
    for f in dataclasses.fields(cls):
        if not f.metadata.get("cli", True):
            assert f.name not in actions, f"{f.name} is library-only but has a flag"
            continue
        action = actions[f.name]
        assert action.option_strings[-1] == f"--{f.name}"
        assert action.default == default_of(cls, f.name)
        assert action.help == f.metadata["help"]


def test_the_script_declares_no_flag_or_default_of_its_own():
    """Every flag besides -v/-q comes from the settings classes: the script restates no default."""
    from_fields = {f.name for cls in SETTINGS_CLASSES for f in dataclasses.fields(cls) if f.metadata.get("cli", True)}
    assert set(parser_actions()) - from_fields == {"help", "verbose", "quiet"}
    tree = ast.parse((REPO / "download_videos.py").read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "add_argument"]
    assert calls == []


@pytest.mark.parametrize("argv, field, value", [
    (["--workers", "7"], "workers", 7),
    (["--retries", "0"], "retries", 0),
    (["--timeout", "12.5"], "timeout", 12.5),
    (["--sleep_interval", "2"], "sleep_interval", 2.0),
    (["--manifest", "m.json"], "manifest", "m.json"),
    (["--reverify"], "reverify", True),
    (["--max_samples", "-1"], "max_samples", -1),
])
def test_flags_parse_to_typed_values(argv, field, value):
    args = download_videos.build_parser().parse_args(argv)
    assert getattr(args, field) == value and type(getattr(args, field)) is type(value)


@pytest.mark.parametrize("script", ["download_videos.py", "python -m k9bench.prefetch"])
def test_help_shows_each_default_once_and_no_none(script):
    """``--help`` gives a flag's default where it says something, once: not ``(default: None)``, not after an on/off
    flag, not a second time after a help text that names its own (``--manifest``)."""
    import re

    from k9bench import prefetch

    parser = download_videos.build_parser() if script == "download_videos.py" else prefetch.build_parser()
    text = " ".join(parser.format_help().split())
    assert "(default: None)" not in text and "(default: False)" not in text and "(default: [])" not in text
    assert not re.search(r"default[^()]*\) \(default:", text), text
    assert "(default: -1)" in text  # --max_samples: a real default still shows
    if script == "download_videos.py":
        assert "manifest JSON path (default: <output_dir>/download_manifest.json) --reverify" in text


@pytest.mark.parametrize("argv", [
    ["--timeout", "nan"], ["--timeout", "inf"], ["--timeout", "-1"], ["--sleep_interval", "inf"],
    ["--workers", "0"], ["--workers", "two"], ["--retries", "-1"], ["--max_samples", "-3"],
])
def test_out_of_range_values_are_refused_when_parsed(argv, capsys):
    with pytest.raises(SystemExit) as info:
        download_videos.build_parser().parse_args(argv)
    assert info.value.code == 2
    assert f"argument {argv[0]}" in capsys.readouterr().err


def test_main_hands_frozen_settings_to_the_engine(tmp_path, monkeypatch):
    import k9bench.download.stage as kd

    seen = {}

    def fake_download(videos, output_dir, config, provenance=None, **kwargs):
        seen.update(output_dir=output_dir, config=config, kwargs=kwargs, provenance=provenance)
        return kd.DownloadReport(output_dir=str(output_dir))

    monkeypatch.setattr(kd, "download_videos", fake_download)
    out = tmp_path / "v"
    assert download_videos.main(["--dataset_name", "demo", "--output_dir", str(out), "--workers", "3", "-q"]) == 0
    config = seen["config"]
    assert isinstance(config, DownloadConfig) and not isinstance(config, argparse.Namespace)
    assert config.workers == 3 and config.manifest_path is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.workers = 5  # type: ignore[misc]
    assert seen["output_dir"] == str(out)
    # the demo set: made by the download itself (after its checks), one generator per demo video
    assert sorted(seen["kwargs"]["generators"]) == ["demoVid0001", "demoVid0002", "demoVid0003"]
    assert seen["kwargs"]["stage_block"]["name"] == "download"
    assert seen["provenance"]["script"] == "download_videos.py"
    assert not list(out.glob("*.mp4"))  # nothing generated outside the download's control


def test_manifest_records_the_settings_by_field_name():
    cfg = DownloadConfig(manifest="m.json", ydl_overrides={"proxy": "http://secret@x"}, allowed_extractors=("a",))
    public = cfg.public_dict()
    assert set(public) == {f.name for f in dataclasses.fields(DownloadConfig)}
    assert public["manifest"] == "m.json" and cfg.manifest_path == "m.json"
    assert public["ydl_overrides"] == ["proxy"]  # names only, never the values
    assert public["allowed_extractors"] == ["a"]


def test_config_from_argv_gives_frozen_settings_all_the_way_down():
    """The stage is built from frozen dataclasses only: no Namespace reaches the engine."""
    from k9bench.download.stage import DownloadRun, DownloadStage, config_from_argv

    run = config_from_argv(["--dataset_name", "demo", "--workers", "2", "--max_samples", "5"])
    assert isinstance(run, DownloadRun) and run.argv[-1] == "5"

    def walk(obj):
        assert not isinstance(obj, argparse.Namespace)
        if dataclasses.is_dataclass(obj):
            assert type(obj).__dataclass_params__.frozen, type(obj).__name__
            for f in dataclasses.fields(obj):
                walk(getattr(obj, f.name))

    walk(run)
    assert (run.job.max_samples, run.config.workers, run.dataset.dataset_name) == (5, 2, "demo")
    stage = DownloadStage(run)
    assert stage.fingerprint() == {"dataset_name": "demo", "split": "test", "drop_invalid_rows": False,
                                   "max_samples": 5, "max_height": 720}


def test_the_split_modules_do_not_import_each_other_in_a_loop():
    """The parts never import the front (k9bench.download.stage), not even for type checking, and the
    settings import no part of the engine: no circle (issue 20: download <-> ytdlp was one)."""
    def imports(name: str) -> set[str]:
        tree = ast.parse(Path(importlib.import_module(name).__file__).read_text())
        out = set()
        for node in ast.walk(tree):  # every level: functions and TYPE_CHECKING blocks too
            if isinstance(node, ast.ImportFrom) and node.module:
                out.add(node.module)
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
        return out

    for name in PARTS:
        assert "k9bench.download.stage" not in imports(name), name
    engine = {"k9bench.download.ytdlp", "k9bench.download.run", "k9bench.download.one", "k9bench.download.checks"}
    assert not imports("k9bench.download.settings") & engine
    assert "k9bench.download.settings" in imports("k9bench.download.ytdlp")  # where DownloadConfig now lives
    code = "import sys; import {m}; assert 'yt_dlp' not in sys.modules and 'datasets' not in sys.modules"
    import subprocess

    for name in DOWNLOAD_MODULES + ("k9bench.models.hub",):
        subprocess.run([sys.executable, "-c", code.format(m=name)], check=True, cwd=REPO)


def test_the_old_import_paths_still_work():
    """Callers in other modules (the runner's --auto_download, the tests) import from k9bench.download.stage."""
    from k9bench.download.stage import (  # noqa: F401
        FAILURE_CLASSES,
        MANIFEST_NAME,
        WORK_DIRNAME,
        DownloadInputError,
        DownloadReport,
        VideoResult,
        classify_error,
        download_videos,
        ydl_params,
    )
    from k9bench.download.failures import DownloadInputError as same
    from k9bench.stage import StageError

    assert DownloadInputError is same and issubclass(DownloadInputError, ValueError)
    assert issubclass(DownloadInputError, StageError) and DownloadInputError("x").exit_code == 2


def test_modules_stay_small():
    for name in DOWNLOAD_MODULES:
        lines = Path(importlib.import_module(name).__file__).read_text().count("\n")
        assert lines <= 500, f"{name}: {lines} lines"
