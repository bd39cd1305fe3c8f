"""Decoding and sampling a video's frames (the layer below :mod:`k9bench.video.cache`).

This module imports neither the frame cache nor the policy, so the imports run one way only:
``video.sampling`` <- ``video.cache`` <- ``video.policy``.

``sample(path, ...)`` returns the same frames that qwen-vl-utils' ``fetch_video`` (decord backend)
gives for a ``{"video": path, "fps": 1.0, "max_frames": 32, "max_pixels": 360 * 420}`` item: the
frame count comes from qwen-vl-utils' own ``smart_nframes``, the indices from the same
``linspace(...).round()`` rule, and the size from its own ``smart_resize`` with the pixel bounds
``fetch_video`` computes, followed by the same bicubic antialiased resize. The frames stay uint8.

The decoder is chosen explicitly (``decoder=``, default ``DEFAULT_DECODER``) and never swapped: if
it cannot be imported, ``DecoderUnavailable`` stops the run; if it cannot read a file, a
``VideoError`` names the file and the reason (missing, zero-length, no video stream, corrupt,
truncated). qwen-vl-utils itself falls back to another reader on any error and only logs a
warning. Only the chosen frames are decoded: decord seeks to the key frame before each index; PyAV demuxes once to learn every frame's
timestamp and then decodes only the groups of pictures that hold a chosen frame.

The frame defaults (``DEFAULT_FPS``, ``DEFAULT_MAX_FRAMES``, ``DEFAULT_MAX_PIXELS``, ``DEFAULT_DECODER``)
are defined here once; every other module takes them from :mod:`k9bench.video`.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # heavy imports stay inside functions
    import torch

log = logging.getLogger(__name__)

DECODERS = ("decord", "pyav")
"""Decoders ``sample`` can use. ``decord`` is what the reference's qwen-vl-utils picks."""

DEFAULT_DECODER = "decord"
"""decord is the reader qwen-vl-utils 0.0.14 uses here (torchcodec is not installed), so frames match it bit for bit."""

DEFAULT_FPS = 1.0
DEFAULT_MAX_FRAMES = 32
DEFAULT_MAX_PIXELS = 360 * 420
DEFAULT_IMAGE_PATCH_SIZE = 14
"""qwen-vl-utils' own default for ``fetch_video``/``process_vision_info`` (resize factor 14 * 2 = 28)."""

PROCESSOR_VIDEO_KWARGS: dict[str, Any] = {"do_sample_frames": False}
"""Keyword arguments for the Qwen3-VL processor call alongside ``video_metadata``: the frames are
already sampled (qwen-vl-utils' ``process_vision_info`` returns the same ``video_kwargs``)."""

# qwen-vl-utils' constants, repeated so that importing this module stays light (a test checks them)
SPATIAL_MERGE_SIZE = 2
VIDEO_MIN_TOKEN_NUM = 128


def default_min_pixels(image_patch_size: int = DEFAULT_IMAGE_PATCH_SIZE) -> int:
    """qwen-vl-utils' per-frame video minimum: ``VIDEO_MIN_TOKEN_NUM * (patch * merge) ** 2``."""
    factor = image_patch_size * SPATIAL_MERGE_SIZE
    return VIDEO_MIN_TOKEN_NUM * factor * factor


DEFAULT_MIN_PIXELS = default_min_pixels(DEFAULT_IMAGE_PATCH_SIZE)
"""100352 = 128 * 28 * 28, qwen-vl-utils' video default for its default patch size."""


class VideoError(Exception):
    """A video that cannot give frames. ``reason_class`` is ``missing_video`` or ``decode_error``."""

    def __init__(self, path: str | os.PathLike, reason_class: str, detail: str):
        self.path = str(path)
        """The file concerned."""
        self.reason_class = reason_class
        """``missing_video`` (no such file) or ``decode_error`` (anything else that stops decoding)."""
        self.detail = detail
        """What went wrong, in words."""
        super().__init__(f"{self.path}: {detail}")


class DecoderUnavailable(RuntimeError):
    """The requested decoder cannot be imported; the run must stop (no fallback)."""


