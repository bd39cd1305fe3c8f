"""The ``--backend hf`` flags: one frozen dataclass, a section of :class:`k9bench.inference.settings.RunConfig` named
by the registry's hf row. Importable without torch."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from k9bench.models.accelerator import ATTN_IMPLEMENTATIONS
from k9bench.settings import setting
from k9bench.validators import device_name


def device_map_value(text: str) -> str:
    """``--device_map``: a strategy name, or a JSON object of module -> device (kept as canonical JSON text)."""
    from k9bench.models.accelerator import AcceleratorError, parse_device_map

    try:
        value = parse_device_map(text)
    except AcceleratorError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def max_memory_value(text: str) -> str:
    """``--max_memory``: JSON or ``DEV=SIZE,...`` (kept as canonical JSON text)."""
    from k9bench.models.accelerator import AcceleratorError, parse_max_memory

    try:
        value = parse_max_memory(text)
    except AcceleratorError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return json.dumps({str(k): v for k, v in value.items()}, sort_keys=True)



@dataclass(frozen=True)
class HFSettings:
    """The transformers backend's own flags (dtype and remote code are the shared :class:`~k9bench.inference.settings.ModelSettings`')."""

    attn_implementation: str | None = setting(
        None, "attention kernel (default: flash_attention_2 on GPU when flash-attn is installed, otherwise sdpa with a warning)",
        choices=ATTN_IMPLEMENTATIONS)
    device: str = setting("auto", "cuda, cuda:1, cpu, mps, or auto (default: %(default)s)", type=device_name)
    device_map: str | None = setting(None, "place the model across devices: auto, balanced, balanced_low_0 or sequential "
                                     "(accelerate's strategies; auto is the reference's device_map=\"auto\"), or a JSON object of "
                                     "module -> device (0, \"cuda:1\", \"cpu\", \"disk\"); default: the whole model on --device",
                                     type=device_map_value, metavar="auto|balanced|JSON")
    max_memory: str | None = setting(None, "with --device_map: memory per device, '{\"0\": \"40GiB\", \"cpu\": \"200GB\"}' or "
                                     "0=40GiB,cpu=2GiB", type=max_memory_value, metavar="DEV=SIZE,...")


__all__ = ["HFSettings", "device_map_value", "max_memory_value"]
