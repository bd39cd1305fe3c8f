"""The ``--backend vllm`` flags: one frozen dataclass, a section of
:class:`k9bench.inference.settings.RunConfig` named by the registry's vllm row. Importable without vLLM."""

from __future__ import annotations

from dataclasses import dataclass

from k9bench.settings import setting
from k9bench.validators import fraction, positive_int


@dataclass(frozen=True)
class VLLMSettings:
    """The ``--backend vllm`` flags (vLLM in-process; dtype from ``--torch_dtype``, see docs/vllm.md)."""

    tensor_parallel: int = setting(1, "--backend vllm: GPUs per model copy (vLLM's tensor_parallel_size; default: %(default)s)", type=positive_int)
    gpu_memory_utilization: float = setting(0.9, "--backend vllm: share of each GPU's memory vLLM may take, weights and KV cache, "
                                            "in (0, 1] (default: %(default)s)", type=fraction)
    max_model_len: int | None = setting(None, "--backend vllm: context length in tokens (default: the checkpoint's)", type=positive_int)
    enforce_eager: bool = setting(False, "--backend vllm: no CUDA graphs (slower decode, faster start; default: CUDA graphs on)",
                                  action="store_true")