@dataclass
class Frames:
    """Sampled, resized frames of one video and how they were obtained."""

    frames: "torch.Tensor"
    """uint8 tensor (T, 3, H, W), resized exactly as qwen-vl-utils does."""
    indices: list[int]
    """Source frame index of each sampled frame."""
    source_fps: float
    """The decoder's average frame rate of the source."""
    total_frames: int
    """Frame count of the source, as the decoder reports it."""
    sample_fps: float
    """qwen-vl-utils' ``sample_fps``: ``T / total_frames * source_fps``."""
    height: int
    """Resized frame height."""
    width: int
    """Resized frame width."""
    duration: float
    """Source duration in seconds (``total_frames / source_fps``)."""
    decoder: str
    """The decoder that produced the frames (``decord`` or ``pyav``)."""
    source_height: int = 0
    """Height of the decoded source frames."""
    source_width: int = 0
    """Width of the decoded source frames."""
    decode_seconds: float = 0.0
    """Wall time spent decoding and resizing (0 when read from the disk cache)."""
    from_disk_cache: bool = False
    """True when the frames came from the on-disk frame cache."""
    settings: dict[str, Any] = field(default_factory=dict)
    """The sampling settings used (fps, max_frames, max_pixels, min_pixels, image_patch_size)."""

    @property
    def num_frames(self) -> int:
        """Number of sampled frames."""
        return len(self.indices)

    def processor_metadata(self) -> dict[str, Any]:
        """Video metadata for the Qwen3-VL processor (``video_metadata=[...]``).

        The same keys qwen-vl-utils returns with ``return_video_metadata=True``; the processor
        derives each frame's timestamp as ``frames_indices[i] / fps``. Pass it together with
        ``do_sample_frames=False`` so the processor keeps these frames.
        """
        return {
            "fps": float(self.source_fps),
            "frames_indices": list(self.indices),
            "total_num_frames": int(self.total_frames),
            "video_backend": self.decoder,
        }

    def video_tensor(self) -> "torch.Tensor":
        """The frames as float32 (T, 3, H, W) with values 0..255: exactly what ``fetch_video`` returns.

        Hand this (not the uint8 ``frames``) to the processor: when the processor resizes again
        (its patch size differs from the one used here), a float input is what the reference
        resizes, and a uint8 one would be rounded differently.
        """
        return self.frames.float()

    def timestamps(self) -> list[float]:
        """Seconds of each sampled frame in the source (index / fps)."""
        return [i / self.source_fps for i in self.indices]

    def summary(self) -> dict[str, Any]:
        """JSON-safe description (no pixels) for logs and artifacts."""
        return {
            "decoder": self.decoder,
            "num_frames": self.num_frames,
            "indices": list(self.indices),
            "source_fps": self.source_fps,
            "total_frames": self.total_frames,
            "sample_fps": self.sample_fps,
            "height": self.height,
            "width": self.width,
            "source_height": self.source_height,
            "source_width": self.source_width,
            "duration": self.duration,
            "from_disk_cache": self.from_disk_cache,
        }


# --------------------------------------------------------------------------- sampling plan


def _qvu():
    """qwen-vl-utils' vision module (its rules are the reference)."""
    try:
        from qwen_vl_utils import vision_process
    except ImportError as exc:  # pragma: no cover - a hard requirement
        raise RuntimeError(f"qwen-vl-utils is required for frame sampling: pip install qwen-vl-utils ({exc})") from exc
    return vision_process


def frame_indices(total_frames: int, source_fps: float, fps: float, max_frames: int) -> list[int]:
    """The source indices qwen-vl-utils picks: ``smart_nframes`` then ``linspace(0, n-1).round()``."""
    import torch

    vp = _qvu()
    nframes = vp.smart_nframes({"fps": fps, "max_frames": max_frames}, total_frames=total_frames, video_fps=source_fps)
    return torch.linspace(0, total_frames - 1, nframes).round().long().tolist()


