"""Checking that a downloaded video file is complete and usable.

A file counts as a good ``{scene}.mp4`` only when every check passes:

1. its top-level ISO-BMFF boxes parse, none runs past the end of the file (a
   truncated download is caught here), and it is not fragmented;
2. the ``moov`` box (the index) comes before the first ``mdat`` box (the data),
   so readers can start without seeking to the end ("faststart");
3. it has a video stream that PyAV can open and whose first frame decodes;
4. demuxing the whole video stream yields no fewer packets than the header's
   frame count promises.

:func:`verify_video` never raises for a bad file: it returns a
:class:`VerifyResult` whose ``reason`` says what failed. :func:`probe_media`
is the lighter check used before remuxing a freshly downloaded file (any
container yt-dlp may hand over: mp4, fragmented mp4, webm, mkv).
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

MAX_DECODE_PACKETS = 256
"""How many packets to feed the decoder at most while waiting for the first frame."""


@dataclass
class VerifyResult:
    """The outcome of checking one file."""

    ok: bool
    """True when every check passed."""
    reason: str | None = None
    """What failed, for a human (None when ok)."""
    size: int = 0
    """File size in bytes."""
    boxes: list = field(default_factory=list)
    """Top-level box types in file order (mp4 family only)."""
    video_codec: str | None = None
    """Codec name of the first video stream."""
    width: int | None = None
    """Frame width in pixels."""
    height: int | None = None
    """Frame height in pixels."""
    duration: float | None = None
    """Container duration in seconds."""
    header_frames: int | None = None
    """Frame count the header promises for the video stream."""
    packets: int | None = None
    """Video packets actually demuxed."""
    has_audio: bool = False
    """Whether an audio stream is present."""

    @property
    def only_not_faststart(self) -> bool:
        """True when the sole problem found is the index after the data: complete boxes, so a local remux fixes it."""
        t = self.boxes
        return not self.ok and "moov" in t and "mdat" in t and "moof" not in t and t.index("moov") > t.index("mdat")

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("boxes", None)
        return out


# ---------------------------------------------------------------------------
# ISO-BMFF top-level boxes


class BoxError(ValueError):
    """The file's top-level box structure is broken; the message says where."""


def read_top_level_boxes(path: str | os.PathLike) -> list[tuple[str, int, int]]:
    """Return ``(type, offset, size)`` for each top-level box of an mp4-family file.

    Raises :class:`BoxError` when a box header is malformed or a box runs past
    the end of the file (the usual sign of a truncated download).
    """
    path = Path(path)
    file_size = path.stat().st_size
    boxes: list[tuple[str, int, int]] = []
    with open(path, "rb") as fh:
        offset = 0
        while offset < file_size:
            fh.seek(offset)
            header = fh.read(8)
            if len(header) < 8:
                raise BoxError(f"{len(header)} stray byte(s) at offset {offset}: not a box header")
            size, raw_type = struct.unpack(">I4s", header)
            box_type = raw_type.decode("latin-1")
            if offset > 0 and not all(32 <= ord(c) < 127 for c in box_type):
                raise BoxError(f"no valid box at offset {offset} (type bytes {raw_type!r})")
            if offset == 0 and box_type not in ("ftyp", "styp"):
                raise BoxError(f"not an mp4 file (starts with bytes {header[:8]!r}, expected an 'ftyp' box)")
            header_len = 8
            if size == 1:
                large = fh.read(8)
                if len(large) < 8:
                    raise BoxError(f"box {box_type!r} at offset {offset}: 64-bit size cut off")
                size = struct.unpack(">Q", large)[0]
                header_len = 16
            elif size == 0:
                size = file_size - offset
            if size < header_len:
                raise BoxError(f"box {box_type!r} at offset {offset} has an impossible size {size}")
            if offset + size > file_size:
                raise BoxError(
                    f"box {box_type!r} at offset {offset} claims {size} bytes but only {file_size - offset} remain "
                    f"(the file is truncated)"
                )
            boxes.append((box_type, offset, size))
            offset += size
    return boxes


