"""Video frames for the model: qwen-vl-utils' sampling, decoded once, with an explicit decoder.

``sample(path, ...)`` returns the same frames that qwen-vl-utils' ``fetch_video`` (decord backend)
gives for a ``{"video": path, "fps": 1.0, "max_frames": 32, "max_pixels": 360 * 420}`` item: the
frame count from qwen-vl-utils' ``smart_nframes``, the indices from the same ``linspace(...).round()``
rule, the size from its ``smart_resize``, then the same bicubic antialiased resize; uint8 frames.
The decoder is chosen explicitly (``decoder=``, default ``DEFAULT_DECODER``) and never swapped
(``DecoderUnavailable``); a file that gives no frames raises ``VideoError`` naming it.

``FrameCache`` keeps each video's frames for the questions that share it and optionally stores
them on disk for later runs.

This is the module to import from. It holds no code of its own: the sampling lives in
:mod:`k9bench.frame_sampling` (which also defines the frame defaults, once) and the cache in
:mod:`k9bench.frame_cache`; both are re-exported here. Imports run one way only:
``frame_sampling`` <- ``frame_cache`` <- ``video`` (neither lower module imports this one).

Usage::

    from k9bench.video import sample, FrameCache, PROCESSOR_VIDEO_KWARGS
    frames = sample("k9bench_videos/abcdefghijk.mp4", fps=1.0, max_frames=32)
    processor(text=[prompt], videos=[frames.video_tensor()], video_metadata=[frames.processor_metadata()],
              return_tensors="pt", **PROCESSOR_VIDEO_KWARGS)
"""

from __future__ import annotations

from k9bench.frame_cache import CACHE_FORMAT, CacheStats, FrameCache, SamplingSettings
from k9bench.frame_sampling import (
    DECODERS,
    DEFAULT_DECODER,
    DEFAULT_FPS,
    DEFAULT_IMAGE_PATCH_SIZE,
    DEFAULT_MAX_FRAMES,
    DEFAULT_MAX_PIXELS,
    DEFAULT_MIN_PIXELS,
    PROCESSOR_VIDEO_KWARGS,
    SPATIAL_MERGE_SIZE,
    VIDEO_MIN_TOKEN_NUM,
    DecoderUnavailable,
    Frames,
    VideoError,
    check_decoder,
    check_pixel_bounds,
    default_min_pixels,
    frame_indices,
    resize_frames,
    resized_size,
    sample,
)

__all__ = [
    "CACHE_FORMAT",
    "CacheStats",
    "DECODERS",
    "DEFAULT_DECODER",
    "DEFAULT_FPS",
    "DEFAULT_IMAGE_PATCH_SIZE",
    "DEFAULT_MAX_FRAMES",
    "DEFAULT_MAX_PIXELS",
    "DEFAULT_MIN_PIXELS",
    "PROCESSOR_VIDEO_KWARGS",
    "SPATIAL_MERGE_SIZE",
    "VIDEO_MIN_TOKEN_NUM",
    "DecoderUnavailable",
    "FrameCache",
    "Frames",
    "SamplingSettings",
    "VideoError",
    "check_decoder",
    "check_pixel_bounds",
    "default_min_pixels",
    "frame_indices",
    "resize_frames",
    "resized_size",
    "sample",
]