def check_pixel_bounds(max_pixels: float | None, min_pixels: int | None, image_patch_size: int = DEFAULT_IMAGE_PATCH_SIZE) -> None:
    """Raise ``ValueError`` when ``max_pixels`` lies below the per-frame minimum (qwen-vl-utils would assert)."""
    if max_pixels is None:
        return
    vp = _qvu()
    factor = image_patch_size * vp.SPATIAL_MERGE_SIZE
    lo = vp.VIDEO_MIN_TOKEN_NUM * factor * factor if min_pixels is None else min_pixels
    if max_pixels < lo:
        raise ValueError(
            f"max_pixels={max_pixels} is below min_pixels={lo}"
            + (" (qwen-vl-utils' video default at this patch size)" if min_pixels is None else "")
            + "; raise max_pixels or pass a smaller min_pixels"
        )


def resized_size(
    height: int,
    width: int,
    nframes: int,
    max_pixels: float | None,
    min_pixels: int | None,
    image_patch_size: int = DEFAULT_IMAGE_PATCH_SIZE,
) -> tuple[int, int]:
    """The (height, width) ``fetch_video`` resizes to, through qwen-vl-utils' own ``smart_resize``.

    The pixel bounds follow ``fetch_video``: ``min_pixels`` defaults to the video minimum, and
    ``max_pixels`` is capped by the per-frame video maximum and the total-pixel budget.
    """
    vp = _qvu()
    factor = image_patch_size * vp.SPATIAL_MERGE_SIZE
    frame_min = vp.VIDEO_MIN_TOKEN_NUM * factor * factor
    frame_max = vp.VIDEO_MAX_TOKEN_NUM * factor * factor
    check_pixel_bounds(max_pixels, min_pixels, image_patch_size)
    lo = frame_min if min_pixels is None else min_pixels
    total_pixels = vp.MODEL_SEQ_LEN * factor * factor * 0.9
    cap = max(min(frame_max, total_pixels / nframes * vp.FRAME_FACTOR), int(lo * 1.05))
    hi = cap if max_pixels is None else min(max_pixels, cap)
    return vp.smart_resize(height, width, factor=factor, min_pixels=lo, max_pixels=hi)


def resize_frames(frames: "torch.Tensor", height: int, width: int) -> "torch.Tensor":
    """Bicubic, antialiased resize of a uint8 (T, 3, h, w) tensor, as ``fetch_video`` does; stays uint8."""
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as F

    if frames.shape[-2:] == (height, width):
        # torchvision returns the input unchanged for an identity resize as well
        return frames.contiguous()
    return F.resize(frames, [height, width], interpolation=InterpolationMode.BICUBIC, antialias=True).contiguous()


# --------------------------------------------------------------------------- decoders


def check_decoder(decoder: str) -> None:
    """Import the decoder's library now; ``DecoderUnavailable`` (never a fallback) if it cannot load."""
    if decoder not in DECODERS:
        raise DecoderUnavailable(f"unknown decoder {decoder!r}; choose one of {', '.join(DECODERS)}")
    try:
        if decoder == "decord":
            import decord  # noqa: F401
        else:
            import av  # noqa: F401
    except Exception as exc:
        pkg = "decord" if decoder == "decord" else "av"
        raise DecoderUnavailable(
            f"decoder {decoder!r} cannot be loaded ({type(exc).__name__}: {exc}); install it (pip install {pkg}) "
            f"or choose another with --decoder ({', '.join(DECODERS)}); no fallback is made"
        ) from exc


def _check_file(path: Path) -> None:
    if not path.exists():
        raise VideoError(path, "missing_video", "video file not found")
    if not path.is_file():
        raise VideoError(path, "decode_error", "not a regular file")
    if path.stat().st_size == 0:
        raise VideoError(path, "decode_error", "zero-length file")


class _DecordSource:
    """decord.VideoReader: frame count and fps from the container, ``get_batch`` seeks per index."""

    name = "decord"

    def __init__(self, path: Path):
        import decord

        try:
            self._vr = decord.VideoReader(str(path), num_threads=0)
        except Exception as exc:
            raise VideoError(path, "decode_error", f"{_diagnose(path)} [decord: {_short(exc)}]") from None
        self.path = path
        self.total_frames = len(self._vr)
        self.fps = float(self._vr.get_avg_fps())

    def close(self) -> None:
        self._vr = None

    def get(self, indices: list[int]):
        import torch

        try:
            arr = self._vr.get_batch(indices).asnumpy()
        except Exception as exc:
            raise VideoError(
                self.path, "decode_error", f"decoding failed (corrupt or truncated video?) [decord: {_short(exc)}]"
            ) from None
        return torch.from_numpy(arr).permute(0, 3, 1, 2)


