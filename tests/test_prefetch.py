"""``python -m k9bench.prefetch`` (issue 25 item 2), offline: a fake Hub (snapshot_download writes a
snapshot into a temporary HF cache), a Hub-like dataset, the local video server with the yt-dlp test
extractor, and the demo set. Never the network."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from k9bench.models import hub
from k9bench.video.ffmpeg import make_video
from k9bench.prefetch import ENV as prefetch_env
from k9bench.prefetch import main
from tests.video_server import Fmt, VideoServer, install_test_extractor

MODEL, EMBEDDING = "test-owner/tiny-video-llm", "test-owner/tiny-embedder"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """A private Hub cache, and a fake snapshot_download that fills it (recording what it was asked)."""
    import huggingface_hub

    cache = tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf" / "datasets"))
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", *prefetch_env.values()):
        monkeypatch.delenv(var, raising=False)
    asked: list[str] = []

    def fake_snapshot_download(repo_id, **kwargs):
        asked.append(repo_id)
        if repo_id.endswith("gated"):
            raise PermissionError("401 Client Error: access to this model is restricted")
        snap = cache / f"models--{repo_id.replace('/', '--')}" / "snapshots" / "abc123"
        snap.mkdir(parents=True, exist_ok=True)
        (snap / "config.json").write_text("{}")
        return str(snap)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    return asked


def common(tmp_path: Path) -> list[str]:
    return ["--model_name_or_path", MODEL, "--embedding_model", EMBEDDING, "--video_dir", str(tmp_path / "videos")]


def test_demo_prefetch_then_the_jobs_offline_checks_pass(hub_cache, tmp_path, capfd, monkeypatch):
    assert main([*common(tmp_path), "--dataset_name", "demo"]) == 0
    err = capfd.readouterr().err
    assert "HF_HUB_OFFLINE=1 will work" in err and "FAILED" not in err
    assert hub_cache == [MODEL, EMBEDDING]
    assert sorted(p.name for p in (tmp_path / "videos").glob("*.mp4")) == ["demoVid0001.mp4", "demoVid0002.mp4", "demoVid0003.mp4"]
    # what the job does offline: its preflight finds both models in the cache, its download step is done
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in (MODEL, EMBEDDING):
        hub.check_model_source(name, what="model", setting="--model_name_or_path")
    from k9bench.download.stage import DownloadStage, config_from_argv

    job_download = DownloadStage(config_from_argv(["--dataset_name", "demo", "--output_dir", str(tmp_path / "videos")]))
    assert job_download.done() is None


def test_a_hub_dataset_and_its_videos_with_cookies(hub_cache, tmp_path, capfd, monkeypatch):
    import k9bench.data.dataset as dataset
    import k9bench.download.stage as kd

    overrides = install_test_extractor()
    monkeypatch.setattr(kd, "DownloadConfig", functools.partial(kd.DownloadConfig, **overrides))
    scene = "k9pref00001"
    rows = [{"idx": i, "video_url": f"https://youtu.be/{scene}", "scene_name": scene, "question_category": "posture analysis",
             "question": f"test question {i}?", "options": {k: f"option {k}" for k in "ABCDE"}, "correct_answer": "A"}
            for i in range(2)]

    def fake_rows_from_hub(name, split):  # what datasets.load_dataset leaves behind: a prepared copy in its cache
        (tmp_path / "hf" / "datasets" / f"{name.replace('/', '___')}").mkdir(parents=True, exist_ok=True)
        return [dict(r) for r in rows]

    monkeypatch.setattr(dataset, "_rows_from_hub", fake_rows_from_hub)
    cookies = tmp_path / "cookies.txt"
    cookies.write_text("# Netscape HTTP Cookie File\n127.0.0.1\tFALSE\t/\tFALSE\t0\tK9SID\tsecret-value\n")
    with VideoServer() as server:
        monkeypatch.setenv("K9TEST_SERVER", server.base_url)
        for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(var, raising=False)
        server.add(scene, [Fmt("m", make_video(tmp_path / "src.mp4", duration=1.0, fps=10, width=96, height=64))])
        code = main([*common(tmp_path), "--dataset_name", "test-owner/questions", "--cookies", str(cookies)])
        assert code == 0, capfd.readouterr().err
        assert any("K9SID=secret-value" in c for c in server.cookies)
    assert "HF_HUB_OFFLINE=1 will work" in capfd.readouterr().err
    manifest = json.loads((tmp_path / "videos" / "download_manifest.json").read_text())
    assert manifest["summary"]["ok"] == 1 and manifest["stage"]["name"] == "download"
    assert manifest["provenance"]["script"] == "k9bench.prefetch"
    assert hub.is_cached("test-owner/questions", repo_type="dataset")


def test_a_model_that_cannot_be_fetched_is_named_and_the_rest_still_runs(hub_cache, tmp_path, capfd):
    code = main(["--model_name_or_path", "test-owner/gated", "--embedding_model", EMBEDDING,
                 "--video_dir", str(tmp_path / "videos"), "--dataset_name", "demo"])
    assert code == 1
    err = capfd.readouterr().err
    assert "test-owner/gated" in err and "401" in err and "HF_HUB_OFFLINE=1 will work" not in err
    assert hub_cache == ["test-owner/gated", EMBEDDING] and len(list((tmp_path / "videos").glob("*.mp4"))) == 3


def test_bad_input_is_refused_before_anything_is_fetched(hub_cache, tmp_path, capfd, monkeypatch):
    assert main([*common(tmp_path), "--dataset_name", "demo", "--cookies", str(tmp_path)]) == 2
    assert "--cookies" in capfd.readouterr().err and hub_cache == []
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main([*common(tmp_path), "--dataset_name", "demo"]) == 2
    assert "HF_HUB_OFFLINE is set" in capfd.readouterr().err and hub_cache == []
    assert not (tmp_path / "videos").exists()


def test_the_launchers_variables_are_the_defaults(hub_cache, tmp_path, monkeypatch):
    from k9bench.prefetch import build_parser

    monkeypatch.setenv("MODEL_NAME", "someone/model-x")
    monkeypatch.setenv("VIDEO_DIR", str(tmp_path / "vd"))
    monkeypatch.setenv("MAX_SAMPLES", "7")
    args = build_parser().parse_args([])
    assert (args.model_name_or_path, args.video_dir, args.max_samples) == ("someone/model-x", str(tmp_path / "vd"), 7)


def test_local_folders_need_no_fetching(hub_cache, tmp_path, capfd):
    local = tmp_path / "model"
    local.mkdir()
    assert main(["--model_name_or_path", str(local), "--skip", "embedding", "--skip", "dataset", "--skip", "videos"]) == 0
    assert "local folder: nothing to fetch" in capfd.readouterr().err and hub_cache == []
