"""download_videos.py and k9bench.download.stage, offline.

A local HTTP server (tests/video_server.py) serves generated videos; a yt-dlp extractor
plugin (tests/ytdlp_test_plugins) answers real YouTube URL forms from it. yt-dlp is
restricted to that extractor in every test that downloads, so the real YouTube extractor
never runs (asserted below), and pytest-socket refuses anything beyond loopback.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from k9bench.download.stage import (
    WORK_DIRNAME,
    DownloadConfig,
    DownloadInputError,
    classify_error,
    download_videos,
    ydl_params,
)
from k9bench.video.ffmpeg import make_video, run_ffmpeg
from k9bench.download.verify import read_top_level_boxes, verify_video
from tests.video_server import TEST_EXTRACTOR, Fmt, VideoServer, install_test_extractor

REPO = Path(__file__).resolve().parent.parent


def vid(n: int) -> str:
    """An 11-character test id."""
    return f"k9test{n:05d}"


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    """Tiny source videos in the containers yt-dlp may hand over."""
    folder = tmp_path_factory.mktemp("sources")
    small = {"duration": 1.0, "fps": 10, "width": 96, "height": 64}
    out = {
        "mp4": make_video(folder / "plain.mp4", faststart=False, **small),  # moov at the end
        "frag": make_video(folder / "frag.mp4", fragmented=True, **small),
        "webm": make_video(folder / "clip.webm", **small),
        "m4a": folder / "audio.m4a",
    }
    run_ffmpeg(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=16000", "-t", "1", "-c:a", "aac", str(out["m4a"])])
    # a real video in a codec the mp4 container cannot hold: the stream-copy remux must fail
    out["huffyuv"] = folder / "lossless.mkv"
    run_ffmpeg(["-f", "lavfi", "-i", "testsrc2=size=96x64:rate=10", "-t", "1", "-c:v", "huffyuv", str(out["huffyuv"])])
    return out


@pytest.fixture(scope="module")
def overrides() -> dict:
    return install_test_extractor()


@pytest.fixture(autouse=True)
def no_real_extractor(monkeypatch):
    """Belt and braces: any yt-dlp extractor other than the test stand-in fails the test."""
    from yt_dlp.extractor.common import InfoExtractor

    original = InfoExtractor.extract
    intruders: list[str] = []

    def guarded(self, url):
        if self.IE_NAME != TEST_EXTRACTOR:
            intruders.append(f"{self.IE_NAME}: {url}")
            raise AssertionError(f"the real yt-dlp extractor {self.IE_NAME!r} was asked for {url}")
        return original(self, url)

    monkeypatch.setattr(InfoExtractor, "extract", guarded)
    yield
    assert intruders == []


@pytest.fixture
def server(monkeypatch):
    with VideoServer(stall_s=20.0) as srv:
        monkeypatch.setenv("K9TEST_SERVER", srv.base_url)
        for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(var, raising=False)
        yield srv


def config(overrides: dict, **kw) -> DownloadConfig:
    base = {"workers": 4, "retries": 0, "timeout": 1.0, "progress": False}
    base.update(kw)
    return DownloadConfig(**base, **overrides)


def folder_names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def assert_faststart_mp4(path: Path) -> None:
    types = [b[0] for b in read_top_level_boxes(path)]
    assert types[0] == "ftyp" and "moof" not in types
    assert types.index("moov") < types.index("mdat"), types
    check = verify_video(path)
    assert check.ok, check.reason
    assert check.packets >= check.header_frames > 0


# ---------------------------------------------------------------------------
# The real extractor can never run


def test_only_the_test_extractor_is_loaded(overrides, tmp_path):
    import yt_dlp
    from yt_dlp.utils import DownloadError

    cfg = config(overrides)
    params = ydl_params(vid(0), tmp_path, tmp_path / "cache", cfg, "ffmpeg", None)
    with yt_dlp.YoutubeDL(params) as ydl:
        names = [ie.IE_NAME for ie in ydl._ies.values()]
        assert names == [TEST_EXTRACTOR]
        # A URL our stand-in does not claim is refused outright, never handed to YouTube.
        with pytest.raises(DownloadError, match="No suitable extractor"):
            ydl.extract_info("https://www.youtube.com/playlist?list=PLxxxxxxxxxxxx", download=False)


# ---------------------------------------------------------------------------
# Success paths


def test_mp4_fragmented_webm_and_merged_streams_end_as_faststart_mp4(server, sources, overrides, tmp_path):
    server.add(vid(1), [Fmt("mp4", sources["mp4"])])
    server.add(vid(2), [Fmt("frag", sources["frag"])])
    server.add(vid(3), [Fmt("webm", sources["webm"], ext="webm")])
    server.add(vid(4), [  # separate video-only and audio-only streams: yt-dlp merges them with our ffmpeg
        Fmt("v", sources["mp4"], height=64, width=96, vcodec="avc1", acodec="none"),
        Fmt("a", sources["m4a"], ext="m4a", vcodec="none", acodec="mp4a"),
    ])
    videos = {  # the URL forms found in the dataset
        vid(1): f"https://www.youtube.com/watch?v={vid(1)}&t=3s",
        vid(2): f"https://youtu.be/{vid(2)}",
        vid(3): f"https://www.youtube.com/shorts/{vid(3)}",
        vid(4): f"https://m.youtube.com/embed/{vid(4)}",
    }
    out = tmp_path / "videos"
    report = download_videos(videos, out, config(overrides))

    assert report.counts == {"ok": 4, "skipped": 0, "failed": 0}
    assert report.exit_code == 0
    assert folder_names(out) == {f"{s}.mp4" for s in videos} | {"download_manifest.json"}
    for scene in videos:
        assert_faststart_mp4(out / f"{scene}.mp4")
        assert server.media_requests(scene) >= 1
    assert report.by_scene[vid(4)].video["has_audio"] is True
    assert report.by_scene[vid(3)].format["ext"] == "webm"
    manifest = json.loads((out / "download_manifest.json").read_text())
    assert manifest["summary"] == {"total": 4, "ok": 4, "skipped": 0, "failed": 0, "failed_by_class": {}}
    assert manifest["complete"] is True
    assert [e["scene_name"] for e in manifest["videos"]] == list(videos)
    assert all(e["status"] == "ok" and e["file"] == f"{e['scene_name']}.mp4" for e in manifest["videos"])
    assert manifest["config"]["allowed_extractors"] == [TEST_EXTRACTOR]

    # A rerun skips every verified file without touching the network.
    before = len(server.requests)
    again = download_videos(videos, out, config(overrides))
    assert again.counts == {"ok": 0, "skipped": 4, "failed": 0}
    assert len(server.requests) == before


@pytest.mark.parametrize(
    "heights, expected",
    [
        ([360, 720, 1080], "h720"),  # the largest at or below 720p
        ([240, 480, 1440], "h480"),
        ([1080, 2160], "h1080"),  # nothing at or below: the smallest above
        ([None], "hNone"),  # a direct file URL carries no height
    ],
)
def test_720p_cap_uses_format_heights(server, sources, overrides, tmp_path, heights, expected):
    server.add(vid(10), [Fmt(f"h{h}", sources["mp4"], height=h, vcodec="avc1" if h else None, acodec="mp4a") for h in heights])
    report = download_videos({vid(10): f"https://youtu.be/{vid(10)}"}, tmp_path, config(overrides))
    result = report.by_scene[vid(10)]
    assert result.status == "ok", result.message
    assert result.format["format_id"] == expected
    # Only the chosen format was fetched.
    assert [p for p in server.requests if p.startswith("/media/")] == [f"/media/{vid(10)}/{expected}"]


def test_h264_mp4_preferred_at_the_chosen_height(server, sources, overrides, tmp_path):
    """At the capped height an h264 mp4 wins over vp9/webm (YouTube offers both), and a larger mp4 is not taken."""
    server.add(vid(11), [
        Fmt("webm720", sources["webm"], ext="webm", height=720, width=1280, vcodec="vp9", acodec="opus"),
        Fmt("mp4720", sources["mp4"], height=720, width=1280, vcodec="avc1.4d401f", acodec="mp4a.40.2"),
        Fmt("mp41080", sources["mp4"], height=1080, width=1920, vcodec="avc1.640028", acodec="mp4a.40.2"),
        Fmt("webm480", sources["webm"], ext="webm", height=480, width=854, vcodec="vp9", acodec="opus"),
    ])
    report = download_videos({vid(11): f"https://youtu.be/{vid(11)}"}, tmp_path, config(overrides))
    result = report.by_scene[vid(11)]
    assert result.status == "ok", result.message
    assert (result.format["format_id"], result.format["ext"], result.format["height"]) == ("mp4720", "mp4", 720)
    assert [p for p in server.requests if p.startswith("/media/")] == [f"/media/{vid(11)}/mp4720"]


# ---------------------------------------------------------------------------
# Failures: each in its class, nothing invalid left behind


def test_every_failure_lands_in_its_class(server, sources, overrides, tmp_path):
    cases = {
        vid(20): ([Fmt("m", sources["mp4"], mode="http404")], "http_error", 404),
        vid(21): ([Fmt("m", sources["mp4"], mode="http500")], "http_error", 500),
        vid(22): ([Fmt("m", sources["mp4"], mode="truncate")], "network", None),
        vid(23): ([Fmt("m", sources["mp4"], mode="stall")], "timeout", None),
        vid(24): ("unavailable", "unavailable", None),
        vid(25): ("private", "unavailable", None),
        vid(26): ("bot", "sign_in_required", None),
        vid(27): ([Fmt("m", sources["mp4"], mode="refused")], "network", None),
        vid(28): ([Fmt("m", data=os.urandom(20000))], "invalid_file", None),
        vid(29): ([Fmt("m", data=b"\x00\x00\x00\x18ftypisom" + os.urandom(5000))], "invalid_file", None),
        vid(31): ([Fmt("m", sources["huffyuv"], ext="mkv")], "ffmpeg_error", None),
    }
    for scene, (spec, _, _) in cases.items():
        if isinstance(spec, str):
            server.add(scene, error=spec)
        else:
            server.add(scene, spec)
    server.add(vid(30), [Fmt("m", sources["mp4"])])
    videos = {s: f"https://www.youtube.com/watch?v={s}" for s in [*cases, vid(30)]}
    out = tmp_path / "videos"
    report = download_videos(videos, out, config(overrides, workers=6))

    for scene, (_, error_class, status) in cases.items():
        res = report.by_scene[scene]
        assert (res.status, res.error_class, res.http_status) == ("failed", error_class, status), res.message
        assert res.message and res.file is None
    assert report.by_scene[vid(30)].status == "ok"
    assert report.exit_code == 1
    assert report.failed_by_class == {
        "ffmpeg_error": 1, "http_error": 2, "invalid_file": 2, "network": 2, "sign_in_required": 1, "timeout": 1, "unavailable": 2,
    }
    assert "ffmpeg remux failed" in report.by_scene[vid(31)].message and "huffyuv" in report.by_scene[vid(31)].message
    # Nothing invalid left: only the good video and the manifest (no work folder, no .part).
    assert folder_names(out) == {f"{vid(30)}.mp4", "download_manifest.json"}
    manifest = json.loads((out / "download_manifest.json").read_text())
    assert manifest["summary"]["failed"] == len(cases)
    assert manifest["summary"]["failed_by_class"] == report.failed_by_class
    entry = next(e for e in manifest["videos"] if e["scene_name"] == vid(20))
    assert entry["error_class"] == "http_error" and entry["http_status"] == 404 and "404" in entry["message"]


def test_ytdlp_warnings_reach_the_manifest_and_the_log_once(server, sources, overrides, tmp_path, caplog):
    """yt-dlp's warnings (formats skipped, no JS runtime...) explain a lower quality or a failure: never hidden."""
    text = "Some web client https formats have been skipped as they are missing a url"
    server.add(vid(35), [Fmt("m", sources["mp4"])], warning=text)
    server.add(vid(36), [Fmt("m", sources["mp4"])], warning=text)
    server.add(vid(37), [Fmt("m", sources["mp4"], mode="http404")], warning="n challenge solving failed")
    server.add(vid(38), [Fmt("m", sources["mp4"])])
    videos = {s: f"https://youtu.be/{s}" for s in (vid(35), vid(36), vid(37), vid(38))}
    with caplog.at_level(logging.WARNING, logger="k9bench.download.stage"):
        report = download_videos(videos, tmp_path, config(overrides, workers=1))
    manifest = {e["scene_name"]: e for e in json.loads((tmp_path / "download_manifest.json").read_text())["videos"]}
    for scene in (vid(35), vid(36)):
        assert manifest[scene]["status"] == "ok"
        assert [w for w in manifest[scene]["warnings"] if text in w], manifest[scene]["warnings"]
    assert any("n challenge solving failed" in w for w in manifest[vid(37)]["warnings"])
    assert report.by_scene[vid(37)].status == "failed"
    assert manifest[vid(38)]["warnings"] is None
    logged = [r.getMessage() for r in caplog.records if "yt-dlp warning" in r.getMessage()]
    assert sum(text in m for m in logged) == 1  # the same warning for another video is not repeated
    assert sum("n challenge solving failed" in m for m in logged) == 1


