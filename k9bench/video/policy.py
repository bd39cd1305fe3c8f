"""How frames (and a soundtrack) are handed to a model's processor, chosen by its family and the processor's type.

The shared path samples frames once (:mod:`k9bench.video`) and calls the processor the same way
for every model. Which family a processor belongs to, and that family's frame rule and quirks, are
rows of :data:`k9bench.models.families.FAMILIES` (found by the model's ``model_type`` when it is
given, else by the processor's class names); this module applies the rules:

- ``qwen_vl_rules``: video processors with a Qwen-style patch grid (an int ``patch_size`` and
  ``merge_size == 2``: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, the Omni models; a processor the table does
  not know gets this rule too when it has that grid). Frames are resized by
  qwen-vl-utils' rule at the processor's patch size, and the processor is told not to resize
  (``do_resize=False``) nor resample (``do_sample_frames=False``); each video's metadata goes
  with it (Qwen3-VL derives per-frame timestamps from it, Qwen2.5-VL its sampled fps).
- ``fixed_size``: families whose video processor resizes every frame to one size (InternVL's,
  ``size={"height", "width"}``, 448x448 on the Hub checkpoints). Frames are resized once, exactly
  to that size, from the source (``sample(frame_size=...)``); no metadata (the prompt numbers the
  frames, no timestamps). The family's evaluation frame count is ``recommended_max_frames`` (InternVL: 32).
- ``processor_resizes``: anything else with a video processor: frames at qwen-vl-utils' default
  patch size, handed as float 0..255, resized by the processor, metadata passed.

Processors that read the sampled frame rate from an ``fps`` keyword rather than from the metadata
(the table's ``fps_keyword``: the Omni processors, which use it to place video tokens in time)
get it, so a batch must share one sampled fps. A processor with a feature extractor takes audio
at the extractor's ``sampling_rate``; an omni-modal processor (``load_audio_from_video``) takes a
video's soundtrack as audio-in-video input (interleaved with its frames in 2-second chunks) and
the model's ``generate`` then needs ``use_audio_in_video=True`` (``generate_kwargs``).

Usage::

    policy = policy_for(processor, model_type=model.config.model_type)
    cache = FrameCache(SamplingSettings(max_frames=32, **policy.sampling_overrides()))
    frames = cache.get(path)
    audio = cache.get_audio(path, policy.audio_sampling_rate) if with_audio else None
    inputs = processor(text=prompts, padding=True, return_tensors="pt",
                       **policy.processor_kwargs([frames], [audio] if audio else None))
    model.generate(**inputs, **policy.generate_kwargs(with_audio=audio is not None))
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from k9bench.video.audio import Audio
    from k9bench.video.sampling import Frames

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FramePolicy:
    """How one processor wants its frames and audio (built by ``policy_for``)."""

    rule: str
    """``qwen_vl_rules``, ``fixed_size`` or ``processor_resizes`` (:data:`k9bench.models.families.FRAME_RULES`)."""
    processor_class: str
    """The processor's class name."""
    video_processor_class: str | None
    """The video processor's class name (None: the processor takes no video)."""
    image_patch_size: int | None
    """Patch size for qwen-vl-utils' resize rule (``qwen_vl_rules`` only)."""
    frame_size: tuple[int, int] | None
    """Exact (height, width) of every frame (``fixed_size`` only)."""
    resize_in_processor: bool
    """True when the processor resizes the frames again (then they are handed as float 0..255)."""
    video_metadata: bool
    """True when each video's metadata (source fps, frame indices) goes to the processor."""
    fps_keyword: bool
    """True when the processor takes the sampled frame rate as ``fps=`` (one per call)."""
    recommended_max_frames: int | None
    """Frame count of the family's evaluation setting, when it has one."""
    audio_sampling_rate: int | None
    """The feature extractor's sampling rate (None: the processor takes no audio)."""
    audio_window_seconds: float | None
    """Longest soundtrack the feature extractor keeps (longer ones are cut by it); None when it keeps all
    (the processor asks for ``truncation=False``, as Qwen3-Omni's does) or does not say."""
    audio_in_video: bool
    """True when the processor takes a video's soundtrack as audio-in-video input."""
    family: str | None = None
    """The row of :data:`k9bench.models.families.FAMILIES` it was decided by (None: a family the table does not know)."""
    frame_patch: tuple[int, int] | None = None
    """``(patch side, temporal patch)`` of a fixed-size frame (the family's), for token estimates."""

    def sampling_overrides(self) -> dict[str, Any]:
        """``SamplingSettings``/``sample`` keywords this processor needs (patch size or exact frame size)."""
        if self.rule == "fixed_size":
            return {"frame_size": self.frame_size}
        if self.rule == "qwen_vl_rules":
            return {"image_patch_size": self.image_patch_size}
        return {}

    def check_frames(self, frames: "Frames") -> None:
        """``ValueError`` when ``frames`` were not sampled for this processor (wrong size rule)."""
        if self.rule == "fixed_size" and (frames.height, frames.width) != tuple(self.frame_size or ()):
            raise ValueError(
                f"{self.video_processor_class} expects {self.frame_size[0]}x{self.frame_size[1]} frames "  # type: ignore[index]
                f"(height x width), got {frames.height}x{frames.width}: sample with {self.sampling_overrides()}"
            )
        if self.rule == "qwen_vl_rules":
            factor = 2 * int(self.image_patch_size or 0)
            if frames.height % factor or frames.width % factor:
                raise ValueError(
                    f"{self.video_processor_class} (patch {self.image_patch_size}) needs frame sides that are multiples of "
                    f"{factor}, got {frames.height}x{frames.width}: sample with {self.sampling_overrides()}"
                )

    def processor_kwargs(self, frames: Sequence["Frames"], audio: Sequence["Audio"] | None = None) -> dict[str, Any]:
        """The video (and audio) keywords of one processor call for a batch, one video per prompt.

        ``audio``, when given, holds each video's soundtrack in the same order. ``ValueError`` when
        the frames do not fit this processor, the batch mixes sampled frame rates where the
        processor takes one ``fps``, or audio is given to a processor without a feature extractor
        (or at another rate).
        """
        if self.video_processor_class is None:
            raise ValueError(f"{self.processor_class} takes no video")
        for f in frames:
            self.check_frames(f)
        kwargs: dict[str, Any] = {"do_sample_frames": False}
        if self.resize_in_processor:
            kwargs["videos"] = [f.video_tensor() for f in frames]
        else:
            kwargs["videos"] = [f.frames for f in frames]
            kwargs["do_resize"] = False
        if self.video_metadata:
            kwargs["video_metadata"] = [f.processor_metadata() for f in frames]
        if self.fps_keyword:
            rates = {round(float(f.sample_fps), 9) for f in frames}
            if len(rates) > 1:
                raise ValueError(
                    f"{self.processor_class} takes one fps per call but the batch's videos were sampled at "
                    f"{sorted(rates)} fps: group the batch by sampled fps or use batch size 1"
                )
            kwargs["fps"] = rates.pop() if rates else None
        if audio is not None:
            kwargs.update(self._audio_kwargs(audio, len(frames)))
        return kwargs

    def _audio_kwargs(self, audio: Sequence["Audio"], n_videos: int) -> dict[str, Any]:
        if self.audio_sampling_rate is None:
            raise ValueError(f"{self.processor_class} has no feature extractor: it takes no audio")
        if len(audio) != n_videos:
            raise ValueError(f"{len(audio)} soundtracks for {n_videos} videos")
        for a in audio:
            if a.sampling_rate != self.audio_sampling_rate:
                raise ValueError(
                    f"{a.path}: soundtrack at {a.sampling_rate} Hz, but the feature extractor wants {self.audio_sampling_rate} Hz"
                )
        kwargs: dict[str, Any] = {"audio": [a.samples for a in audio], "sampling_rate": self.audio_sampling_rate}
        if self.audio_in_video:
            # one soundtrack per video, already decoded: the processor takes it instead of reading the file
            kwargs["audio_from_video_indices"] = list(range(n_videos))
            kwargs["load_audio_from_video"] = True
        return kwargs

    def generate_kwargs(self, with_audio: bool) -> dict[str, Any]:
        """Extra ``model.generate`` keywords (``use_audio_in_video`` for audio-in-video inputs)."""
        return {"use_audio_in_video": True} if with_audio and self.audio_in_video else {}

    def summary(self) -> dict[str, Any]:
        """JSON-safe description for the run's artifact."""
        out = asdict(self)
        out["frame_size"] = list(self.frame_size) if self.frame_size else None
        out["frame_patch"] = list(self.frame_patch) if self.frame_patch else None
        return out


