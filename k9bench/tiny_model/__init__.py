"""Tiny random-weight checkpoints (Qwen3-VL and other families), built offline, for tests, demos and benchmarks.

Everything is generated locally (nothing comes from the Hub): a small byte-level BPE
tokenizer trained on a few sentences written here, with the Qwen special tokens
(``<|im_start|>``, ``<|im_end|>``, ``<|vision_start|>``, ``<|video_pad|>``, ``<think>`` ...),
a Qwen3-VL style chat template, the Qwen2-VL image processor, the Qwen3-VL video processor,
a generation config, and a two-layer language model with a two-block vision tower.

The folder loads with ``AutoProcessor.from_pretrained(path)`` and
``AutoModelForImageTextToText.from_pretrained(path)`` in about a second, and ``generate``
runs on CPU. The weights are random, so the text is gibberish, but it is varied (the
initialisation is wide enough that greedy decoding does not collapse onto one token)
and deterministic for a given ``seed``.

Usage::

    python -m k9bench.tiny_model /tmp/tiny-qwen3vl
    python -m k9bench.tiny_model /tmp/tiny-qwen3vl --seed 1
    python -m k9bench.tiny_model /tmp/tiny-qwen3vl-hd64 --head_dim 64       # a head size vLLM's CPU attention takes
    python -m k9bench.tiny_model /tmp/tiny-qwen25vl --family qwen2_5_vl   # a tiny Qwen2.5-VL too
    python -m k9bench.tiny_model /tmp/tiny-internvl --family internvl      # transformers-native InternVL
    python -m k9bench.tiny_model /tmp/tiny-omni --family qwen2_5_omni      # Qwen2.5-Omni thinker (audio + video in)
    python -m k9bench.tiny_model /tmp/tiny-omni3 --family qwen3_omni       # Qwen3-Omni (MoE) thinker

The other families are built the same way (local tokenizer, the family's own processor classes
and a chat template written here). Which families have a tiny model, their ``--family`` spellings and
builders are rows of the one family table, :data:`k9bench.models.families.FAMILIES`
(:attr:`~k9bench.models.families.Family.tiny_builder`):

- ``internvl``: ``InternVLForConditionalGeneration`` with ``InternVLProcessor`` (GotOcr2 image
  processor, ``InternVLVideoProcessor`` with a fixed 56x56 frame size, ``<video>`` expanded to
  ``FrameN: <img><IMG_CONTEXT>...</img>`` per frame), as the Hub's ``OpenGVLab/InternVL3_5-*-HF``
  checkpoints are laid out (Qwen3 text model);
- ``qwen2_5_omni``: ``Qwen2_5OmniThinkerForConditionalGeneration`` (text output only) with
  ``Qwen2_5OmniProcessor`` (Qwen2-VL image/video processors and a Whisper feature extractor at
  16 kHz, 128 mel bins, 300 s window), which takes a video's soundtrack as audio-in-video input;
- ``qwen3_omni``: ``Qwen3OmniMoeThinkerForConditionalGeneration`` with ``Qwen3OmniMoeProcessor``
  (patch 16, a four-expert MoE text model; audio neither padded nor cut).

Every folder loads with ``AutoProcessor`` and ``AutoModelForImageTextToText``.

``--head_dim`` (Qwen3-VL only; default 16) sets the attention head size; the text model's
``mrope_section`` is scaled with it (16 -> [4, 2, 2], 64 -> [16, 8, 8]). vLLM's CPU attention
refuses head size 16, so the vLLM tests serve a ``--head_dim 64`` model (docs/vllm.md).

The parts: :mod:`k9bench.tiny_model.base` (tokenizer, template, weights), :mod:`k9bench.tiny_model.qwen_vl`
(Qwen3-VL, Qwen2.5-VL), :mod:`k9bench.tiny_model.families` (InternVL, the Omni thinkers).
"""