def test_server_errors_are_retried_before_failing(server, sources, overrides, tmp_path):
    server.add(vid(40), [Fmt("m", sources["mp4"], mode="http500")])
    report = download_videos({vid(40): f"https://youtu.be/{vid(40)}"}, tmp_path, config(overrides, retries=1))
    assert report.by_scene[vid(40)].error_class == "http_error"
    assert server.media_requests(vid(40)) == 2


def test_existing_file_with_index_at_the_end_is_fixed_locally(server, sources, overrides, tmp_path):
    server.add(vid(41), [Fmt("m", sources["mp4"])])
    shutil.copyfile(sources["mp4"], tmp_path / f"{vid(41)}.mp4")  # complete, but moov after mdat
    report = download_videos({vid(41): f"https://youtu.be/{vid(41)}"}, tmp_path, config(overrides))
    res = report.by_scene[vid(41)]
    assert res.status == "ok" and "remuxed to faststart locally" in res.message
    assert server.media_requests(vid(41)) == 0
    assert_faststart_mp4(tmp_path / f"{vid(41)}.mp4")


def test_truncated_existing_file_is_replaced(server, sources, overrides, tmp_path):
    server.add(vid(39), [Fmt("m", sources["frag"])])
    good = make_video(tmp_path / "good.mp4", duration=1.0, fps=10, width=96, height=64)
    data = good.read_bytes()
    (tmp_path / f"{vid(39)}.mp4").write_bytes(data[: len(data) * 2 // 3])
    report = download_videos({vid(39): f"https://youtu.be/{vid(39)}"}, tmp_path, config(overrides))
    res = report.by_scene[vid(39)]
    assert res.status == "ok" and "truncated" in res.replaced_invalid
    assert server.media_requests(vid(39)) == 1
    assert_faststart_mp4(tmp_path / f"{vid(39)}.mp4")


def test_a_folder_named_like_a_video_fails_that_video_only(server, sources, overrides, tmp_path):
    """An odd entry in the output folder is one video's failure with a clear message, not the end of the run."""
    server.add(vid(32), [Fmt("m", sources["mp4"])])
    server.add(vid(33), [Fmt("m", sources["mp4"])])
    (tmp_path / f"{vid(32)}.mp4").mkdir()
    videos = {s: f"https://youtu.be/{s}" for s in (vid(32), vid(33))}
    report = download_videos(videos, tmp_path, config(overrides))
    bad = report.by_scene[vid(32)]
    assert (bad.status, bad.error_class) == ("failed", "error")
    assert "is not a regular file" in bad.message and f"{vid(32)}.mp4" in bad.message
    assert report.by_scene[vid(33)].status == "ok" and report.exit_code == 1
    assert (tmp_path / f"{vid(32)}.mp4").is_dir()  # left for the user to look at


def test_unexpected_os_error_on_one_video_does_not_stop_the_run(server, sources, overrides, tmp_path, monkeypatch):
    import k9bench.download.one as kd

    server.add(vid(34), [Fmt("m", sources["mp4"])])
    server.add(vid(19), [Fmt("m", sources["mp4"])])
    real = kd.url_key

    def failing(url):
        if vid(34) in url:
            raise OSError(28, "No space left on device")
        return real(url)

    monkeypatch.setattr(kd, "url_key", failing)
    report = download_videos({s: f"https://youtu.be/{s}" for s in (vid(34), vid(19))}, tmp_path, config(overrides))
    res = report.by_scene[vid(34)]
    assert (res.status, res.error_class) == ("failed", "error") and "No space left" in res.message
    assert report.by_scene[vid(19)].status == "ok"


def test_failed_replacement_leaves_no_invalid_file(server, sources, overrides, tmp_path):
    server.add(vid(42), error="unavailable")
    (tmp_path / f"{vid(42)}.mp4").write_bytes(b"not a video")
    report = download_videos({vid(42): f"https://youtu.be/{vid(42)}"}, tmp_path, config(overrides))
    assert report.by_scene[vid(42)].error_class == "unavailable"
    assert not (tmp_path / f"{vid(42)}.mp4").exists()


def test_rerun_trusts_the_manifest_only_for_unchanged_files(server, sources, overrides, tmp_path):
    server.add(vid(43), [Fmt("m", sources["mp4"])])
    videos = {vid(43): f"https://youtu.be/{vid(43)}"}
    download_videos(videos, tmp_path, config(overrides))
    path = tmp_path / f"{vid(43)}.mp4"

    again = download_videos(videos, tmp_path, config(overrides)).by_scene[vid(43)]
    assert again.status == "skipped" and "earlier run" in again.message
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))  # touched: verify again
    touched = download_videos(videos, tmp_path, config(overrides)).by_scene[vid(43)]
    assert touched.status == "skipped" and touched.message is None and touched.video["packets"] > 0
    forced = download_videos(videos, tmp_path, config(overrides, reverify=True)).by_scene[vid(43)]
    assert forced.status == "skipped" and forced.message is None
    assert server.media_requests(vid(43)) == 1