class _PyAVSource:
    """PyAV: one demux pass for every frame's timestamp, then decode only the GOPs holding chosen frames."""

    name = "pyav"

    def __init__(self, path: Path):
        import av

        self.path = path
        try:
            self._container = av.open(str(path))
        except Exception as exc:
            raise VideoError(
                path, "decode_error", f"the file is not a readable video: corrupt, truncated or not a video ({_short(exc)})"
            ) from None
        if not self._container.streams.video:
            kinds = sorted({s.type for s in self._container.streams}) or ["no streams"]
            self._container.close()
            raise VideoError(
                path, "decode_error", f"the file has no video stream (streams: {', '.join(kinds)}): audio-only or not a video"
            )
        try:
            self._index()
        except BaseException:
            self._container.close()
            raise

    def _index(self) -> None:
        path = self.path
        self._stream = self._container.streams.video[0]
        self._stream.thread_type = "AUTO"
        rate = self._stream.average_rate or self._stream.guessed_rate
        if not rate:
            raise VideoError(path, "decode_error", "the video stream has no frame rate")
        self.fps = float(rate)
        pts, keys = [], []
        try:
            for packet in self._container.demux(self._stream):
                if packet.pts is None or packet.size == 0:
                    continue
                pts.append(packet.pts)
                if packet.is_keyframe:
                    keys.append(packet.pts)
        except Exception as exc:
            raise VideoError(path, "decode_error", f"PyAV cannot read the packets ({_short(exc)})") from None
        self._pts = sorted(pts)
        self._keys = sorted(keys)
        self.total_frames = len(self._pts)

    def close(self) -> None:
        self._container.close()

    def get(self, indices: list[int]):
        import bisect

        import numpy as np
        import torch

        wanted = sorted(set(indices))
        got: dict[int, Any] = {}
        pos = -1  # pts of the last decoded frame
        frames_iter = None
        try:
            for idx in wanted:
                target = self._pts[idx]
                k = bisect.bisect_right(self._keys, target) - 1
                key_pts = self._keys[k] if k >= 0 else self._pts[0]
                if frames_iter is None or key_pts > pos:
                    self._container.seek(key_pts, stream=self._stream, backward=True, any_frame=False)
                    frames_iter = self._container.decode(self._stream)
                for frame in frames_iter:
                    if frame.pts is None:
                        continue
                    pos = frame.pts
                    if frame.pts >= target:
                        got[idx] = frame.to_ndarray(format="rgb24")
                        break
                else:
                    raise VideoError(self.path, "decode_error", f"the video ends before frame {idx} (truncated?)")
        except VideoError:
            raise
        except Exception as exc:
            raise VideoError(self.path, "decode_error", f"PyAV failed to decode frames ({_short(exc)})") from None
        arr = np.stack([got[i] for i in indices])
        return torch.from_numpy(arr).permute(0, 3, 1, 2)


def _diagnose(path: Path) -> str:
    """Why a file that a decoder refused is not a usable video, in words (probed with PyAV if present).

    Only a diagnosis for the error message: nothing is decoded with PyAV here.
    """
    try:
        import av
    except Exception:
        return "the file cannot be opened as a video (corrupt, truncated or not a video)"
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                kinds = sorted({s.type for s in container.streams}) or ["no streams"]
                return f"the file has no video stream (streams: {', '.join(kinds)}): audio-only or not a video"
            for _ in container.decode(video=0):
                break
    except Exception as exc:
        return f"the file is not a readable video: corrupt, truncated or not a video ({_short(exc)})"
    return "the decoder cannot open this video (it may be truncated or use an unsupported codec)"


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:300]