def check_box_layout(path: str | os.PathLike) -> tuple[list[str], str | None]:
    """Box types in order and the layout problem, if any (``None`` when the layout is good)."""
    try:
        boxes = read_top_level_boxes(path)
    except BoxError as exc:
        return [], str(exc)
    except OSError as exc:  # unreadable, a folder...: a bad file, reported, never raised
        return [], f"cannot read the file: {exc.strerror or exc}"
    types = [b[0] for b in boxes]
    if not types or types[0] not in ("ftyp", "styp"):
        first = types[0] if types else "nothing"
        return types, f"not an mp4 file (starts with {first!r}, expected an 'ftyp' box)"
    if "moov" not in types:
        return types, "no 'moov' box (the index is missing)"
    if "moof" in types:
        return types, "fragmented mp4 (moof boxes): the header carries no packet count to check against"
    if "mdat" in types and types.index("moov") > types.index("mdat"):
        return types, "the 'moov' box comes after the 'mdat' data (not faststart)"
    return types, None


# ---------------------------------------------------------------------------
# Streams


def _open(path: str | os.PathLike):
    import av  # heavy import, only when verifying

    return av.open(str(path), mode="r")


def probe_media(path: str | os.PathLike) -> tuple[bool, str | None]:
    """Light check of a downloaded file in any container: ``(ok, reason)``.

    ok when the container opens and holds a video stream with a known codec.
    """
    try:
        with _open(path) as container:
            if not container.streams.video:
                kinds = sorted({s.type for s in container.streams}) or ["none"]
                return False, f"no video stream (streams: {', '.join(kinds)})"
            codec = container.streams.video[0].codec_context.name
            if not codec:
                return False, "the video stream's codec is unknown"
    except Exception as exc:  # av raises its own FFmpegError family, plus OSError
        return False, f"not a readable media file: {_short(exc).replace(str(path), Path(path).name)}"
    return True, None


def verify_video(path: str | os.PathLike) -> VerifyResult:
    """Run every check (see the module doc) on a finished ``.mp4``; never raises for a bad file."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        return VerifyResult(ok=False, reason=f"cannot stat the file: {exc}")
    if size == 0:
        return VerifyResult(ok=False, reason="empty file", size=0)
    types, problem = check_box_layout(path)
    result = VerifyResult(ok=False, size=size, boxes=types)
    if problem:
        result.reason = problem
        return result
    try:
        with _open(path) as container:
            if not container.streams.video:
                result.reason = "no video stream"
                return result
            stream = container.streams.video[0]
            result.has_audio = bool(container.streams.audio)
            result.video_codec = stream.codec_context.name
            result.width = stream.codec_context.width or None
            result.height = stream.codec_context.height or None
            if container.duration is not None:
                result.duration = container.duration / 1_000_000
            result.header_frames = int(stream.frames or 0)
            packets = 0
            decoded = False
            fed = 0
            for packet in container.demux(stream):
                if packet.size == 0:  # the flush packet at the end
                    continue
                packets += 1
                if not decoded and fed < MAX_DECODE_PACKETS:
                    fed += 1
                    if packet.decode():
                        decoded = True
            if not decoded:
                # Some decoders hold frames back until flushed.
                try:
                    decoded = bool(stream.codec_context.decode(None))
                except Exception:  # flushing an unhappy decoder
                    decoded = False
            result.packets = packets
    except Exception as exc:
        result.reason = f"the video stream cannot be read: {_short(exc).replace(str(path), path.name)}"
        return result
    if result.header_frames <= 0:
        result.reason = "the header promises no video frames"
    elif packets < result.header_frames:
        result.reason = f"only {packets} video packets of the {result.header_frames} the header promises (truncated)"
    elif not decoded:
        result.reason = f"no frame of the {result.video_codec} video stream decodes"
    elif not result.duration or result.duration <= 0:
        result.reason = "zero duration"
    else:
        result.ok = True
    return result


def _short(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]