def test_interrupt_writes_a_manifest_of_finished_videos(server, sources, overrides, tmp_path):
    scenes = [vid(44), vid(45), vid(46)]
    for scene in scenes:
        server.add(scene, [Fmt("m", sources["mp4"])])

    def stop(_result):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        download_videos({s: f"https://youtu.be/{s}" for s in scenes}, tmp_path, config(overrides, workers=1), on_result=stop)
    manifest = json.loads((tmp_path / "download_manifest.json").read_text())
    assert manifest["complete"] is False
    assert [e["status"] for e in manifest["videos"]] == ["ok"]
    assert_faststart_mp4(tmp_path / manifest["videos"][0]["file"])


def test_a_second_run_into_the_same_folder_waits_for_the_first(server, sources, overrides, tmp_path, caplog):
    """Two runs into one folder (another shell, another job's --auto_download) never write the same .part."""
    import fcntl
    import threading

    out = tmp_path / "videos"
    out.mkdir()
    server.add(vid(54), [Fmt("m", sources["mp4"])])
    videos = {vid(54): f"https://youtu.be/{vid(54)}"}
    holder = os.open(out, os.O_RDONLY)  # stands in for the first run
    fcntl.flock(holder, fcntl.LOCK_EX)
    reports = []
    with caplog.at_level(logging.INFO, logger="k9bench.download.stage"):
        second = threading.Thread(target=lambda: reports.append(download_videos(videos, out, config(overrides))))
        second.start()
        time.sleep(1.0)
        assert second.is_alive() and server.media_requests(vid(54)) == 0  # waiting, nothing fetched
        assert "another download is running into" in caplog.text
        os.close(holder)  # the first run ends
        second.join(timeout=30)
    assert not second.is_alive() and reports[0].counts["ok"] == 1
    assert_faststart_mp4(out / f"{vid(54)}.mp4")
    assert folder_names(out) == {f"{vid(54)}.mp4", "download_manifest.json"}  # the lock leaves no file behind


