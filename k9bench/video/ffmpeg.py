"""Locating ffmpeg and generating synthetic videos.

``find_ffmpeg`` prefers an ``ffmpeg`` on PATH and otherwise uses the binary that
the ``imageio-ffmpeg`` package ships; the choice is logged. ``make_video`` writes
short synthetic clips for the demo set, the tests and the benchmarks, so no video
is ever committed; ``audio="sine"`` or ``audio="noise"`` gives them a soundtrack
(``AUDIO_SOURCES``), without one by default.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

log = logging.getLogger(__name__)


class FFmpegNotFound(RuntimeError):
    """No ffmpeg binary on PATH nor from imageio-ffmpeg."""


_cached: str | None = None


def find_ffmpeg() -> str:
    """Path of the ffmpeg binary to use (PATH first, then imageio-ffmpeg)."""
    global _cached
    if _cached and os.path.exists(_cached):
        return _cached
    exe = shutil.which("ffmpeg")
    source = "PATH"
    if exe is None:
        try:
            import imageio_ffmpeg

            exe = imageio_ffmpeg.get_ffmpeg_exe()
            source = "imageio-ffmpeg"
        except Exception as exc:  # ImportError or its own "not found" RuntimeError
            raise FFmpegNotFound(
                "ffmpeg was not found: install it on PATH (e.g. `apt-get install ffmpeg`) "
                f"or `pip install imageio-ffmpeg` ({exc})"
            ) from None
    log.debug("using ffmpeg from %s: %s", source, exe)
    _cached = exe
    return exe


def run_ffmpeg(args: list[str], *, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run ffmpeg with ``args`` (quiet, overwrite); raise ``CalledProcessError`` with stderr on failure."""
    cmd = [find_ffmpeg(), "-hide_banner", "-loglevel", "error", "-nostdin", "-y", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd, proc.stdout, proc.stderr)
    return proc


_PATTERNS = {
    # Each source shows motion, so sampled frames differ from each other.
    "testsrc2": "testsrc2=size={w}x{h}:rate={fps}",
    "mandelbrot": "mandelbrot=size={w}x{h}:rate={fps}",
    "life": "life=size={w}x{h}:rate={fps}:mold=10:ratio=0.3:seed=9:death_color=#302010:life_color=#c08040",
    "smpte": "smptehdbars=size={w}x{h}:rate={fps}",
}

AUDIO_SOURCES = {
    # a steady tone, and seeded pink noise (the same samples on every run)
    "sine": "sine=frequency={freq}:sample_rate={rate}",
    "noise": "anoisesrc=color=pink:amplitude=0.3:seed=7:sample_rate={rate}",
}
"""Soundtracks ``make_video(audio=...)`` can add (``audio=True`` is ``"sine"``)."""

DEFAULT_AUDIO_RATE = 16000
"""Sampling rate of a generated soundtrack."""

_CODECS = {
    ".mp4": ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"],
    ".mkv": ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"],
    ".webm": ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "300k", "-pix_fmt", "yuv420p"],
}


def make_video(
    path: str | os.PathLike,
    *,
    duration: float = 4.0,
    fps: float | str = 24,
    width: int = 320,
    height: int = 240,
    pattern: str = "testsrc2",
    audio: bool | str = False,
    faststart: bool = True,
    fragmented: bool = False,
    extra_args: list[str] | None = None,
    audio_rate: int = DEFAULT_AUDIO_RATE,
    audio_frequency: float = 440.0,
) -> Path:
    """Write a synthetic video to ``path`` (container from the suffix: mp4, mkv, webm).

    ``fps`` may be a rational string such as ``"30000/1001"``. ``fragmented`` writes a
    fragmented mp4; ``faststart`` puts the moov box first (mp4 only). ``audio`` adds a
    soundtrack as long as the video: ``True`` or ``"sine"`` (a ``audio_frequency`` Hz tone),
    ``"noise"`` (seeded pink noise), at ``audio_rate`` samples per second (AAC; Opus in webm).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in _CODECS:
        raise ValueError(f"unsupported container {suffix!r}")
    audio_source = _audio_source(audio, audio_rate, audio_frequency)
    src = _PATTERNS[pattern].format(w=width, h=height, fps=fps)
    args = ["-f", "lavfi", "-i", src]
    if audio_source:
        args += ["-f", "lavfi", "-i", audio_source]
    args += ["-t", f"{duration}", *_CODECS[suffix]]
    if suffix in (".mp4", ".mkv"):
        args += ["-g", str(max(1, int(float(eval_fps(fps)) * 2)))]
    if audio_source:
        args += ["-c:a", "aac" if suffix != ".webm" else "libopus", "-shortest"]
    if suffix == ".mp4":
        if fragmented:
            args += ["-movflags", "frag_keyframe+empty_moov+default_base_moof"]
        elif faststart:
            args += ["-movflags", "+faststart"]
    args += list(extra_args or [])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp" + suffix)
    run_ffmpeg([*args, str(tmp)])
    os.replace(tmp, path)
    return path


def _audio_source(audio: bool | str, rate: int, frequency: float) -> str | None:
    """The lavfi source of the soundtrack ``make_video`` adds (None: no soundtrack)."""
    if audio is False or audio is None:
        return None
    kind = "sine" if audio is True else audio
    if kind not in AUDIO_SOURCES:
        raise ValueError(f"unknown soundtrack {audio!r}; choose one of {', '.join(AUDIO_SOURCES)} (or True for sine)")
    if int(rate) != rate or rate <= 0:
        raise ValueError(f"audio_rate must be a positive integer, got {rate!r}")
    return AUDIO_SOURCES[kind].format(freq=f"{frequency:g}", rate=int(rate))


def eval_fps(fps: float | str) -> float:
    """A frame rate given as a number or an ``a/b`` string, as a float."""
    if isinstance(fps, str) and "/" in fps:
        num, den = fps.split("/", 1)
        return float(num) / float(den)
    return float(fps)
