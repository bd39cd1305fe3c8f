"""How the video of a request travels to an OpenAI-compatible server (``--video_transport``).

:class:`MediaBuilder` turns a request's sampled frames (or its video file) into the content parts
that stand where the runner's ``{"type": "video"}`` placeholder stands, the per-request body fields
the server needs for them, and the record fields that say what was sent. Each video's parts are
built once for all its questions (several batches of one video wait for one builder).

``frames``
    One ``image_url`` part per sampled frame (``data:image/jpeg;base64,...``), in order, resized
    to ``--frame_size`` first when given. For APIs that take no video (GPT-4o): a Qwen-VL model
    then sees independent images (no temporal merge, no timestamps).
``video`` (the default for vLLM and SGLang servers, see ``auto`` in :mod:`k9bench.inference.openai_compat.backend`)
    Exactly the sampled frames, as one short H.264 mp4 (``data:video/mp4;base64,...``), lossless by
    default (libx264rgb at ``-qp 0`` in RGB 4:4:4: vLLM's OpenCV loader decodes it to the very bytes of
    our frames, the array in-process vLLM gets; ``--video_crf N`` trades that for N times smaller requests
    with libx264 yuv420p at CRF N), played at a
    constant rate chosen so that frame k shows at the sampled frame's time in the source:
    ``rate = source_fps * (T - 1) / (last_index - first_index)`` (qwen-vl-utils' frames are evenly
    spaced, up to rounding; :func:`video_timing` gives the largest difference). Nothing else goes
    along: vLLM refuses per-request ``media_io_kwargs`` unless it runs with ``--trust-request-mm-kwargs``,
    and its loader keeps every frame of a video of at most 32 frames by itself (more: serve with
    ``--media-io-kwargs '{"video": {"num_frames": -1}}'``). Its Qwen3-VL processor then keeps them
    too while the rate is at most its 2 fps, merges frame pairs in time and writes ``<t seconds>``
    timestamps that are the frames' true times (docs/vllm.md shows it measured).
``video_url``
    One ``video_url`` part: the original file as a data URL, or ``--video_url_base``/``{scene}.mp4``.
    The server samples it itself; ``media_io_kwargs: {"video": {"num_frames": --max_frames, "fps": --fps}}``
    goes along (vLLM keeps min(N, floor(duration x F)) evenly spaced frames); vLLM takes it only when
    served with ``--trust-request-mm-kwargs`` (no ``mm_processor_kwargs`` are sent: they break its
    Qwen3-VL processing).

With ``--audio`` the soundtrack follows the visual parts as one ``input_audio`` part; with ``video_url`` under
``--one_modality_per_message`` (Qwen-Omni's API) it is the video file's own, and nothing follows.
"""

from __future__ import annotations

import base64
import subprocess
import tempfile
import threading
import weakref
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from k9bench.video.sampling import Frames
    from k9bench.inference.backend import GenerationRequest

LOSSLESS_CODEC = ["-c:v", "libx264rgb", "-qp", "0", "-preset", "veryfast", "-pix_fmt", "rgb24"]
"""ffmpeg's output options of the lossless mp4: H.264 in RGB 4:4:4 at quantiser 0. Decoded (vLLM's OpenCV
loader, decord, PyAV) it is the bytes that went in; libx264 in yuv444p at ``-qp 0`` is not (the RGB to
YUV conversion rounds: up to 2 levels off), nor is yuv420p at any CRF."""

LOSSY_CODEC = ["-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p"]
"""ffmpeg's output options of the ``--video_crf`` mp4 (the CRF follows): H.264 in 4:2:0, lossy."""

LOADER_DEFAULT_FRAMES = 32
"""Frames vLLM's video loader keeps by default (``--media-io-kwargs '{"video": {"num_frames": -1}}'`` lifts it)."""

PROCESSOR_FPS = 2.0
"""The Qwen3-VL video processor's sampling rate: an mp4 faster than this is sampled again inside vLLM."""


class MediaError(Exception):
    """The media of one request cannot be built (no video file, unreadable file, no soundtrack)."""