def _size_hw(size: Any) -> tuple[int, int] | None:
    """(height, width) from a processor ``size`` (dict or SizeDict) that fixes both, else None."""
    get = size.get if isinstance(size, dict) else (lambda k: getattr(size, k, None))
    h, w = get("height"), get("width")
    if isinstance(h, int) and isinstance(w, int) and h > 0 and w > 0:
        return h, w
    return None


def policy_for(processor: Any, model_type: str | None = None) -> FramePolicy:
    """The frame (and audio) policy of ``processor``: its family's row (by ``model_type`` when given, else by the
    processor's class names, :mod:`k9bench.models.families`) and the processor's own attributes."""
    from k9bench.models.families import for_model_type, for_processor
    from k9bench.video.sampling import DEFAULT_IMAGE_PATCH_SIZE

    vp = getattr(processor, "video_processor", None)
    vp_name = type(vp).__name__ if vp is not None else None
    proc_name = type(processor).__name__
    patch, merge = getattr(vp, "patch_size", None), getattr(vp, "merge_size", None)
    family = for_model_type(model_type) or for_processor(proc_name, vp_name)

    fe = getattr(processor, "feature_extractor", None)
    rate = getattr(fe, "sampling_rate", None)
    rate = int(rate) if isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0 else None
    n_samples = getattr(fe, "n_samples", None)
    cuts = (getattr(processor, "audio_kwargs", None) or {}).get("truncation", True) is not False
    window = float(n_samples) / rate if cuts and rate and isinstance(n_samples, int) and n_samples > 0 else None
    audio = {
        "audio_sampling_rate": rate,
        "audio_window_seconds": window,
        "audio_in_video": bool(rate) and hasattr(processor, "load_audio_from_video"),
    }
    common = {"processor_class": proc_name, "video_processor_class": vp_name, "fps_keyword": bool(family and family.fps_keyword),
              "recommended_max_frames": family.evaluation_frames if family else None, "family": family.name if family else None}

    fixed = (_size_hw(getattr(vp, "size", None))
             if family is not None and family.frame_rule == "fixed_size" and vp_name in family.video_processors else None)
    grid = isinstance(patch, int) and not isinstance(patch, bool) and patch > 0 and merge == 2
    if fixed is not None:
        policy = FramePolicy(rule="fixed_size", image_patch_size=None, frame_size=fixed, resize_in_processor=False,
                             video_metadata=False, frame_patch=family.frame_patch, **common, **audio)  # type: ignore[union-attr]
    elif grid and (family is None or family.frame_rule == "qwen_vl_rules"):
        policy = FramePolicy(rule="qwen_vl_rules", image_patch_size=patch, frame_size=None, resize_in_processor=False,
                             video_metadata=True, **common, **audio)
    else:
        if vp is not None:
            log.warning("%s (patch_size=%r, merge_size=%r, size=%r) has no known frame rule: frames are resized by the processor",
                        vp_name, patch, merge, getattr(vp, "size", None))
        policy = FramePolicy(rule="processor_resizes", image_patch_size=DEFAULT_IMAGE_PATCH_SIZE if vp is not None else None,
                             frame_size=None, resize_in_processor=True, video_metadata=vp is not None, **common, **audio)
    log.debug("frame policy for %s: %s", proc_name, policy.summary())
    return policy


__all__ = ["FramePolicy", "policy_for"]