def _open(path: Path, decoder: str):
    check_decoder(decoder)
    return _DecordSource(path) if decoder == "decord" else _PyAVSource(path)


# --------------------------------------------------------------------------- public entry point


def sample(
    path: str | os.PathLike,
    fps: float = DEFAULT_FPS,
    max_frames: int = DEFAULT_MAX_FRAMES,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    min_pixels: int | None = None,
    decoder: str = DEFAULT_DECODER,
    image_patch_size: int = DEFAULT_IMAGE_PATCH_SIZE,
    frame_size: tuple[int, int] | None = None,
) -> Frames:
    """Decode and resize the frames qwen-vl-utils would give the model for ``path``.

    ``min_pixels=None`` means qwen-vl-utils' video default (``default_min_pixels``). Raises
    ``VideoError`` for a missing or unreadable file and ``DecoderUnavailable`` if ``decoder``
    cannot be loaded.

    ``frame_size=(height, width)`` replaces qwen-vl-utils' size rule by one exact resize of the
    source frames to that size (same bicubic antialiased resize), for processors that expect a
    fixed frame size (InternVL: 448x448); the pixel bounds and patch size are then not used.
    The frame indices are the same either way.
    """
    if frame_size is not None:
        frame_size = _check_frame_size(frame_size)
    else:
        check_pixel_bounds(max_pixels, min_pixels, image_patch_size)  # a settings error, not a per-video one
    path = Path(path)
    _check_file(path)
    t0 = time.perf_counter()
    src = _open(path, decoder)
    try:
        total, src_fps = src.total_frames, src.fps
        if total <= 0:
            raise VideoError(path, "decode_error", "the video has no frames (audio-only, empty or not a video)")
        if not (src_fps > 0 and math.isfinite(src_fps)):
            raise VideoError(path, "decode_error", f"the video reports an invalid frame rate ({src_fps})")
        try:
            indices = frame_indices(total, src_fps, fps, max_frames)
        except ValueError as exc:
            raise VideoError(path, "decode_error", f"cannot sample frames: {exc}") from None
        raw = src.get(indices)
    finally:
        src.close()
    if raw.ndim != 4 or raw.shape[0] != len(indices) or raw.shape[1] != 3:
        raise VideoError(path, "decode_error", f"decoder returned frames of shape {tuple(raw.shape)}")
    src_h, src_w = int(raw.shape[2]), int(raw.shape[3])
    try:
        if frame_size is not None:
            height, width = frame_size
        else:
            height, width = resized_size(src_h, src_w, len(indices), max_pixels, min_pixels, image_patch_size)
    except ValueError as exc:
        raise VideoError(path, "decode_error", f"cannot resize {src_w}x{src_h} frames: {exc}") from None
    frames = resize_frames(raw, height, width)
    elapsed = time.perf_counter() - t0
    log.debug("%s: %s frames %s of %s @ %.3f fps -> %dx%d in %.2fs", path.name, decoder, len(indices), total, src_fps, width, height, elapsed)
    return Frames(
        frames=frames,
        indices=[int(i) for i in indices],
        source_fps=src_fps,
        total_frames=int(total),
        sample_fps=len(indices) / max(total, 1e-6) * src_fps,
        height=int(height),
        width=int(width),
        duration=total / src_fps,
        decoder=decoder,
        source_height=src_h,
        source_width=src_w,
        decode_seconds=elapsed,
        settings=dict(
            fps=fps, max_frames=max_frames, max_pixels=max_pixels, min_pixels=min_pixels, image_patch_size=image_patch_size,
            **({"frame_size": list(frame_size)} if frame_size is not None else {}),
        ),
    )


def _check_frame_size(frame_size: tuple[int, int]) -> tuple[int, int]:
    """``(height, width)`` as two positive ints; ``ValueError`` otherwise (a settings error)."""
    try:
        height, width = (int(v) for v in frame_size)
    except (TypeError, ValueError):
        raise ValueError(f"frame_size must be (height, width), got {frame_size!r}") from None
    if height <= 0 or width <= 0 or (height, width) != tuple(frame_size):
        raise ValueError(f"frame_size must be two positive integers (height, width), got {frame_size!r}")
    return height, width