COOKIE_LINE = "127.0.0.1\tFALSE\t/\tFALSE\t0\tK9SID\tsecret-value\n"


def test_cookies_file_is_sent_and_never_rewritten(server, sources, overrides, tmp_path):
    server.add(vid(47), [Fmt("m", sources["mp4"])])
    cookies = tmp_path / "cookies.txt"
    cookies.write_text("# Netscape HTTP Cookie File\n" + COOKIE_LINE)
    before = (cookies.read_bytes(), cookies.stat().st_mtime_ns)
    out = tmp_path / "videos"
    report = download_videos({vid(47): f"https://youtu.be/{vid(47)}"}, out, config(overrides, cookies=str(cookies)))
    assert report.counts["ok"] == 1
    assert any("K9SID=secret-value" in c for c in server.cookies)
    assert (cookies.read_bytes(), cookies.stat().st_mtime_ns) == before
    assert folder_names(out) == {f"{vid(47)}.mp4", "download_manifest.json"}  # no private copy left behind


def test_cookies_from_browser_are_read_once(server, sources, overrides, tmp_path, monkeypatch):
    import yt_dlp.cookies as ytc

    source = tmp_path / "browser.txt"
    source.write_text("# Netscape HTTP Cookie File\n" + COOKIE_LINE)
    calls = []

    def fake_extract(name, profile=None, logger=None, *, keyring=None, container=None):
        calls.append((name, profile, keyring, container))
        jar = ytc.YoutubeDLCookieJar(str(source))
        jar.load()
        return jar

    monkeypatch.setattr(ytc, "extract_cookies_from_browser", fake_extract)
    scenes = [vid(48), vid(49)]
    for scene in scenes:
        server.add(scene, [Fmt("m", sources["mp4"])])
    out = tmp_path / "videos"
    cfg = config(overrides, cookies_from_browser="firefox:work")
    report = download_videos({s: f"https://youtu.be/{s}" for s in scenes}, out, cfg)
    assert report.counts["ok"] == 2
    assert calls == [("firefox", "work", None, None)]
    assert sum("K9SID=secret-value" in c for c in server.cookies) >= 2
    assert folder_names(out) == {f"{s}.mp4" for s in scenes} | {"download_manifest.json"}