from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from k9bench.models import families as family_table  # not `families`: that name is this package's submodule
from k9bench.tiny_model.base import CHAT_TEMPLATE, EXTRA_TOKENS, SPECIAL_TOKENS, VOCAB_SIZE, build_tokenizer
from k9bench.tiny_model.families import (
    INTERNVL_CHAT_TEMPLATE,
    INTERNVL_FRAME_SIZE,
    INTERNVL_NAMED_TOKENS,
    INTERNVL_TOKENS,
    OMNI_AUDIO_SAMPLING_RATE,
    OMNI_CHAT_TEMPLATE,
    OMNI_NAMED_TOKENS,
    OMNI_TOKENS,
    build_tiny_internvl,
    build_tiny_qwen2_5omni,
    build_tiny_qwen3omni,
)
from k9bench.tiny_model.qwen_vl import DEFAULT_HEAD_DIM, build_config, build_tiny_qwen2_5vl, build_tiny_qwen3vl

log = logging.getLogger(__name__)


def head_dim_families() -> tuple[str, ...]:
    """Families whose builder takes ``head_dim`` (:attr:`k9bench.models.families.Family.tiny_head_dim`)."""
    return tuple(row.name for row in family_table.FAMILIES.values() if row.tiny_builder and row.tiny_head_dim)


def build_tiny(family: str, path: str | Path, seed: int = 0, head_dim: int | None = None) -> Path:
    """Build the tiny checkpoint of ``family`` (a family name or alias of :func:`k9bench.models.families.tiny_names`) at ``path``.

    ``head_dim`` (None: the family's own, 16) only for :func:`head_dim_families`; ValueError otherwise."""
    builder = family_table.tiny_builder(family)  # ValueError naming the choices
    name = family_table.tiny_names()[family]
    if head_dim is None:
        return builder(path, seed=seed)
    if name not in head_dim_families():
        raise ValueError(f"--head_dim is only for {', '.join(head_dim_families())}, not {name}")
    return builder(path, seed=seed, head_dim=head_dim)


def _head_dim(text: str) -> int:
    """``--head_dim``: a positive multiple of 8 (mrope_section splits half of it 2:1:1)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0 or value % 8:
        raise argparse.ArgumentTypeError(f"{value} is not a positive multiple of 8")
    return value


def main(argv: list[str] | None = None) -> int:
    from k9bench.cli import ArgumentParser  # the project's one parser: no abbreviated flags
    parser = ArgumentParser(prog="python -m k9bench.tiny_model", description=__doc__.split("\n\n")[0])
    parser.add_argument("output_dir", help="folder to write the checkpoint into")
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default: %(default)s)")
    names = family_table.tiny_names()
    aliases = [spelling for spelling, name in names.items() if spelling != name]
    parser.add_argument("--family", choices=tuple(names), default=family_table.DEMO_FAMILY,
                        help=f"model family (default: %(default)s; {', '.join(aliases)} are accepted spellings too)")
    parser.add_argument("--head_dim", type=_head_dim, default=None,
                        help=f"attention head size, a multiple of 8 ({', '.join(head_dim_families())} only; default: {DEFAULT_HEAD_DIM}; "
                             "64 for vLLM's CPU attention, which refuses 16)")
    args = parser.parse_args(argv)
    family = names[args.family]
    if args.head_dim is not None and family not in head_dim_families():
        parser.error(f"--head_dim is only for --family {', '.join(head_dim_families())}, not {args.family}")
    from k9bench.logs import basic_logging
    basic_logging(logging.INFO)
    from k9bench.stage import EXIT_USAGE, OutputError, check_output

    try:  # a folder under a file, or an existing file: one line, exit 2, before anything is built
        check_output(args.output_dir, flag="output_dir", folder=True)
    except OutputError as exc:
        log.error("%s", exc)
        return EXIT_USAGE
    out = build_tiny(family, args.output_dir, seed=args.seed, head_dim=args.head_dim)
    print(out)
    return 0


__all__ = [
    "CHAT_TEMPLATE", "DEFAULT_HEAD_DIM", "EXTRA_TOKENS",
    "INTERNVL_CHAT_TEMPLATE", "INTERNVL_FRAME_SIZE", "INTERNVL_NAMED_TOKENS", "INTERNVL_TOKENS", "OMNI_AUDIO_SAMPLING_RATE",
    "OMNI_CHAT_TEMPLATE", "OMNI_NAMED_TOKENS", "OMNI_TOKENS", "SPECIAL_TOKENS", "VOCAB_SIZE", "build_config", "build_tiny",
    "build_tiny_internvl", "build_tiny_qwen2_5omni", "build_tiny_qwen2_5vl", "build_tiny_qwen3omni", "build_tiny_qwen3vl",
    "build_tokenizer", "head_dim_families", "main",
]