@dataclass(frozen=True)
class VideoTiming:
    """When each frame of a ``video`` transport mp4 plays, against when it was sampled."""

    rate: Fraction
    """Frames per second of the mp4."""
    source_times: list[float]
    """Seconds of each sampled frame in the source (index / source fps)."""
    played_times: list[float]
    """Seconds at which the mp4 shows each frame (k / rate)."""

    @property
    def max_error_s(self) -> float:
        """Largest |played - source| over the frames (the first frame's offset included)."""
        return max((abs(a - b) for a, b in zip(self.played_times, self.source_times)), default=0.0)

    def summary(self) -> dict[str, Any]:
        return {"rate": f"{self.rate.numerator}/{self.rate.denominator}", "fps": round(float(self.rate), 6),
                "max_time_error_s": round(self.max_error_s, 4)}


def video_timing(indices: list[int], source_fps: float) -> VideoTiming:
    """The constant rate that plays frames sampled at ``indices`` (of a ``source_fps`` video) at their times."""
    fps = Fraction(source_fps).limit_denominator(1001) if source_fps > 0 else Fraction(1)
    span = (indices[-1] - indices[0]) if len(indices) > 1 else 0
    rate = fps * (len(indices) - 1) / span if span > 0 else Fraction(1)
    rate = rate.limit_denominator(100000)
    return VideoTiming(rate, [i / float(fps) for i in indices], [k / float(rate) for k in range(len(indices))])


def mp4_codec(crf: int | None) -> str:
    """How the ``video`` transport's mp4 is encoded, in words (the record's ``video_sent.codec``)."""
    return "libx264rgb qp 0 rgb24 (lossless)" if crf is None else f"libx264 crf {crf} yuv420p (lossy)"


def encode_frames_mp4(frames: Any, rate: Fraction, crf: int | None = None) -> bytes:
    """uint8 (T, 3, H, W) frames -> the bytes of an H.264 mp4 (``faststart``) playing at ``rate``.

    ``crf`` None: lossless (:data:`LOSSLESS_CODEC`); an integer: libx264 yuv420p at that CRF
    (:data:`LOSSY_CODEC`; H and W must then be even, as qwen-vl-utils' sizes, multiples of 28 or 32, are)."""
    from k9bench.video.ffmpeg import find_ffmpeg

    count, _, height, width = frames.shape
    raw = frames.permute(0, 2, 3, 1).contiguous().numpy().tobytes()
    codec = LOSSLESS_CODEC if crf is None else [*LOSSY_CODEC, "-crf", str(crf)]
    with tempfile.TemporaryDirectory(prefix="k9bench-mp4-") as folder:
        out = Path(folder) / "frames.mp4"  # the mp4 muxer seeks back to write its index: a file, not a pipe
        args = [find_ffmpeg(), "-hide_banner", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24",
                "-s", f"{width}x{height}", "-framerate", f"{rate.numerator}/{rate.denominator}", "-i", "pipe:0",
                "-frames:v", str(count), *codec, "-movflags", "+faststart", "-y", str(out)]
        try:
            done = subprocess.run(args, input=raw, capture_output=True, timeout=120, check=False)
            data = out.read_bytes() if done.returncode == 0 and out.is_file() else b""
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise MediaError(f"ffmpeg could not encode the frames as mp4 ({type(exc).__name__}: {exc})") from None
    if not data:
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise MediaError(f"ffmpeg could not encode the frames as mp4 (exit {done.returncode}: {tail[0]})")
    return data