# ---------------------------------------------------------------------------
# Kill and resume

_DRIVER = """
import json, sys
sys.path[:0] = [{repo!r}]
from tests.video_server import install_test_extractor
from k9bench.download.stage import DownloadConfig, download_videos
overrides = install_test_extractor()
videos, out = json.loads(sys.argv[1]), sys.argv[2]
download_videos(videos, out, DownloadConfig(workers=1, retries=0, timeout=30, progress=False, **overrides))
"""


@pytest.mark.slow
def test_resume_after_kill_mid_run(server, sources, overrides, tmp_path):
    a, b, c, d = vid(50), vid(51), vid(52), vid(53)
    for scene in (a, b, d):
        server.add(scene, [Fmt("m", sources["mp4"])])
    big = make_video(tmp_path / "big.mp4", duration=3.0, fps=25, width=320, height=240)
    server.add(c, [Fmt("m", big, mode="stall")])  # hangs after half the body: the kill lands mid-transfer
    videos = {s: f"https://youtu.be/{s}" for s in (a, b, c, d)}
    out = tmp_path / "videos"
    # A partial download left for the same scene by another URL must not be resumed.
    stale = out / WORK_DIRNAME / f"{d}.0000000000"
    stale.mkdir(parents=True)
    (stale / f"{d}.mp4.part").write_bytes(b"from another URL")

    env = {**os.environ, "K9TEST_SERVER": server.base_url}
    proc = subprocess.Popen(
        [sys.executable, "-c", _DRIVER.format(repo=str(REPO)), json.dumps(videos), str(out)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 40
        parts: list[Path] = []
        while time.monotonic() < deadline:
            parts = [p for p in (out / WORK_DIRNAME).glob(f"{c}.*/*.part") if p.stat().st_size > 0]
            if parts and (out / f"{b}.mp4").exists():
                break
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.1)
        assert parts, "the run never reached the third video"
    finally:
        proc.kill()
        proc.wait()
    assert {f"{a}.mp4", f"{b}.mp4"} <= folder_names(out)
    assert f"{c}.mp4" not in folder_names(out)  # half a video never appears under its final name
    assert server.media_requests(a) == server.media_requests(b) == 1

    server.add(c, [Fmt("m", big)])  # the server recovers
    report = download_videos(videos, out, config(overrides, workers=2))
    assert [report.by_scene[s].status for s in (a, b, c, d)] == ["skipped", "skipped", "ok", "ok"]
    assert server.media_requests(a) == server.media_requests(b) == 1  # finished videos are never fetched again
    assert f"/media/{c}/m" in server.range_requests  # its own .part was resumed
    assert f"/media/{d}/m" not in server.range_requests  # the other URL's .part was discarded
    assert not stale.exists()
    for scene in videos:
        assert_faststart_mp4(out / f"{scene}.mp4")
    assert not (out / WORK_DIRNAME).exists()


# ---------------------------------------------------------------------------
# Bad input: a clear message, nothing written


@pytest.mark.parametrize(
    "videos, needle",
    [
        ({"abc": "https://youtu.be/abc"}, "scene id 'abc'"),
        ({"../../etc/pa": "https://youtu.be/aaaaaaaaaaa"}, "scene id '../../etc/pa'"),
        ({"aaaaaaaaaaa": "https://vimeo.com/12345"}, "not a YouTube host"),
        ({"aaaaaaaaaaa": "https://youtu.be/bbbbbbbbbbb"}, "is for video 'bbbbbbbbbbb'"),
    ],
)
def test_bad_videos_are_refused_before_writing(tmp_path, videos, needle):
    out = tmp_path / "videos"
    with pytest.raises(DownloadInputError, match="cannot start") as info:
        download_videos(videos, out, DownloadConfig(progress=False))
    assert needle in str(info.value)
    assert not out.exists()


def test_unwritable_output_folder_is_refused(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(DownloadInputError, match="--output_dir .*a_file is a file"):
        download_videos({"aaaaaaaaaaa": "https://youtu.be/aaaaaaaaaaa"}, blocker / "videos", DownloadConfig(progress=False))
    assert folder_names(tmp_path) == {"a_file"}


def test_missing_ffmpeg_and_cookies_are_refused(tmp_path, monkeypatch):
    import k9bench.video.ffmpeg as ff

    def no_ffmpeg():
        raise ff.FFmpegNotFound("ffmpeg was not found: install it on PATH or pip install imageio-ffmpeg")

    monkeypatch.setattr(ff, "find_ffmpeg", no_ffmpeg)
    cfg = DownloadConfig(progress=False, cookies=str(tmp_path / "missing.txt"), cookies_from_browser="netscape-navigator", workers=0)
    with pytest.raises(DownloadInputError) as info:
        download_videos({"aaaaaaaaaaa": "https://youtu.be/aaaaaaaaaaa"}, tmp_path / "videos", cfg)
    text = str(info.value)
    for needle in ("ffmpeg was not found", "missing.txt: no such file", "unknown browser 'netscape-navigator'", "workers must be at least 1"):
        assert needle in text
    assert folder_names(tmp_path) == set()


# ---------------------------------------------------------------------------
# Failure classification (unit)


def _download_error(message: str, cause: BaseException | None = None):
    from yt_dlp.utils import DownloadError

    return DownloadError(message, (type(cause), cause, None) if cause else None)


@pytest.mark.parametrize(
    "exc, expected",
    [
        (lambda: _download_error("ERROR: [youtube] x: Sign in to confirm you're not a bot. Use --cookies-from-browser"), ("sign_in_required", None)),
        (lambda: _download_error("ERROR: [youtube] x: Private video. Sign in if you've been granted access"), ("unavailable", None)),
        (lambda: _download_error("ERROR: [youtube] x: Video unavailable. This video has been removed by the uploader"), ("unavailable", None)),
        (lambda: _download_error("ERROR: unable to download video data: HTTP Error 403: Forbidden"), ("http_error", 403)),
        (lambda: _download_error("ERROR: HTTP Error 429: Too Many Requests"), ("http_error", 429)),
        (lambda: _download_error("ERROR: read failed", TimeoutError("The read operation timed out")), ("timeout", None)),
        (lambda: _download_error("ERROR: oops", ConnectionRefusedError(111, "Connection refused")), ("network", None)),
        (lambda: _download_error("ERROR: [Errno -2] Name or service not known"), ("network", None)),
        (lambda: _download_error("ERROR: 100 bytes read, 200 more expected"), ("network", None)),
        (lambda: RuntimeError("something odd"), ("error", None)),
    ],
)
def test_classify_error(exc, expected):
    error_class, status, message = classify_error(exc())
    assert (error_class, status) == expected
    assert message and not message.startswith("ERROR:")


@pytest.mark.parametrize(
    "text",
    [
        "ERROR: [youtube] x: Requested format is not available. Use --list-formats for a list of available formats",
        "ERROR: [youtube] x: No video formats found!",
        "ERROR: [youtube] x: The following content is not available on this app. Watch on the latest version of YouTube.",
    ],
)
def test_no_downloadable_format_is_not_called_unavailable(text):
    """yt-dlp finding no usable stream (outdated yt-dlp, no JS runtime, blocked client) is not a removed video."""
    error_class, status, message = classify_error(_download_error(text))
    assert (error_class, status) == ("error", None)
    assert "pip install -U yt-dlp" in message and "the video may still exist" in message


# ---------------------------------------------------------------------------
# The script


def test_cli_demo_videos_present_are_skipped(demo_video_dir, overrides, tmp_path, monkeypatch):
    import download_videos

    import k9bench.download.stage as kd

    monkeypatch.setattr(kd, "DownloadConfig", functools.partial(kd.DownloadConfig, **overrides))
    out = tmp_path / "videos"
    shutil.copytree(demo_video_dir, out)
    code = download_videos.main(["--dataset_name", "demo", "--output_dir", str(out), "--manifest", str(tmp_path / "m.json"), "-q"])
    assert code == 0
    manifest = json.loads((tmp_path / "m.json").read_text())
    assert manifest["summary"]["skipped"] == 3 and manifest["summary"]["total"] == 3
    assert manifest["provenance"]["script"] == "download_videos.py"
    assert folder_names(out) == {"demoVid0001.mp4", "demoVid0002.mp4", "demoVid0003.mp4"}


def _write_rows(path: Path, urls: list[str]) -> Path:
    rows = []
    for i, url in enumerate(urls):
        rows.append({
            "idx": i, "video_url": url, "scene_name": "", "question_category": "posture analysis",
            "question": f"test question {i}?", "options": {k: f"option {k}" for k in "ABCDE"}, "correct_answer": "A",
        })
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_cli_downloads_unique_videos_and_exits_1_on_failure(server, sources, overrides, tmp_path, monkeypatch):
    import download_videos
    import k9bench.download.stage as kd

    # The script builds its own DownloadConfig: pin it to the test extractor.
    monkeypatch.setattr(kd, "DownloadConfig", functools.partial(kd.DownloadConfig, **overrides))
    server.add(vid(60), [Fmt("m", sources["webm"], ext="webm")])
    server.add(vid(61), [Fmt("m", sources["mp4"], mode="http404")])
    server.add(vid(62), [Fmt("m", sources["mp4"])])
    data = _write_rows(tmp_path / "rows.jsonl", [
        f"https://youtu.be/{vid(60)}", f"https://www.youtube.com/watch?v={vid(60)}",  # two questions, one video
        f"https://youtu.be/{vid(61)}", f"https://youtu.be/{vid(62)}",
    ])
    out = tmp_path / "videos"
    argv = ["--dataset_name", str(data), "--output_dir", str(out), "--workers", "2", "--retries", "0", "--timeout", "2", "-q"]
    assert download_videos.main(argv + ["--max_samples", "2"]) == 0
    assert folder_names(out) == {f"{vid(60)}.mp4", "download_manifest.json"}
    assert server.media_requests(vid(60)) == 1

    assert download_videos.main(argv) == 1
    manifest = json.loads((out / "download_manifest.json").read_text())
    assert manifest["summary"] == {"total": 3, "ok": 1, "skipped": 1, "failed": 1, "failed_by_class": {"http_error": 1}}
    assert manifest["config"]["allowed_extractors"] == [TEST_EXTRACTOR]
    assert server.media_requests(vid(60)) == 1


def test_cli_flags_reach_the_download_config(tmp_path, monkeypatch):
    """Every download flag of the script lands in DownloadConfig (yt-dlp parameters are checked below)."""
    import download_videos
    import k9bench.download.stage as kd

    seen = {}

    def fake_download(videos, output_dir, config, provenance=None, **kwargs):
        seen.update(videos=dict(videos), output_dir=output_dir, config=config, kwargs=kwargs)
        return kd.DownloadReport(output_dir=str(output_dir))

    monkeypatch.setattr(kd, "download_videos", fake_download)
    cookies = tmp_path / "c.txt"
    cookies.write_text("# Netscape HTTP Cookie File\n")
    data = _write_rows(tmp_path / "rows.jsonl", [f"https://youtu.be/{vid(70)}", f"https://youtu.be/{vid(71)}"])
    argv = ["--dataset_name", str(data), "--output_dir", str(tmp_path / "v"), "--max_samples", "1", "--workers", "7",
            "--retries", "5", "--timeout", "12.5", "--cookies", str(cookies), "--cookies_from_browser", "chrome:Profile 1",
            "--sleep_interval", "2", "--manifest", str(tmp_path / "m.json"), "--reverify", "-q"]
    assert download_videos.main(argv) == 0
    cfg = seen["config"]
    assert seen["videos"] == {vid(70): f"https://youtu.be/{vid(70)}"}
    assert seen["kwargs"]["generators"] == {}  # not the demo set: everything is fetched online
    assert (cfg.workers, cfg.retries, cfg.timeout, cfg.sleep_interval) == (7, 5, 12.5, 2.0)
    assert (cfg.cookies, cfg.cookies_from_browser, cfg.manifest_path, cfg.reverify) == (
        str(cookies), "chrome:Profile 1", str(tmp_path / "m.json"), True)


def test_ydl_params_carry_the_settings(tmp_path):
    cfg = DownloadConfig(retries=5, timeout=12.5, sleep_interval=2.0, max_height=480)
    params = ydl_params(vid(72), tmp_path / "work", tmp_path / "cache", cfg, "/opt/ffmpeg", tmp_path / "cookies.txt")
    assert params["noplaylist"] is True
    assert params["outtmpl"] == {"default": f"{vid(72)}.%(ext)s"}
    assert params["paths"] == {"home": str(tmp_path / "work"), "temp": str(tmp_path / "work")}
    assert params["format_sort"][0] == "res:480"
    assert (params["retries"], params["fragment_retries"], params["extractor_retries"]) == (5, 5, 5)
    assert (params["socket_timeout"], params["sleep_interval"]) == (12.5, 2.0)
    assert (params["ffmpeg_location"], params["cookiefile"], params["cachedir"]) == (
        "/opt/ffmpeg", str(tmp_path / "cookies.txt"), str(tmp_path / "cache"))
    assert "allowed_extractors" not in params  # yt-dlp's own extractors in real use


def test_cli_bad_url_in_dataset_exits_2(tmp_path):
    import download_videos

    data = _write_rows(tmp_path / "rows.jsonl", ["https://example.com/watch?v=aaaaaaaaaaa"])
    out = tmp_path / "videos"
    assert download_videos.main(["--dataset_name", str(data), "--output_dir", str(out), "-q"]) == 2
    assert not out.exists() or not any(out.iterdir())  # at most the (empty) folder that held the stage's lock


def test_script_imports_nothing_heavy():
    code = "import sys, download_videos; download_videos.build_parser(); print(sorted(m for m in ('yt_dlp', 'av', 'torch', 'datasets', 'tqdm') if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
