"""The download as a stage (issue 20), its progress in a batch log and its manifest across reruns
(issues 23, 25), and the demo set made locally, byte for byte the same (issue 25 item 6)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

import download_videos
from k9bench.download.stage import DownloadConfig, DownloadStage, config_from_argv, download_videos as fetch_videos
from k9bench.video.ffmpeg import make_video
from tests.test_download import server  # noqa: F401 (fixture: the local video server)
from tests.video_server import TEST_EXTRACTOR, Fmt, install_test_extractor

DEMO_SCENES = ("demoVid0001", "demoVid0002", "demoVid0003")


def vid(n: int) -> str:
    return f"k9stage{n:04d}"


@pytest.fixture(scope="module")
def overrides() -> dict:
    return install_test_extractor()


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return make_video(tmp_path_factory.mktemp("src") / "s.mp4", duration=1.0, fps=10, width=96, height=64)


@pytest.fixture
def no_online_fetch(monkeypatch):
    """Any attempt to run yt-dlp fails the test (the demo set is never looked for online)."""
    import k9bench.download.one as one

    def refuse(*args, **kwargs):
        raise AssertionError("yt-dlp was asked for a demo video")

    monkeypatch.setattr(one, "fetch", refuse)


def cfg(overrides: dict, **kw) -> DownloadConfig:
    return DownloadConfig(**{"workers": 2, "retries": 0, "timeout": 2.0, "progress": False, **kw}, **overrides)


def manifest(folder: Path) -> dict:
    return json.loads((folder / "download_manifest.json").read_text())


# --------------------------------------------------------------------------- the manifest keeps what it knew


def test_a_repeated_download_keeps_each_videos_format(server, source, overrides, tmp_path):
    scenes = [vid(1), vid(2)]
    for s in scenes:
        server.add(s, [Fmt("m", source)])
    videos = {s: f"https://youtu.be/{s}" for s in scenes}
    first = fetch_videos(videos, tmp_path, cfg(overrides))
    assert [r.status for r in first.results] == ["ok", "ok"]
    formats = {r.scene_name: r.format for r in first.results}
    fetched_at = {r.scene_name: r.downloaded_at for r in first.results}
    assert all(f and f["format_id"] == "m" for f in formats.values())

    for reverify in (False, True):  # trusted from the manifest, and verified again
        again = fetch_videos(videos, tmp_path, cfg(overrides, reverify=reverify))
        assert [r.status for r in again.results] == ["skipped", "skipped"]
        assert {r.scene_name: r.format for r in again.results} == formats
        assert {r.scene_name: r.downloaded_at for r in again.results} == fetched_at
    assert all(server.media_requests(s) == 1 for s in scenes)
    assert {e["scene_name"]: e["format"] for e in manifest(tmp_path)["videos"]} == formats


def test_a_run_over_fewer_videos_or_a_killed_run_keeps_the_others_entries(server, source, overrides, tmp_path):
    scenes = [vid(3), vid(4)]
    for s in scenes:
        server.add(s, [Fmt("m", source)])
    videos = {s: f"https://youtu.be/{s}" for s in scenes}
    fetch_videos(videos, tmp_path, cfg(overrides))
    fmt = manifest(tmp_path)["videos"][1]["format"]

    fetch_videos({vid(3): videos[vid(3)]}, tmp_path, cfg(overrides))  # fewer videos this time
    data = manifest(tmp_path)
    assert [e["scene_name"] for e in data["videos"]] == [vid(3)] and data["summary"]["total"] == 1
    assert data["earlier"][vid(4)]["format"] == fmt  # kept, not counted

    def stop(_result):  # killed after the first video: the second is still "earlier"
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fetch_videos(videos, tmp_path, cfg(overrides, workers=1), on_result=stop)
    data = manifest(tmp_path)  # the second video: finished while the run stopped, or still the earlier entry
    entry = {e["scene_name"]: e for e in data["videos"]}.get(vid(4)) or data["earlier"][vid(4)]
    assert data["complete"] is False and entry["format"] == fmt
    final = fetch_videos(videos, tmp_path, cfg(overrides))
    assert final.by_scene[vid(4)].status == "skipped" and final.by_scene[vid(4)].format == fmt
    assert "earlier" in manifest(tmp_path) and manifest(tmp_path)["earlier"] == {}


# --------------------------------------------------------------------------- progress in a batch log


def test_progress_reaches_a_log_at_each_tenth(tmp_path, caplog, no_online_fetch, monkeypatch):
    monkeypatch.delenv("K9BENCH_NO_PROGRESS", raising=False)
    caplog.set_level(logging.INFO, logger="k9bench.progress")
    from k9bench.data.demo import demo_generators

    videos = {s: f"https://www.youtube.com/watch?v={s}" for s in DEMO_SCENES}
    fetch_videos(videos, tmp_path, DownloadConfig(workers=1), generators=demo_generators())
    lines = [r.getMessage() for r in caplog.records if r.name == "k9bench.progress"]
    assert [ln.split(",")[0] for ln in lines] == ["download: 1/3 (33%)", "download: 2/3 (67%)", "download: 3/3 (100%)"]
    assert all(" videos/s" in ln and ln.endswith("0 failed") for ln in lines)
    assert "ETA" in lines[0] and "took" in lines[-1]


def test_a_long_video_still_gives_a_line_every_interval(tmp_path, caplog, monkeypatch):
    """While one video takes long, a line still comes every K9BENCH_PROGRESS_INTERVAL seconds."""
    import time

    from k9bench.data.demo import make_demo_video

    monkeypatch.delenv("K9BENCH_NO_PROGRESS", raising=False)
    monkeypatch.setenv("K9BENCH_PROGRESS_INTERVAL", "1")
    caplog.set_level(logging.INFO, logger="k9bench.progress")

    def slow(path):
        time.sleep(3.5)
        return make_demo_video("demoVid0001", path)

    fetch_videos({"demoVid0001": "https://youtu.be/demoVid0001"}, tmp_path, DownloadConfig(workers=1),
                 generators={"demoVid0001": slow})
    lines = [r.getMessage() for r in caplog.records if r.name == "k9bench.progress"]
    waiting = [ln for ln in lines if ln.startswith("download: 0/1 (0%)")]
    assert len(waiting) >= 2 and "ETA unknown" in waiting[0], lines
    assert lines[-1].startswith("download: 1/1 (100%)")


# --------------------------------------------------------------------------- the demo set, made locally


def test_two_demo_downloads_are_byte_identical(tmp_path, no_online_fetch):
    for name in ("a", "b"):
        assert download_videos.main(["--dataset_name", "demo", "--output_dir", str(tmp_path / name), "-q"]) == 0
    for scene in DEMO_SCENES:
        a, b = (tmp_path / n / f"{scene}.mp4" for n in ("a", "b"))
        assert a.read_bytes() == b.read_bytes(), scene
    entries = manifest(tmp_path / "a")["videos"]
    assert {e["format"]["format_id"] for e in entries} == {"generated"}


def test_two_demo_generations_are_byte_identical(tmp_path):
    from k9bench.data.demo import make_demo_videos

    for soundtrack in (False, True):
        paths = [make_demo_videos(tmp_path / f"{n}{soundtrack}", soundtrack=soundtrack) for n in "ab"]
        for a, b in zip(*paths):
            assert a.read_bytes() == b.read_bytes(), a.name


def test_a_corrupt_demo_video_is_made_again_not_fetched(tmp_path, no_online_fetch):
    from k9bench.download.stage import fetch_for_questions

    out = tmp_path / "v"
    videos = {s: f"https://www.youtube.com/watch?v={s}" for s in DEMO_SCENES}
    fetch_for_questions(videos, out, DownloadConfig(progress=False), dataset_name="demo")
    good = (out / "demoVid0002.mp4").read_bytes()
    (out / "demoVid0002.mp4").write_bytes(good[: len(good) // 2])  # a torn copy
    report = fetch_for_questions(videos, out, DownloadConfig(progress=False), dataset_name="demo")
    entry = report.by_scene["demoVid0002"]
    assert entry.status == "ok" and entry.replaced_invalid and "made locally" in entry.message
    assert (out / "demoVid0002.mp4").read_bytes() == good
    assert [report.by_scene[s].status for s in ("demoVid0001", "demoVid0003")] == ["skipped", "skipped"]
    # the summary says the video was made here, not downloaded
    assert report.summary_line() == "3 video(s): 0 downloaded, 1 made locally, 2 already present, 0 failed"


def test_auto_download_of_the_demo_set_with_soundtracks(tmp_path, no_online_fetch, av_video_dir):
    from k9bench.download.stage import fetch_for_questions

    videos = {s: f"https://youtu.be/{s}" for s in DEMO_SCENES}
    report = fetch_for_questions(videos, tmp_path, DownloadConfig(progress=False), dataset_name="demo", soundtrack=True)
    assert report.exit_code == 0
    for scene in DEMO_SCENES:
        assert (tmp_path / f"{scene}.mp4").read_bytes() == (av_video_dir / f"{scene}.mp4").read_bytes()


def test_other_datasets_are_never_made_locally(tmp_path, monkeypatch):
    import k9bench.download.stage as kd

    seen = {}

    def fake(videos, out, config, **kwargs):
        seen.update(kwargs)
        return kd.DownloadReport(output_dir=str(out))

    monkeypatch.setattr(kd, "download_videos", fake)
    kd.fetch_for_questions({"demoVid0001": "https://youtu.be/demoVid0001"}, tmp_path, DownloadConfig(), dataset_name="x.jsonl")
    assert seen["generators"] == {}


# --------------------------------------------------------------------------- the stage contract


def test_done_says_why_the_stage_must_run(tmp_path, no_online_fetch):
    out = tmp_path / "v"
    argv = ["--dataset_name", "demo", "--output_dir", str(out), "-q"]
    stage = DownloadStage(config_from_argv(argv))
    assert "missing" in stage.done()
    assert download_videos.main(argv) == 0
    assert stage.done() is None
    assert "settings differ" in DownloadStage(config_from_argv(argv + ["--max_samples", "4"])).done()
    assert DownloadStage(config_from_argv(argv + ["--workers", "1"])).done() is None  # not a result setting
    (out / "demoVid0003.mp4").unlink()
    assert "demoVid0003.mp4 is missing" in stage.done()
    assert download_videos.main(argv) == 0 and stage.done() is None


def test_a_second_download_of_the_same_output_refuses_at_once(tmp_path, capsys, no_online_fetch):
    from k9bench.stage import output_lock

    out = tmp_path / "v"
    with output_lock(out / "download_manifest.json"):
        code = download_videos.main(["--dataset_name", "demo", "--output_dir", str(out)])
    assert code == 2
    errors = [ln for ln in capsys.readouterr().err.splitlines() if " ERROR " in ln]
    assert len(errors) == 1 and f"pid {os.getpid()}" in errors[0], errors
    assert not list(out.glob("*.mp4"))


def test_a_stop_signal_keeps_the_finished_videos_and_exits_75(tmp_path, monkeypatch, no_online_fetch):
    import signal

    import k9bench.data.demo as demo

    real = demo.make_demo_video
    made = []

    def make_then_signal(scene, path, **kw):
        out = real(scene, path, **kw)
        made.append(scene)
        if len(made) == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return out

    monkeypatch.setattr(demo, "make_demo_video", make_then_signal)
    out = tmp_path / "v"
    argv = ["--dataset_name", "demo", "--output_dir", str(out), "--workers", "1", "-q"]
    assert download_videos.main(argv) == 75
    data = manifest(out)
    assert data["complete"] is False and all(e["status"] in ("ok", "failed") for e in data["videos"])
    monkeypatch.setattr(demo, "make_demo_video", real)
    assert download_videos.main(argv) == 0


def test_cookies_given_as_a_folder_is_one_line_naming_the_flag(tmp_path):
    from k9bench.stage import StageError

    with pytest.raises(StageError) as info:
        config_from_argv(["--cookies", str(tmp_path)])
    assert info.value.exit_code == 2 and "\n" not in str(info.value)
    assert f"--cookies {tmp_path}: is a folder, not a cookies file" in str(info.value)


def test_the_test_extractor_is_the_only_one(overrides):
    assert overrides["allowed_extractors"] == (TEST_EXTRACTOR,)
