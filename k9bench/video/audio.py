"""A video's soundtrack for audio-capable models: read once with ffmpeg, mono float32 at a given rate.

``read_audio(path, sampling_rate)`` decodes the first audio stream of a video file with ffmpeg
(the binary :func:`k9bench.video.ffmpeg.find_ffmpeg` picks: PATH, else imageio-ffmpeg's), down-mixed to
one channel and resampled by ffmpeg to ``sampling_rate`` (the rate of the model's feature
extractor, 16 kHz for Whisper-style extractors), and returns an ``Audio`` holding a 1-D float32
array in [-1, 1]. Nothing is padded or cut: the processor's feature extractor does that.

A file that has no audio stream (or an empty one) raises ``NoAudioStream``, whose message names the
file: such a video becomes a failed record of its own class (``no_audio_stream``), never silence
passed off as its soundtrack. Other failures raise ``AudioError`` (``missing_video`` or
``audio_decode_error``). ``k9bench.video.cache.FrameCache.get_audio`` keeps the result with the
video's frames (in memory, and on disk with ``disk_dir``).

For an OpenAI-compatible endpoint that takes audio (Gemini's), ``input_audio_part(audio)`` gives
the message content part ``{"type": "input_audio", "input_audio": {"data": <base64>, "format":
"wav"}}`` (16-bit PCM WAV, or MP3 through ffmpeg with ``fmt="mp3"``, about 8x smaller).

Usage::

    from k9bench.video.audio import read_audio, NoAudioStream
    audio = read_audio("k9bench_videos/abcdefghijk.mp4", sampling_rate=16000)
    processor(text=[prompt], videos=[frames.video_tensor()], audio=[audio.samples], ...)
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy is imported where it is used
    import numpy as np

log = logging.getLogger(__name__)

AUDIO_READ_TIMEOUT_SECONDS = 600.0
"""Longest an ffmpeg read of one soundtrack may take before it counts as a decode error."""


class AudioError(Exception):
    """A video whose soundtrack cannot be given to the model."""

    reason_class = "audio_decode_error"
    """Failure class for the record: ``missing_video``, ``no_audio_stream`` or ``audio_decode_error``."""

    def __init__(self, path: str | os.PathLike, detail: str, reason_class: str | None = None):
        self.path = str(path)
        """The file concerned."""
        self.detail = detail
        """What went wrong, in words."""
        if reason_class is not None:
            self.reason_class = reason_class
        super().__init__(f"{self.path}: {detail}")


class NoAudioStream(AudioError):
    """The video has no soundtrack (no audio stream, or one without samples)."""

    reason_class = "no_audio_stream"


@dataclass
class Audio:
    """One video's soundtrack, mono, at ``sampling_rate``."""

    samples: "np.ndarray"
    """1-D float32 samples in [-1, 1]."""
    sampling_rate: int
    """Samples per second (the rate asked for; ffmpeg resampled to it)."""
    path: str
    """The video file it was read from."""
    decode_seconds: float = 0.0
    """Wall time ffmpeg took (0 when read from the disk cache)."""
    from_disk_cache: bool = False
    """True when the samples came from the on-disk cache."""

    @property
    def num_samples(self) -> int:
        """Number of samples."""
        return int(self.samples.shape[0])

    @property
    def duration(self) -> float:
        """Length in seconds."""
        return self.num_samples / self.sampling_rate

    def summary(self) -> dict[str, Any]:
        """JSON-safe description (no samples) for logs and records."""
        return {
            "sampling_rate": self.sampling_rate,
            "num_samples": self.num_samples,
            "duration": round(self.duration, 6),
            "from_disk_cache": self.from_disk_cache,
        }


def _ffmpeg_command(path: Path, sampling_rate: int) -> list[str]:
    from k9bench.video.ffmpeg import find_ffmpeg

    return [
        find_ffmpeg(), "-hide_banner", "-loglevel", "error", "-nostdin",
        "-i", str(path),
        "-map", "0:a:0",  # the first audio stream; none -> ffmpeg refuses the map
        "-vn", "-sn", "-dn",
        "-ac", "1", "-ar", str(int(sampling_rate)),
        "-f", "f32le", "-acodec", "pcm_f32le", "pipe:1",
    ]


