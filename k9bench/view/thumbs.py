"""Thumbnails of the exact frames the model saw, one strip per video, made once per video.

A run's raw file records, per question, the source indices of the frames it gave the model
(``frame_indices``) and, in its ``inference.frames`` block, how they were sampled. The strip is made by
:class:`k9bench.video.cache.FrameCache` with those sampling settings (and the run's on-disk frame store
when it had one, so nothing is decoded twice): the indices it gives must be the recorded ones, otherwise
the video is named in the page's notes and gets no strip (never frames other than the model's). At most
:data:`PER_VIDEO` frames are kept, evenly spread, each a small JPEG in ``frames/``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from k9bench.artifact_io import atomic_file

log = logging.getLogger("k9bench.view")

PER_VIDEO = 8
"""Frames kept per video."""

THUMB_SIZE = (160, 90)
"""Bounding box of a thumbnail (width, height)."""

JPEG_QUALITY = 70


def spread(count: int, keep: int = PER_VIDEO) -> list[int]:
    """``keep`` positions evenly spread over ``count`` (all of them when there are fewer)."""
    if count <= keep:
        return list(range(count))
    return sorted({round(i * (count - 1) / (keep - 1)) for i in range(keep)})


def _sampling(frames: dict):
    from k9bench.video.cache import SamplingSettings

    fields = {k: frames[k] for k in ("fps", "max_frames", "max_pixels", "min_pixels", "image_patch_size") if frames.get(k) is not None}
    if frames.get("decoder") or frames.get("video_decoder"):
        fields["decoder"] = frames.get("decoder") or frames.get("video_decoder")
    return SamplingSettings(**fields)


def _save(pixels, path: Path) -> None:
    from PIL import Image

    image = Image.fromarray(pixels.permute(1, 2, 0).contiguous().numpy())
    image.thumbnail(THUMB_SIZE)
    with atomic_file(path, "wb") as handle:
        image.save(handle, format="JPEG", quality=JPEG_QUALITY)


def _remove_stale(folder: Path, keep: set) -> None:
    """Thumbnails an earlier page left in ``frames/`` (only our own ``vNNNN_NN.jpg`` names): the folder holds this page's."""
    import re

    if folder.is_dir():
        for path in folder.glob("v*_*.jpg"):
            if re.fullmatch(r"v\d{4}_\d{2}\.jpg", path.name) and path.name not in keep:
                path.unlink()


def make_strips(runs, data: dict, out_dir: Path, limit: int | None) -> None:
    """Fill ``data["thumbs"]`` (scene -> frame file names, relative to the page) for at most ``limit``
    videos (None: all, 0: none), ``data["frames_bytes"]`` and ``data["thumb_notes"]``."""
    from k9bench.video.sampling import VideoError
    from k9bench.report.load import video_of
    from k9bench.view.data import inference_of, video_dir_of

    if limit == 0:
        data["thumb_notes"].append("thumbnails off (--thumbnails 0)")
        _remove_stale(out_dir / "frames", set())
        return
    wanted: dict[str, tuple] = {}  # scene -> (run, record, video file, sampling block): the first run with its frame indices
    for run in runs:
        frames = inference_of(run).get("frames")
        vdir = video_dir_of(run)
        if not isinstance(frames, dict) or vdir is None:
            continue
        for rec in run.records:
            scene = video_of(rec)
            if scene not in wanted and isinstance(rec.extra.get("frame_indices"), list) and rec.extra["frame_indices"]:
                wanted[scene] = (run, rec, vdir / (rec.video or f"{scene}.mp4"), frames)
    scenes = list(wanted)
    if limit is not None and len(scenes) > limit:
        data["thumb_notes"].append(f"thumbnails for the first {limit} of {len(scenes)} videos (--thumbnails {limit})")
        scenes = scenes[:limit]
    folder = out_dir / "frames"
    total = 0
    caches: dict = {}
    missing = mismatched = 0
    for n, scene in enumerate(scenes):
        run, rec, video, frames = wanted[scene]
        key = id(run)
        if key not in caches:
            from k9bench.video.cache import FrameCache
            from k9bench.video.sampling import DecoderUnavailable

            try:
                caches[key] = FrameCache(_sampling(frames), disk_dir=frames.get("frame_cache_dir") or None)
            except DecoderUnavailable as exc:  # never another decoder: its frames could differ from the model's
                caches[key] = None
                data["thumb_notes"].append(f"{run.label}: no thumbnails, the run's decoder is not available here ({exc})")
        cache = caches[key]
        if cache is None:
            continue
        try:
            got = cache.get(video)
        except (VideoError, ValueError) as exc:  # ValueError: sampling settings the sampler refuses
            missing += 1
            log.info("no thumbnails for %s: %s", scene, exc)
            continue
        if list(got.indices) != list(rec.extra["frame_indices"]):
            mismatched += 1
            log.warning("%s: the frame cache gives frames %s, the run recorded %s; no thumbnails for it (never other frames "
                        "than the model's)", video, list(got.indices)[:8], rec.extra["frame_indices"][:8])
            cache.release(video)
            continue
        folder.mkdir(parents=True, exist_ok=True)
        names = []
        for pos in spread(len(got.indices)):
            name = f"v{n:04d}_{pos:02d}.jpg"
            _save(got.frames[pos], folder / name)
            total += (folder / name).stat().st_size
            names.append([name, int(got.indices[pos]), round(got.indices[pos] / got.source_fps, 2) if got.source_fps else None])
        data["thumbs"][scene] = names
        cache.release(video)
    for cache in caches.values():
        if cache is not None:
            cache.close()
    _remove_stale(folder, {name for strip in data["thumbs"].values() for name, _, _ in strip})
    if missing:
        data["thumb_notes"].append(f"{missing} video(s) not found or unreadable here: no thumbnails for them")
    if mismatched:
        data["thumb_notes"].append(f"{mismatched} video(s) decode to other frames than the run recorded (another file or "
                                   "decoder): no thumbnails for them")
    data["frames_bytes"] = total
