"""The download's input checks: every problem found before anything is written, on one line.

:func:`check_inputs` checks the ``scene -> url`` mapping, the settings (:func:`check_config`:
value ranges, the cookies file, the browser name) and where the run would write
(:func:`check_destination`: the output folder and the manifest, through the one writable-output
check :func:`k9bench.stage.check_output`; and ffmpeg), and raises one
:class:`~k9bench.download.failures.DownloadInputError` naming every culprit.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

from k9bench.download.failures import DownloadInputError
from k9bench.download.settings import DownloadConfig
from k9bench.download.manifest import MANIFEST_NAME
from k9bench.download.youtube import InvalidYouTubeURL, is_valid_scene_name, parse_youtube_id


def check_videos(videos: Mapping[str, str]) -> list[str]:
    """Problems with the ``scene -> url`` mapping (empty when all is well)."""
    problems = []
    for scene, url in videos.items():
        if not is_valid_scene_name(scene):
            problems.append(f"scene id {scene!r}: not 11 characters of [A-Za-z0-9_-]")
            continue
        try:
            vid = parse_youtube_id(url)
        except InvalidYouTubeURL as exc:
            problems.append(f"scene {scene}: {exc}")
            continue
        if vid != scene:
            problems.append(f"scene {scene}: the URL {url!r} is for video {vid!r}")
    return problems


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def cookies_problem(path_text: str, flag: str = "--cookies") -> str | None:
    """Why ``path_text`` cannot serve as a Netscape cookies file (None when it can)."""
    path = Path(os.path.expanduser(path_text))
    if path.is_dir():
        return (f"{flag} {path_text}: is a folder, not a cookies file (export a Netscape cookies.txt from a browser "
                f"logged into YouTube and give its path; see docs/download.md)")
    if not path.is_file():
        return f"{flag} {path_text}: no such file"
    if not os.access(path, os.R_OK):
        return f"{flag} {path_text}: not readable"
    return None


def check_config(config: DownloadConfig, *, cookies_flag: str = "--cookies") -> list[str]:
    """Problems with the settings (empty when all is well): the same rules as the flags' value
    types, for library callers that build the object themselves; plus the cookie sources."""
    from k9bench.download.ytdlp import parse_browser_spec

    problems = []
    if not _is_int(config.workers) or config.workers < 1:
        problems.append(f"workers must be at least 1 (got {config.workers!r})")
    if not _is_int(config.retries) or config.retries < 0:
        problems.append(f"retries must be 0 or more (got {config.retries!r})")
    if not _is_number(config.timeout) or config.timeout <= 0:
        problems.append(f"timeout must be a finite number of seconds > 0 (got {config.timeout!r})")
    if not _is_number(config.sleep_interval) or config.sleep_interval < 0:
        problems.append(f"sleep_interval must be a finite number of seconds >= 0 (got {config.sleep_interval!r})")
    if not _is_number(config.ffmpeg_timeout) or config.ffmpeg_timeout <= 0:
        problems.append(f"ffmpeg_timeout must be a finite number of seconds > 0 (got {config.ffmpeg_timeout!r})")
    if not _is_int(config.max_height) or config.max_height < 1:
        problems.append(f"max_height must be a positive integer (got {config.max_height!r})")
    if config.cookies:
        problem = cookies_problem(config.cookies, cookies_flag)
        if problem:
            problems.append(problem)
    if config.cookies_from_browser:
        try:
            parse_browser_spec(config.cookies_from_browser)
        except DownloadInputError as exc:
            problems.append(str(exc))
    return problems


def manifest_location(output_dir: Path, config: DownloadConfig) -> Path | None:
    """Where the manifest goes (None when ``config.write_manifest`` is False)."""
    if not config.write_manifest:
        return None
    if config.manifest:
        return Path(os.path.expanduser(config.manifest)).absolute()
    return output_dir / MANIFEST_NAME


def check_destination(output_dir: Path, config: DownloadConfig) -> tuple[list[str], str]:
    """Problems with where the run would write (output folder, manifest) and with ffmpeg; and
    the ffmpeg to use. Cheap and independent of the videos: a script asks it before loading a
    dataset. Writes nothing: folders are checked where they would be created."""
    from k9bench.video.ffmpeg import FFmpegNotFound, find_ffmpeg
    from k9bench.stage import OutputError, check_output

    problems = []
    output_bad = False
    try:
        check_output(output_dir, flag="--output_dir", folder=True)
    except OutputError as exc:
        problems.append(str(exc))
        output_bad = True
    manifest_path = manifest_location(output_dir, config)
    if manifest_path is not None and not (output_bad and manifest_path.parent == output_dir):  # said once is enough
        try:
            check_output(manifest_path, flag="--manifest")
        except OutputError as exc:
            problems.append(str(exc))
    try:
        ffmpeg = find_ffmpeg()
    except FFmpegNotFound as exc:
        problems.append(str(exc))
        ffmpeg = ""
    return problems, ffmpeg


def input_error(problems: list[str]) -> DownloadInputError:
    """One :class:`DownloadInputError` naming every problem, on one line."""
    return DownloadInputError("cannot start the download: " + "; ".join(" ".join(p.split()) for p in problems))


def check_inputs(videos: Mapping[str, str], output_dir: Path, config: DownloadConfig) -> str:
    """Every input problem at once, as one :class:`DownloadInputError` (one line); else the ffmpeg to use."""
    problems = check_videos(videos) + check_config(config)
    destination_problems, ffmpeg = check_destination(output_dir, config)
    problems += destination_problems
    if problems:
        raise input_error(problems)
    return ffmpeg


def prepare_output_dir(output_dir: Path) -> None:
    """Create the output folder and prove it writable with a throwaway file."""
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".k9bench-write-test-", dir=output_dir)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise DownloadInputError(f"--output_dir {output_dir}: cannot write there ({exc})") from None
