"""Per-run frame cache (each video decoded once) with an optional on-disk store.

``FrameCache.get(path)`` samples a video with :func:`k9bench.video.sampling.sample` the first time and
returns the same ``Frames`` for every later question on that video, until ``release(path)`` drops
it (call it after the video's last question, so memory holds one video's frames at a time when
questions are processed grouped by video). A failure is remembered too: a broken video raises
the same ``VideoError`` for each of its questions without being decoded again. ``prefetch(path)``
starts loading the next video in a background thread, so decoding can overlap generation.

With ``disk_dir`` the sampled, resized frames are also stored on disk, one ``.npz`` entry per
(video file, size, mtime, sampling settings, decoder), so evaluating several models with the same
settings decodes each video once in total. Entries are written atomically (temporary file, fsync,
rename), hold a SHA-256 of the pixels and their metadata, and are validated on read; a damaged or
mismatched entry is logged, removed and re-decoded. The format is plain NumPy arrays read with
``allow_pickle=False``.

``get_audio(path, sampling_rate)`` does the same for a video's soundtrack (:mod:`k9bench.video.audio`):
read once per video and rate, kept until ``release(path)``, stored beside the frames on disk
(``<key>.audio.npz``) with ``disk_dir``; a video without one raises the same ``NoAudioStream``
for each of its questions.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from k9bench.artifact_io import WriteFailed, atomic_file
from k9bench.video.audio import Audio, AudioError, read_audio
from k9bench.video.sampling import (
    DEFAULT_DECODER,
    DEFAULT_FPS,
    DEFAULT_IMAGE_PATCH_SIZE,
    DEFAULT_MAX_FRAMES,
    DEFAULT_MAX_PIXELS,
    Frames,
    VideoError,
    check_decoder,
    sample,
)

log = logging.getLogger(__name__)

CACHE_FORMAT = 1
"""Version of the on-disk entry layout; entries of another version are re-decoded."""

STALE_TMP_SECONDS = 3600.0
"""A temporary entry file older than this was left by a killed run (writes take well under a second): removed."""


@dataclass(frozen=True)
class SamplingSettings:
    """How frames are sampled: part of every cache key."""

    fps: float = DEFAULT_FPS
    """Target sampling rate (frames per second of video)."""
    max_frames: int = DEFAULT_MAX_FRAMES
    """Upper bound on the frame count."""
    max_pixels: int | None = DEFAULT_MAX_PIXELS
    """Upper bound on pixels per resized frame."""
    min_pixels: int | None = None
    """Lower bound on pixels per resized frame (None: qwen-vl-utils' video default)."""
    image_patch_size: int = DEFAULT_IMAGE_PATCH_SIZE
    """Vision patch size; frames are resized to multiples of twice this."""
    decoder: str = DEFAULT_DECODER
    """Decoder name (``decord`` or ``pyav``)."""
    frame_size: tuple[int, int] | None = None
    """Exact (height, width) of every frame instead of qwen-vl-utils' size rule (None: the rule)."""

    def sample_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :func:`k9bench.video.sampling.sample` (re-exported as ``k9bench.video.sampling.sample``)."""
        return asdict(self)

    def key_fields(self) -> dict[str, Any]:
        """The settings as they enter cache keys: fields left at None that older entries lacked are omitted,
        so entries written before a field existed keep their keys."""
        fields = asdict(self)
        if fields["frame_size"] is None:
            del fields["frame_size"]
        else:
            fields["frame_size"] = list(fields["frame_size"])
        return fields


@dataclass
class CacheStats:
    """Counters of one ``FrameCache``."""

    decodes: int = 0
    """Videos decoded (successfully)."""
    failures: int = 0
    """Videos that raised ``VideoError`` (counted once each)."""
    memory_hits: int = 0
    """``get`` calls answered from memory."""
    disk_hits: int = 0
    """Videos read from the disk store."""
    disk_writes: int = 0
    """Entries written to the disk store."""
    damaged: int = 0
    """Disk entries found damaged or mismatched (and re-decoded)."""
    disk_write_errors: int = 0
    """Entries that could not be written (disk full, read-only...): logged, the frames still used."""
    decode_seconds: float = 0.0
    """Total decode time."""
    audio_reads: int = 0
    """Soundtracks read with ffmpeg (successfully)."""
    audio_failures: int = 0
    """Soundtracks that raised ``AudioError`` (``NoAudioStream`` included), counted once each."""
    audio_disk_hits: int = 0
    """Soundtracks read from the disk store."""


@dataclass
class _Slot:
    frames: Frames | None = None
    error: VideoError | None = None
    gets: int = 0


def _file_id(path: Path) -> tuple[str, int, int]:
    """(absolute path, size, mtime_ns); ``VideoError`` ``missing_video`` if the file is absent."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise VideoError(path, "missing_video", "video file not found") from None
    except OSError as exc:
        raise VideoError(path, "decode_error", f"cannot stat the file ({exc})") from None
    return str(path.resolve()), st.st_size, st.st_mtime_ns


class FrameCache:
    """Frames of each video, decoded once per run (and once in total with ``disk_dir``)."""

    def __init__(
        self,
        settings: SamplingSettings | None = None,
        disk_dir: str | os.PathLike | None = None,
        **kwargs: Any,
    ):
        """``settings`` or the same fields as keywords (``fps``, ``max_frames``, ``decoder``...).

        The decoder is loaded here, so a missing one stops the run before any work
        (``DecoderUnavailable``).
        """
        if settings is not None and kwargs:
            raise TypeError("pass either settings or keyword settings, not both")
        self.settings = settings if settings is not None else SamplingSettings(**kwargs)
        check_decoder(self.settings.decoder)
        self.disk_dir = Path(disk_dir) if disk_dir is not None else None
        self._requested_disk_dir = self.disk_dir
        self.disk_error: str | None = None
        """Why the requested ``disk_dir`` cannot be used this run (then frames are kept in memory only)."""
        if self.disk_dir is not None:
            try:
                self.disk_dir.mkdir(parents=True, exist_ok=True)
                if not os.access(self.disk_dir, os.W_OK | os.X_OK):
                    raise PermissionError(f"{self.disk_dir} is not writable")
            except OSError as exc:
                # only an optimisation is lost (frames are identical), so say so loudly and go on
                self.disk_error = f"{type(exc).__name__}: {exc}"
                log.warning("frame cache dir %s cannot be used (%s): frames will NOT be stored on disk this run",
                            self.disk_dir, self.disk_error)
                self.disk_dir = None
            else:
                self._remove_stale_tmp()
        self.stats = CacheStats()
        self._slots: dict[tuple[str, int, int], _Slot] = {}
        self._pending: dict[tuple[str, int, int], Future] = {}
        self._by_path: dict[str, tuple[str, int, int]] = {}
        self._audio: dict[tuple[tuple[str, int, int], int], Future] = {}
        self._identity: dict[str, dict] = {}
        """Video path -> its file's bytes and SHA-256 (kept after :meth:`release`: the records need it)."""
        self._closing = False
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        log.info(
            "video frames: decoder=%s fps=%s max_frames=%s max_pixels=%s min_pixels=%s image_patch_size=%s frame cache dir=%s",
            self.settings.decoder, self.settings.fps, self.settings.max_frames, self.settings.max_pixels,
            "default" if self.settings.min_pixels is None else self.settings.min_pixels,
            self.settings.image_patch_size, self.disk_dir or "none",
        )
        if self.settings.frame_size is not None:
            log.info("video frames resized to exactly %dx%d (height x width) instead of qwen-vl-utils' size rule",
                     *self.settings.frame_size)

    def _remove_stale_tmp(self) -> None:
        """Delete half-written entries that killed runs left behind (each is as large as a whole entry)."""
        import time

        now = time.time()
        removed = 0
        for tmp in self.disk_dir.glob(".*.tmp"):  # type: ignore[union-attr]
            try:
                if now - tmp.stat().st_mtime > STALE_TMP_SECONDS:
                    tmp.unlink()
                    removed += 1
            except OSError:
                pass  # another run may have just renamed or removed it
        if removed:
            log.info("frame cache dir %s: removed %d temporary file(s) left by interrupted runs", self.disk_dir, removed)

    # ------------------------------------------------------------------ memory layer

    def get(self, path: str | os.PathLike) -> Frames:
        """The video's frames; decoded (or read from disk) on first use. Raises ``VideoError``.

        A video whose decoding failed raises the same ``VideoError`` again, without a new attempt.
        """
        p = Path(path)
        fid = _file_id(p)
        owner = False
        with self._lock:
            slot = self._slots.get(fid)
            pending = None
            if slot is not None:
                self.stats.memory_hits += 1
            else:
                pending = self._pending.get(fid)
                if pending is None:
                    # this call decodes; a concurrent get (or prefetch) of the same video waits for it
                    pending = Future()
                    pending.set_running_or_notify_cancel()
                    self._pending[fid] = pending
                    owner = True
        if slot is None:
            if owner:
                try:
                    slot = self._build(p, fid)
                except BaseException as exc:
                    with self._lock:
                        if self._pending.get(fid) is pending:
                            del self._pending[fid]
                    pending.set_exception(exc)
                    raise
                pending.set_result(slot)
            else:
                slot = pending.result()
            with self._lock:
                if self._pending.get(fid) is pending:
                    del self._pending[fid]
                self._slots[fid] = slot
                self._by_path[str(p)] = fid
        with self._lock:
            slot.gets += 1
        if slot.error is not None:
            raise slot.error
        return slot.frames  # type: ignore[return-value]

    def prefetch(self, path: str | os.PathLike, audio_sampling_rate: int | None = None) -> None:
        """Start loading a video in a background thread (say, the next video while the model generates).

        A later ``get`` waits for it. Errors surface at ``get``; a missing file is left to ``get``.
        With ``audio_sampling_rate`` its soundtrack is read too (errors surface at ``get_audio``).
        """
        p = Path(path)
        try:
            fid = _file_id(p)
        except VideoError:
            return
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="k9bench-frames")
            if fid not in self._slots and fid not in self._pending:
                self._pending[fid] = self._executor.submit(self._build, p, fid)
                self._by_path[str(p)] = fid
            if audio_sampling_rate is not None and (fid, int(audio_sampling_rate)) not in self._audio:
                self._executor.submit(self._prefetch_audio, p, int(audio_sampling_rate))

    def _prefetch_audio(self, path: Path, sampling_rate: int) -> None:
        try:
            self._audio_future(path, sampling_rate, prefetching=True)
        except AudioError:
            pass  # a missing file: get_audio raises it

    def release(self, path: str | os.PathLike) -> None:
        """Forget a video's frames (after its last question). Unknown paths are ignored."""
        with self._lock:
            fid = self._by_path.pop(str(Path(path)), None)
        if fid is None:
            try:
                fid = _file_id(Path(path))
            except VideoError:
                return
        with self._lock:
            self._slots.pop(fid, None)
            pending = self._pending.pop(fid, None)
            for key in [k for k in self._audio if k[0] == fid]:
                del self._audio[key]
        if pending is not None:
            pending.cancel()

    def clear(self) -> None:
        """Forget every video."""
        with self._lock:
            self._slots.clear()
            self._by_path.clear()
            self._audio.clear()
            pending, self._pending = list(self._pending.values()), {}
        for fut in pending:
            fut.cancel()

    def close(self) -> None:
        """Forget every video and stop the prefetch thread."""
        self._closing = True  # queued soundtrack prefetches then return without reading
        self.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        self._closing = False

    def __enter__(self) -> "FrameCache":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self._slots)

    def summary(self) -> dict[str, Any]:
        """Settings, disk directory and counters (JSON-safe) for the run's artifact."""
        with self._lock:
            stats = asdict(self.stats)
        return {
            "settings": self.settings.key_fields(),
            "frame_cache_dir": str(self._requested_disk_dir) if self._requested_disk_dir is not None else None,
            "frame_cache_dir_error": self.disk_error,
            "stats": stats,
        }

    def _build(self, path: Path, fid: tuple[str, int, int]) -> _Slot:
        slot = _Slot()
        try:
            slot.frames = self._load(path, fid)
        except VideoError as exc:
            slot.error = exc
            self._count("failures")
            log.warning("video %s cannot be used: %s", path, exc.detail)
            return slot
        self._hash_file(path, fid)
        return slot

    def _hash_file(self, path: Path, fid: tuple[str, int, int]) -> None:
        """Hash the video file once per run, on the thread that decoded it (see :meth:`file_identity`)."""
        from k9bench.stage import file_digest

        key = str(path)
        with self._lock:
            if key in self._identity:
                return
        try:
            digest = file_digest(path)
        except OSError as exc:
            log.warning("video %s: cannot hash the file (%s)", path, exc)
            return
        with self._lock:
            self._identity[key] = {"bytes": fid[1], "sha256": digest}

    def file_identity(self, path: str | os.PathLike) -> dict | None:
        """``{"bytes", "sha256"}`` of a video whose frames this cache gave out (hashed once, when first
        decoded or read from disk), else None."""
        with self._lock:
            found = self._identity.get(str(Path(path)))
            return dict(found) if found is not None else None

    # ------------------------------------------------------------------ soundtracks

    def get_audio(self, path: str | os.PathLike, sampling_rate: int) -> Audio:
        """The video's soundtrack at ``sampling_rate`` (mono float32), read on first use.

        Raises ``k9bench.video.audio.NoAudioStream`` for a video without one and ``AudioError`` for
        other failures, the same error again for each later call (no second read).
        """
        fut = self._audio_future(Path(path), int(sampling_rate), prefetching=False)
        return fut.result()  # type: ignore[union-attr]

    def _audio_future(self, p: Path, sampling_rate: int, prefetching: bool) -> Future | None:
        """The soundtrack's future, read here when no other call has it (None: a prefetch after close began)."""
        try:
            fid = _file_id(p)
        except VideoError as exc:
            raise AudioError(p, exc.detail, "missing_video" if exc.reason_class == "missing_video" else None) from None
        key = (fid, sampling_rate)
        with self._lock:
            if prefetching and self._closing:
                return None
            fut = self._audio.get(key)
            owner = fut is None
            if owner:
                fut = Future()
                fut.set_running_or_notify_cancel()
                self._audio[key] = fut
                self._by_path[str(p)] = fid
        if owner:
            try:
                fut.set_result(self._load_audio(p, fid, sampling_rate))
            except AudioError as exc:
                self._count("audio_failures")
                log.warning("soundtrack of %s cannot be used: %s", p, exc.detail)
                fut.set_exception(exc)
            except BaseException as exc:  # not remembered: a later call tries again
                with self._lock:
                    if self._audio.get(key) is fut:
                        del self._audio[key]
                fut.set_exception(exc)
        return fut

    def audio_entry_path(self, path: str | os.PathLike, sampling_rate: int) -> Path | None:
        """Where the soundtrack entry of ``path`` at ``sampling_rate`` lives (None without ``disk_dir``)."""
        if self.disk_dir is None:
            return None
        return self.disk_dir / f"{self._audio_key(_file_id(Path(path)), int(sampling_rate))}.audio.npz"

    @staticmethod
    def _audio_key(fid: tuple[str, int, int], sampling_rate: int) -> str:
        blob = json.dumps({"format": CACHE_FORMAT, "kind": "audio", "file": list(fid), "sampling_rate": sampling_rate}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def _load_audio(self, path: Path, fid: tuple[str, int, int], sampling_rate: int) -> Audio:
        import numpy as np

        entry = key = None
        if self.disk_dir is not None:
            key = self._audio_key(fid, sampling_rate)
            entry = self.disk_dir / f"{key}.audio.npz"
            if entry.exists():
                problem = None
                try:
                    with np.load(entry, allow_pickle=False) as data:
                        meta = json.loads(bytes(data["meta"]).decode("utf-8"))
                        samples = np.ascontiguousarray(data["samples"])
                    if meta.get("key") != key or meta.get("sampling_rate") != sampling_rate:
                        problem = "key mismatch"
                    elif samples.dtype != np.float32 or samples.ndim != 1 or samples.size != meta.get("num_samples"):
                        problem = f"bad sample array {samples.dtype} {samples.shape}"
                    elif hashlib.sha256(samples.tobytes()).hexdigest() != meta.get("sha256"):
                        problem = "checksum mismatch"
                except Exception as exc:
                    problem = f"unreadable ({type(exc).__name__}: {exc})"
                if problem is None:
                    self._count("audio_disk_hits")
                    return Audio(samples=samples, sampling_rate=sampling_rate, path=str(path), from_disk_cache=True)
                self._count("damaged")
                log.warning("soundtrack cache entry %s for %s is damaged (%s): removing it and reading again", entry, path, problem)
                try:
                    entry.unlink()
                except OSError:
                    pass
        audio = read_audio(path, sampling_rate)
        self._count("audio_reads")
        if entry is not None:
            meta = {"format": CACHE_FORMAT, "key": key, "sampling_rate": sampling_rate, "num_samples": audio.num_samples,
                    "sha256": hashlib.sha256(audio.samples.tobytes()).hexdigest()}
            meta_arr = np.frombuffer(json.dumps(meta, sort_keys=True).encode("utf-8"), dtype=np.uint8)
            try:
                with atomic_file(entry, "wb") as fh:
                    np.savez(fh, samples=audio.samples, meta=meta_arr)
                self._count("disk_writes")
            except (OSError, WriteFailed) as exc:
                self._count("disk_write_errors")
                log.warning("cannot write soundtrack cache entry %s for %s (%s); continuing without it", entry, path, exc)
        return audio

    def _count(self, name: str, amount: float = 1) -> None:
        with self._lock:
            setattr(self.stats, name, getattr(self.stats, name) + amount)

    # ------------------------------------------------------------------ disk layer

    def entry_key(self, fid: tuple[str, int, int]) -> str:
        """Hex key of the disk entry for a file id under this cache's settings."""
        blob = json.dumps(
            {"format": CACHE_FORMAT, "file": list(fid), "settings": self.settings.key_fields()}, sort_keys=True
        )
        return hashlib.sha256(blob.encode()).hexdigest()

    def entry_path(self, path: str | os.PathLike) -> Path | None:
        """Where the disk entry of ``path`` lives (None without ``disk_dir``)."""
        if self.disk_dir is None:
            return None
        return self.disk_dir / f"{self.entry_key(_file_id(Path(path)))}.npz"

    def _load(self, path: Path, fid: tuple[str, int, int]) -> Frames:
        entry = None
        if self.disk_dir is not None:
            key = self.entry_key(fid)
            entry = self.disk_dir / f"{key}.npz"
            if entry.exists():
                frames = self._read_entry(entry, key, path)
                if frames is not None:
                    self._count("disk_hits")
                    return frames
        frames = sample(path, **self.settings.sample_kwargs())
        self._count("decodes")
        self._count("decode_seconds", frames.decode_seconds)
        if entry is not None:
            try:
                self._write_entry(entry, self.entry_key(fid), frames)
            except (OSError, WriteFailed) as exc:  # WriteFailed: atomic_file's one line for a full disk
                # the frames are good; only the reuse by later runs is lost, so say so and go on
                self._count("disk_write_errors")
                log.warning("cannot write frame cache entry %s for %s (%s); continuing without it", entry, path, exc)
        return frames

    def _read_entry(self, entry: Path, key: str, path: Path) -> Frames | None:
        import numpy as np
        import torch

        try:
            with np.load(entry, allow_pickle=False) as data:
                meta = json.loads(bytes(data["meta"]).decode("utf-8"))
                pixels = np.ascontiguousarray(data["frames"])
            problem = _validate(meta, pixels, key)
        except Exception as exc:  # unreadable zip, missing array, bad JSON...
            problem = f"unreadable ({type(exc).__name__}: {exc})"
        if problem is not None:
            self._count("damaged")
            log.warning("frame cache entry %s for %s is damaged (%s): removing it and decoding again", entry, path, problem)
            try:
                entry.unlink()
            except OSError:
                pass
            return None
        info = meta["frames"]
        return Frames(
            frames=torch.from_numpy(pixels),
            indices=[int(i) for i in info["indices"]],
            source_fps=float(info["source_fps"]),
            total_frames=int(info["total_frames"]),
            sample_fps=float(info["sample_fps"]),
            height=int(info["height"]),
            width=int(info["width"]),
            duration=float(info["duration"]),
            decoder=str(info["decoder"]),
            source_height=int(info.get("source_height", 0)),
            source_width=int(info.get("source_width", 0)),
            decode_seconds=0.0,
            from_disk_cache=True,
            settings=dict(meta.get("settings", {})),
        )

    def _write_entry(self, entry: Path, key: str, frames: Frames) -> None:
        import numpy as np

        pixels = frames.frames.contiguous().numpy()
        info = frames.summary()
        info.pop("from_disk_cache", None)
        meta = {
            "format": CACHE_FORMAT,
            "key": key,
            "settings": self.settings.key_fields(),
            "frames": info,
            "shape": list(pixels.shape),
            "sha256": hashlib.sha256(pixels.tobytes()).hexdigest(),
        }
        meta_arr = np.frombuffer(json.dumps(meta, sort_keys=True).encode("utf-8"), dtype=np.uint8)
        with atomic_file(entry, "wb") as fh:  # temp file + fsync + rename; readable by the group (umask)
            np.savez(fh, frames=pixels, meta=meta_arr)
        self._count("disk_writes")
        log.debug("frame cache entry written: %s", entry)


def _validate(meta: dict, pixels: Any, key: str) -> str | None:
    """Why a disk entry cannot be trusted, or None."""
    if meta.get("format") != CACHE_FORMAT:
        return f"format {meta.get('format')!r} != {CACHE_FORMAT}"
    if meta.get("key") != key:
        return "key mismatch"
    if str(pixels.dtype) != "uint8" or pixels.ndim != 4 or pixels.shape[1] != 3:
        return f"bad pixel array {pixels.dtype} {pixels.shape}"
    if list(pixels.shape) != list(meta.get("shape", [])):
        return f"shape {list(pixels.shape)} != recorded {meta.get('shape')}"
    info = meta.get("frames") or {}
    if len(info.get("indices", [])) != pixels.shape[0]:
        return "index count does not match the frame count"
    if (info.get("height"), info.get("width")) != (pixels.shape[2], pixels.shape[3]):
        return "recorded size does not match the pixels"
    if hashlib.sha256(pixels.tobytes()).hexdigest() != meta.get("sha256"):
        return "checksum mismatch"
    return None


__all__ = ["CACHE_FORMAT", "CacheStats", "FrameCache", "SamplingSettings"]
