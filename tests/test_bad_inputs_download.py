"""download_videos.py refuses bad input before any video is generated or downloaded (issue 15, items 5 and 6).

Each case runs the script as a user would (a subprocess, the demo set, which would otherwise
generate its videos locally) and checks: exit 2, one error line naming the culprit, no traceback,
nothing written, and the outputs of an earlier run unchanged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def tree(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file under ``folder``: relative path -> (size, mtime_ns, content)."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            stat = path.stat()
            out[str(path.relative_to(folder))] = (stat.st_size, stat.st_mtime_ns, path.read_bytes())
        else:
            out[str(path.relative_to(folder)) + "/"] = (0, 0, b"")
    return out


def run_script(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "K9BENCH_NO_PROGRESS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, str(REPO / "download_videos.py"), *args], capture_output=True, text=True,
                          env=env, timeout=120, cwd=REPO)


@pytest.fixture
def workspace(tmp_path) -> Path:
    """A folder holding an earlier run's outputs: a manifest and a video file."""
    out = tmp_path / "videos"
    out.mkdir()
    (out / "download_manifest.json").write_text('{"manifest_version": 1, "videos": []}\n')
    (out / "earlier.mp4").write_bytes(b"not touched")
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "cookies_dir").mkdir()
    return tmp_path


CASES = {
    # item 5: non-finite numbers are refused when the flags are read
    "timeout nan": (["--timeout", "nan"], "--timeout"),
    "timeout inf": (["--timeout", "inf"], "--timeout"),
    "timeout 0": (["--timeout", "0"], "--timeout"),
    "sleep nan": (["--sleep_interval", "nan"], "--sleep_interval"),
    "sleep negative": (["--sleep_interval", "-1"], "--sleep_interval"),
    "retries negative": (["--retries", "-1"], "--retries"),
    "max_samples -2": (["--max_samples", "-2"], "--max_samples"),
    # issue 31 item 3: 0 exited 0 having done nothing, silently; refused as eval_video_llm.py and MAX_SAMPLES refuse it
    "max_samples 0": (["--max_samples", "0"], "argument --max_samples: expected -1 (all) or an integer >= 1, got '0'"),
    # item 6: refused before the demo videos are generated
    "workers 0": (["--workers", "0"], "--workers"),
    "missing cookies file": (["--cookies", "{tmp}/missing_cookies.txt"], "--cookies {tmp}/missing_cookies.txt: no such file"),
    # issue 23: a folder given as the cookies file is said plainly, before the dataset is read
    "cookies is a folder": (["--cookies", "{tmp}/cookies_dir"], "--cookies {tmp}/cookies_dir: is a folder, not a cookies file"),
    "unknown browser": (["--cookies_from_browser", "netscape"], "unknown browser 'netscape'"),
    # the stage contract's one writable-output check (k9bench.stage.check_output), naming the flag
    "manifest is a folder": (["--manifest", "{tmp}/cookies_dir"], "--manifest {tmp}/cookies_dir is a folder"),
    "output dir is a file": (["--output_dir", "{tmp}/a_file"], "--output_dir {tmp}/a_file/download_manifest.json: {tmp}/a_file is a file"),
    "output dir under a file": (["--output_dir", "{tmp}/a_file/videos"], "--output_dir {tmp}/a_file/videos/download_manifest.json: {tmp}/a_file is a file"),
    "manifest under a file": (["--manifest", "{tmp}/a_file/m.json"], "--manifest {tmp}/a_file/m.json: {tmp}/a_file is a file"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_refused_before_anything_is_written(workspace, name):
    args, culprit = CASES[name]
    args = [a.replace("{tmp}", str(workspace)) for a in args]
    culprit = culprit.replace("{tmp}", str(workspace))
    before = tree(workspace)
    proc = run_script("--dataset_name", "demo", "--output_dir", str(workspace / "videos"), *args)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    error_lines = [ln for ln in proc.stderr.splitlines() if " ERROR " in ln or ": error: " in ln]
    assert len(error_lines) == 1, proc.stderr
    assert culprit in error_lines[0], error_lines[0]
    assert proc.stdout == ""
    assert tree(workspace) == before  # no demo video generated, the earlier outputs unchanged


def test_the_same_command_with_good_input_does_generate(workspace):
    """The control: with valid flags the demo videos are generated and verified."""
    proc = run_script("--dataset_name", "demo", "--output_dir", str(workspace / "videos"), "--workers", "2", "-q")
    assert proc.returncode == 0, proc.stderr
    names = {p.name for p in (workspace / "videos").iterdir()}
    assert {"demoVid0001.mp4", "demoVid0002.mp4", "demoVid0003.mp4", "earlier.mp4", "download_manifest.json"} <= names


def test_library_callers_get_the_same_checks(tmp_path):
    """A DownloadConfig built in code (eval_video_llm.py --auto_download) is checked by the same rules."""
    from k9bench.download.stage import DownloadConfig, DownloadInputError, download_videos

    for bad, needle in [
        (dict(timeout=float("nan")), "timeout must be a finite number"),
        (dict(timeout=float("inf")), "timeout must be a finite number"),
        (dict(sleep_interval=float("nan")), "sleep_interval must be a finite number"),
        (dict(workers=True), "workers must be at least 1"),
    ]:
        with pytest.raises(DownloadInputError) as info:
            download_videos({"aaaaaaaaaaa": "https://youtu.be/aaaaaaaaaaa"}, tmp_path / "v", DownloadConfig(progress=False, **bad))
        assert needle in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "v").exists()


def test_an_unwritable_output_folder_is_refused_before_the_hub_dataset_is_loaded(workspace):
    """A Hub dataset load is a download too: the output folder is checked before it."""
    before = tree(workspace)
    proc = run_script("--dataset_name", "owner/not-cached", "--output_dir", str(workspace / "a_file" / "videos"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    error_lines = [ln for ln in proc.stderr.splitlines() if " ERROR " in ln]
    assert len(error_lines) == 1 and f"--output_dir {workspace}/a_file/videos" in error_lines[0], proc.stderr
    assert "owner/not-cached" not in proc.stderr  # the dataset was never asked for
    assert tree(workspace) == before


def test_a_corrupt_demo_video_is_made_again_not_fetched(workspace):
    """Issue 23: the demo set with a corrupt demo video regenerates it (no online source is ever tried)."""
    videos = workspace / "videos"
    (videos / "demoVid0002.mp4").write_bytes(b"\x00\x00\x00\x08junk")
    proc = run_script("--dataset_name", "demo", "--output_dir", str(videos), "--workers", "1")
    assert proc.returncode == 0, proc.stderr
    assert "making it again" in proc.stderr and "yt-dlp" not in proc.stderr and "youtube" not in proc.stderr.lower()
    manifest = json.loads((videos / "download_manifest.json").read_text())
    entry = next(e for e in manifest["videos"] if e["scene_name"] == "demoVid0002")
    assert entry["status"] == "ok" and entry["format"]["format_id"] == "generated" and entry["replaced_invalid"]