def encode_frames_jpeg(frames: Any, size: tuple[int, int] | None = None, quality: int | None = None) -> list[str]:
    """uint8 (T, 3, H, W) frames -> ``data:image/jpeg;base64,...`` URLs, in order.

    ``size`` (width, height) resizes each frame to exactly that size first (bicubic, antialiased,
    as the sampler resizes). ``quality`` None: ``--jpeg_quality``'s default.
    """
    import io

    from PIL import Image

    from k9bench.inference.openai_compat.settings import OpenAISettings
    from k9bench.settings import default_of
    from k9bench.video.sampling import resize_frames

    if quality is None:
        quality = default_of(OpenAISettings, "jpeg_quality")
    if size is not None:
        frames = resize_frames(frames, size[1], size[0])
    array = frames.permute(0, 2, 3, 1).contiguous().numpy()
    urls = []
    for frame in array:
        buffer = io.BytesIO()
        Image.fromarray(frame).save(buffer, format="JPEG", quality=quality)
        urls.append("data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii"))
    return urls


class MediaBuilder:
    """The media parts of each request for one transport, built once per video (see the module doc)."""

    def __init__(self, *, transport: str, frame_size: tuple[int, int] | None, jpeg_quality: int, image_detail: str | None,
                 video_url_base: str | None, fps: float, max_frames: int, audio: bool, audio_format: str, keep: int,
                 video_crf: int | None = None, audio_in_file: bool = False):
        self.transport = transport
        self.audio_in_file = audio_in_file
        """With ``--audio`` and ``video_url``: the soundtrack is the video file's own, no ``input_audio`` part (one non-text
        modality per message: ``--one_modality_per_message``)."""
        self.video_crf = video_crf
        """``video``: None for the lossless mp4, else libx264's CRF (``--video_crf``)."""
        self.frame_size = frame_size
        self.jpeg_quality = jpeg_quality
        self.image_detail = image_detail
        self.video_url_base = video_url_base
        self.fps = fps
        self.max_frames = max_frames
        self.audio = audio
        self.audio_format = audio_format
        self.keep = keep
        """Videos whose parts are kept at most (those in flight, plus a few)."""
        self._media: dict[Any, tuple[Any, tuple]] = {}  # id(frames) or path -> (frames or path, built), recent videos
        self._gates: dict[Any, threading.Lock] = {}  # one builder per video at a time
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ the cache

    def _once(self, key: Any, owner: Any, build) -> tuple:
        """What ``build()`` returned for ``owner`` under ``key``, built only once even when several
        batches of the same video ask at the same time (the others wait for it)."""
        with self._lock:
            gate = self._gates.setdefault(key, threading.Lock())
        with gate:
            with self._lock:
                entry = self._media.get(key)
            if entry is not None:
                held = entry[0]() if isinstance(entry[0], weakref.ref) else entry[0]
                if held is owner or (isinstance(owner, Path) and held == owner):
                    return entry[1]
            built = build()
            weak = not isinstance(owner, Path)
            with self._lock:
                self._media[key] = (weakref.ref(owner) if weak else owner, built)
                while len(self._media) > self.keep:
                    self._media.pop(next(iter(self._media)))
            if weak:
                weakref.finalize(owner, self._forget, key)  # the entry goes when the runner lets go of the video
            return built

    def _forget(self, key: Any) -> None:
        # called by a weakref finalizer (any thread, maybe one holding _lock): single dict ops only
        self._media.pop(key, None)
        self._gates.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._media.clear()

    # ------------------------------------------------------------------ parts

    def parts_for(self, request: "GenerationRequest") -> tuple[list[dict] | None, dict, dict]:
        """``(parts, record fields, body fields)`` of ``request``; ``parts`` None for a text-only request.

        Raises :class:`MediaError` when the media cannot be built."""
        parts, fields, body = self._visual(request)
        if self.audio and parts is not None and self.audio_in_file:
            fields["audio_sent"] = "in the video file"
        elif self.audio and parts is not None:
            parts = [*parts, *self._audio_parts(request)]  # the soundtrack after the frames
            fields["audio_sent"] = {"format": self.audio_format, **request.audio.summary()}  # type: ignore[union-attr]
        return parts, fields, body

    def _visual(self, request: "GenerationRequest") -> tuple[list[dict] | None, dict, dict]:
        if request.frames is None:
            return None, {"video_transport": None}, {}
        if self.transport == "video_url":
            parts = self._video_url_parts(self._video_path(request))
            return parts, {
                "video_transport": "video_url",
                # the server chose the frames: the local sampler's choice is not what the model saw
                "frame_indices": None, "num_frames": None, "sample_fps": None, "frame_size": None,
                "server_sampling": {"fps": self.fps, "max_frames": self.max_frames},
            }, {"media_io_kwargs": {"video": {"num_frames": self.max_frames, "fps": self.fps}}}
        if self.transport == "video":
            return self._mp4_parts(request.frames)
        parts = self._frame_parts(request.frames)
        fields: dict[str, Any] = {"video_transport": "frames", "frames_sent": len(parts)}
        if self.frame_size is not None:
            fields["frame_size"] = [self.frame_size[1], self.frame_size[0]]  # [height, width], like the sampler's field
            fields["sampled_frame_size"] = [request.frames.height, request.frames.width]
        return parts, fields, {}

    def _image_url(self, url: str) -> dict:
        out = {"url": url}
        if self.image_detail:
            out["detail"] = self.image_detail
        return out

    def _frame_parts(self, frames: "Frames") -> list[dict]:
        """One ``image_url`` part per frame, in order."""
        def build() -> tuple:
            return ([{"type": "image_url", "image_url": self._image_url(url)}
                     for url in encode_frames_jpeg(frames.frames, self.frame_size, self.jpeg_quality)],)

        return self._once(id(frames), frames, build)[0]

    def _mp4_parts(self, frames: "Frames") -> tuple[list[dict], dict, dict]:
        """The one ``video_url`` part holding the sampled frames as an mp4 at their times."""
        def build() -> tuple:
            timing = video_timing(list(frames.indices), frames.source_fps)
            data = encode_frames_mp4(frames.frames, timing.rate, self.video_crf)
            url = "data:video/mp4;base64," + base64.b64encode(data).decode("ascii")
            part = {"type": "video_url", "video_url": {"url": url}}
            video = {**timing.summary(), "frames": frames.num_frames, "codec": mp4_codec(self.video_crf), "mp4_bytes": len(data),
                     "url_bytes": len(url),
                     "played_times_s": [round(t, 3) for t in timing.played_times]}
            return [part], video, {}

        parts, video, body = self._once(("mp4", id(frames)), frames, build)
        return parts, {"video_transport": "video", "frames_sent": frames.num_frames, "video_sent": video}, body

    def _video_path(self, request: "GenerationRequest") -> Path:
        if not request.video_path:
            raise MediaError(f"idx {request.key}: the request names no video file (needed by --video_transport video_url)")
        return Path(request.video_path)

    def _video_url_parts(self, path: Path) -> list[dict]:
        """The one ``video_url`` part of ``path``."""
        def build() -> tuple:
            if self.video_url_base:
                url = f"{self.video_url_base.rstrip('/')}/{path.name}"
            else:
                try:
                    data = path.read_bytes()
                except OSError as exc:
                    raise MediaError(f"{path}: cannot read the video ({exc})") from None
                url = "data:video/mp4;base64," + base64.b64encode(data).decode("ascii")
            return ([{"type": "video_url", "video_url": {"url": url}}],)

        return self._once(str(path), path, build)[0]

    def _audio_parts(self, request: "GenerationRequest") -> list[dict]:
        """The one ``input_audio`` part of the request's soundtrack."""
        from k9bench.video.audio import AudioError, input_audio_part

        audio = request.audio
        if audio is None:
            raise MediaError(f"idx {request.key}: --audio but no soundtrack was read for {request.video_path}")

        def build() -> tuple:
            try:
                return ([input_audio_part(audio, self.audio_format)],)
            except AudioError as exc:
                raise MediaError(str(exc)) from None

        return self._once(("audio", id(audio)), audio, build)[0]


__all__ = ["LOADER_DEFAULT_FRAMES", "LOSSLESS_CODEC", "LOSSY_CODEC", "PROCESSOR_FPS", "MediaBuilder", "MediaError", "VideoTiming",
           "encode_frames_jpeg", "encode_frames_mp4", "mp4_codec", "video_timing"]
