"""Thumbnails of the exact frames each model saw: per video, one strip per distinct frame set, labelled
with the runs that saw it.

A run's raw file records, per question, the source indices of the frames it gave the model
(``frame_indices``) and, in its ``inference.frames`` block, how they were sampled. The strip is made by
:class:`k9bench.video.cache.FrameCache` with those sampling settings, in memory (a run's on-disk frame
store is not used: nothing is written outside the page's folder): the indices it gives must be the
recorded ones, otherwise the video is named in the page's notes and gets no strip (never frames other
than the model's). At most :data:`PER_VIDEO` frames are kept per strip, evenly spread, each a small JPEG
in ``frames/``. A malformed ``inference.frames`` block stops the page before anything is decoded.
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


SAMPLING_NUMBERS = ("fps", "max_frames", "max_pixels", "min_pixels", "image_patch_size")
"""The ``inference.frames`` fields that must be numbers (or absent)."""


def _sampling(frames: dict, source: str = "inference.frames"):
    """:class:`~k9bench.video.cache.SamplingSettings` from a run's ``inference.frames`` block;
    :class:`~k9bench.view.data.ViewError` naming ``source`` and the field when one is not a number."""
    from k9bench.artifacts import is_finite_number
    from k9bench.video.cache import SamplingSettings
    from k9bench.view.data import ViewError

    fields = {}
    for key in SAMPLING_NUMBERS:
        value = frames.get(key)
        if value is None:
            continue
        if not is_finite_number(value) or value < 0:
            raise ViewError(f"{source}.{key}: {value!r} is not a number; the run's frames cannot be found again")
        fields[key] = value
    decoder = frames.get("decoder") or frames.get("video_decoder")
    if decoder:
        fields["decoder"] = str(decoder)
    return SamplingSettings(**fields)


def _save(pixels, path: Path) -> None:
    from PIL import Image

    image = Image.fromarray(pixels.permute(1, 2, 0).contiguous().numpy())
    image.thumbnail(THUMB_SIZE)
    with atomic_file(path, "wb") as handle:
        image.save(handle, format="JPEG", quality=JPEG_QUALITY)


def _remove_stale(folder: Path, keep: set) -> None:
    """Thumbnails an earlier page left in ``frames/`` (only our own ``vNNNN_NN.jpg`` and ``vNNNN_NN_NN.jpg``
    names): the folder holds this page's."""
    import re

    if folder.is_dir():
        for path in folder.glob("v*_*.jpg"):
            if re.fullmatch(r"v\d{4}(_\d{2})?_\d{2}\.jpg", path.name) and path.name not in keep:
                path.unlink()


def _wanted(runs) -> dict:
    """scene -> {recorded frame indices -> [run numbers, the first such run, its record, video file, sampling]}:
    each distinct frame set of a video, in run order, with the runs that saw it. Checks every run's
    ``inference.frames`` block first (:class:`~k9bench.view.data.ViewError`), before anything is decoded."""
    from k9bench.view.data import inference_of, video_dir_of

    wanted: dict[str, dict] = {}
    for k, run in enumerate(runs):
        frames = inference_of(run).get("frames")
        vdir = video_dir_of(run)
        if not isinstance(frames, dict) or vdir is None:
            continue
        sampling = _sampling(frames, f"{run.path}: inference.frames")
        seen = set()
        for rec in run.records:
            scene, indices = rec.video_key, rec.extra.get("frame_indices")
            if scene in seen or not isinstance(indices, list) or not indices:
                continue
            seen.add(scene)
            sets = wanted.setdefault(scene, {})
            key = tuple(indices)
            if key in sets:
                sets[key][0].append(k)
            else:
                sets[key] = [[k], run, rec, vdir / (rec.video or f"{scene}.mp4"), sampling]
    return wanted


def make_strips(runs, data: dict, out_dir: Path, limit: int | None) -> None:
    """Fill ``data["thumbs"]`` (scene -> one strip per distinct frame set: ``{"runs": [run numbers], "f":
    [[file name relative to the page, source index, seconds], ...]}``) for at most ``limit`` videos (None: all,
    0: none), ``data["frames_bytes"]`` and ``data["thumb_notes"]``. Frames are decoded in memory: nothing is
    written outside ``out_dir`` (a run's own frame store is never touched)."""
    from k9bench.video.sampling import VideoError

    wanted = _wanted(runs)
    if limit == 0:
        data["thumb_notes"].append("thumbnails off (--thumbnails 0)")
        _remove_stale(out_dir / "frames", set())
        return
    scenes = list(wanted)
    if limit is not None and len(scenes) > limit:
        data["thumb_notes"].append(f"thumbnails for the first {limit} of {len(scenes)} videos (--thumbnails {limit})")
        scenes = scenes[:limit]
    folder = out_dir / "frames"
    total = 0
    caches: dict = {}
    missing = mismatched = 0
    for n, scene in enumerate(scenes):
        strips = []
        for s_i, (ran, run, rec, video, sampling) in enumerate(wanted[scene].values()):
            key = id(run)
            if key not in caches:
                from k9bench.video.cache import FrameCache
                from k9bench.video.sampling import DecoderUnavailable

                try:
                    caches[key] = FrameCache(sampling)
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
                name = f"v{n:04d}_{s_i:02d}_{pos:02d}.jpg"
                _save(got.frames[pos], folder / name)
                total += (folder / name).stat().st_size
                names.append([name, int(got.indices[pos]), round(got.indices[pos] / got.source_fps, 2) if got.source_fps else None])
            strips.append({"runs": ran, "f": names})
            cache.release(video)
        if strips:
            data["thumbs"][scene] = strips
    for cache in caches.values():
        if cache is not None:
            cache.close()
    _remove_stale(folder, {name for strips in data["thumbs"].values() for strip in strips for name, _, _ in strip["f"]})
    if missing:
        data["thumb_notes"].append(f"{missing} video(s) not found or unreadable here: no thumbnails for them")
    if mismatched:
        data["thumb_notes"].append(f"{mismatched} video(s) decode to other frames than the run recorded (another file or "
                                   "decoder): no thumbnails for them")
    data["frames_bytes"] = total