def _has_audio_stream(path: Path) -> bool | None:
    """Whether ffmpeg lists an audio stream in ``path`` (None when it cannot tell)."""
    from k9bench.video.ffmpeg import find_ffmpeg

    try:
        proc = subprocess.run([find_ffmpeg(), "-hide_banner", "-nostdin", "-i", str(path)],
                              capture_output=True, text=True, errors="replace", timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    streams = [line for line in proc.stderr.splitlines() if line.strip().startswith("Stream #")]
    if not streams:
        return None
    return any(": Audio:" in line for line in streams)


def read_audio(path: str | os.PathLike, sampling_rate: int, *, timeout: float = AUDIO_READ_TIMEOUT_SECONDS) -> Audio:
    """The soundtrack of ``path``: first audio stream, mono float32, resampled to ``sampling_rate``.

    Raises ``NoAudioStream`` when the file has no audio (or an empty stream), ``AudioError``
    otherwise (missing file, unreadable container, ffmpeg failure or timeout), each naming the file.
    ``ValueError`` for a ``sampling_rate`` that is not a positive integer (a settings error).
    """
    import numpy as np

    if isinstance(sampling_rate, bool) or int(sampling_rate) != sampling_rate or sampling_rate <= 0:
        raise ValueError(f"sampling_rate must be a positive integer, got {sampling_rate!r}")
    path = Path(path)
    if not path.exists():
        raise AudioError(path, "video file not found", "missing_video")
    if not path.is_file() or path.stat().st_size == 0:
        raise AudioError(path, "not a regular, non-empty file")
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(_ffmpeg_command(path, int(sampling_rate)), capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AudioError(path, f"ffmpeg did not finish reading the soundtrack within {timeout:.0f} s") from None
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip()
        if "matches no streams" in err or _has_audio_stream(path) is False:
            raise NoAudioStream(path, "the video has no audio stream (no soundtrack to give the model)")
        first = err.splitlines()[-1] if err else f"exit status {proc.returncode}"
        raise AudioError(path, f"ffmpeg cannot read the soundtrack: {first[:300]}")
    raw = proc.stdout
    usable = len(raw) - len(raw) % 4
    samples = np.frombuffer(raw[:usable], dtype="<f4").astype(np.float32, copy=True)
    if samples.size == 0:
        raise NoAudioStream(path, "the audio stream holds no samples (no soundtrack to give the model)")
    if not np.isfinite(samples).all():
        raise AudioError(path, "the decoded soundtrack holds non-finite samples")
    np.clip(samples, -1.0, 1.0, out=samples)
    log.debug("%s: soundtrack %.2f s at %d Hz read in %.2fs", path.name, samples.size / sampling_rate, sampling_rate, elapsed)
    return Audio(samples=samples, sampling_rate=int(sampling_rate), path=str(path), decode_seconds=elapsed)


API_SAMPLING_RATE = 16000
"""Rate of soundtracks sent to API models (no processor to ask): 16 kHz mono, as speech models take."""

API_AUDIO_FORMATS = ("wav", "mp3")
"""Encodings ``encode_audio`` writes (the ``format`` values of an OpenAI ``input_audio`` part)."""

MP3_BITRATE = "64k"
"""Bit rate of the MP3 encoding (mono speech and ambient sound)."""


def encode_audio(audio: Audio, fmt: str = "wav") -> bytes:
    """The soundtrack as a file in memory: 16-bit PCM ``wav``, or ``mp3`` (ffmpeg, libmp3lame)."""
    import io
    import wave

    import numpy as np

    if fmt not in API_AUDIO_FORMATS:
        raise ValueError(f"unknown audio format {fmt!r}; choose one of {', '.join(API_AUDIO_FORMATS)}")
    if fmt == "wav":
        pcm = np.round(np.clip(audio.samples, -1.0, 1.0) * 32767.0).astype("<i2")
        buf = io.BytesIO()
        with wave.open(buf, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(audio.sampling_rate)
            w.writeframes(pcm.tobytes())
        return buf.getvalue()
    from k9bench.video.ffmpeg import find_ffmpeg

    cmd = [find_ffmpeg(), "-hide_banner", "-loglevel", "error", "-nostdin", "-f", "f32le", "-ar", str(audio.sampling_rate),
           "-ac", "1", "-i", "pipe:0", "-c:a", "libmp3lame", "-b:a", MP3_BITRATE, "-f", "mp3", "pipe:1"]
    proc = subprocess.run(cmd, input=np.asarray(audio.samples, dtype="<f4").tobytes(), capture_output=True,
                          timeout=AUDIO_READ_TIMEOUT_SECONDS)
    if proc.returncode != 0 or not proc.stdout:
        err = proc.stderr.decode("utf-8", "replace").strip()
        raise AudioError(audio.path, f"ffmpeg cannot encode the soundtrack as mp3: {err[-300:] or proc.returncode}")
    return proc.stdout


def input_audio_part(audio: Audio, fmt: str = "wav") -> dict[str, Any]:
    """An OpenAI chat ``input_audio`` content part holding the soundtrack (base64 ``fmt`` data)."""
    import base64

    data = base64.b64encode(encode_audio(audio, fmt)).decode("ascii")
    return {"type": "input_audio", "input_audio": {"data": data, "format": fmt}}


__all__ = [
    "API_AUDIO_FORMATS",
    "API_SAMPLING_RATE",
    "AUDIO_READ_TIMEOUT_SECONDS",
    "Audio",
    "AudioError",
    "MP3_BITRATE",
    "NoAudioStream",
    "encode_audio",
    "input_audio_part",
    "read_audio",
]
