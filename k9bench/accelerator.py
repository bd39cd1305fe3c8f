"""One accelerator policy for every model this project loads (the video LLM and the embedding model).

Four questions, one answer each:

- **device**: :func:`resolve_device` turns ``auto`` into ``cuda`` (a GPU is visible) or ``cpu``,
  and checks an explicit request up front: ``cuda`` / ``cuda:N`` without that GPU, or a device
  string torch does not know, is an :class:`AcceleratorError` before any weights are read.
- **dtype**: :func:`resolve_dtype` says what to load the weights in and why (returned as text,
  recorded in the artifact). An explicit dtype wins; then a ``--bf16`` style switch; then the
  caller's default for the device (bfloat16 on a GPU, float32 on a CPU unless the caller says
  otherwise: the scoring stage asks for float32 on a GPU too, see :mod:`k9bench.embedding`).
  ``auto`` is transformers' ``auto`` (the checkpoint's own dtype); a flag whose ``auto`` means
  "the policy default" passes ``None``.
- **attention**: :func:`resolve_attention` picks the kernel. By default flash_attention_2 (the
  reference's kernel) on a CUDA GPU with flash-attn installed, otherwise sdpa, and the reason is a
  warning that callers log and record. An explicit flash_attention_2 that cannot run is an error,
  never a silent downgrade. :func:`load_with_attention` loads a model and, only when the kernel
  was the default choice, retries once with sdpa if the model refuses flash_attention_2 (logged
  and recorded as a warning too).
- **out of memory**: :func:`is_out_of_memory` recognises torch's out-of-memory errors (CUDA's
  class, and the RuntimeError text other backends raise); :func:`free_accelerator_memory` releases
  what can be released before a retry.

Reconciled from the two copies that existed before (``k9bench/inference/hf.py`` and
``k9bench/scoring.py``):

- device: hf passed an explicit ``cuda`` through unchecked (the failure came later, from deep
  inside transformers); scoring refused it when no GPU was visible. Now every explicit request is
  checked (``cuda:N`` against the device count too), in one place.
- attention on a CPU: hf asked for sdpa, scoring left the model's own default (``None``). Now
  sdpa in both, with a recorded warning, so the artifact names the kernel actually asked for.
- flash_attention_2 that fails at load time: scoring fell back to sdpa after a failed load of an
  automatic choice, hf did not. Now both may, only for the automatic choice, and it is recorded.
- an explicit kernel other than flash_attention_2: hf said nothing, scoring noted the difference
  from the reference. Now both get a note (``AttentionChoice.note``), not a warning.
- out of memory: hf checked the CUDA error class and the message, scoring only the message. Now
  both.

This module imports torch lazily: importing it costs nothing.
"""

from __future__ import annotations

import gc
import importlib.util
import logging
import re
from dataclasses import dataclass
from typing import Any, Callable

log = logging.getLogger(__name__)

DTYPES = ("bfloat16", "float16", "float32")
"""Concrete weight dtypes."""

DTYPE_CHOICES = ("auto", *DTYPES)
"""What a dtype flag accepts (``auto`` as transformers means it: the checkpoint's dtype)."""

ATTN_IMPLEMENTATIONS = ("flash_attention_2", "sdpa", "eager", "flash_attention_3", "flex_attention")
"""Attention kernels transformers accepts."""

REFERENCE_DTYPE = "bfloat16"
"""The reference's weight dtype on a GPU."""

REFERENCE_ATTENTION = "flash_attention_2"
"""The reference's attention kernel."""

FALLBACK_ATTENTION = "sdpa"
"""The kernel used when flash_attention_2 is not available."""

_DEVICE_RE = re.compile(r"^(cpu|mps|cuda)(:\d+)?$")


class AcceleratorError(Exception):
    """A device, dtype or attention request that cannot be honoured; the message says which and why."""


def flash_attn_available() -> bool:
    """True when the flash-attn package can be imported."""
    return importlib.util.find_spec("flash_attn") is not None


def on_gpu(device: str) -> bool:
    """True for a CUDA device string."""
    return str(device).startswith("cuda")


# ---------------------------------------------------------------------------
# device


def resolve_device(requested: str | None) -> str:
    """``auto`` (or None/empty) -> ``cuda`` when a GPU is visible, else ``cpu``.

    An explicit request is checked: ``cuda``/``cuda:N`` needs that GPU, ``mps`` needs Apple's
    backend, anything else than ``cpu``/``cuda[:N]``/``mps`` is refused.
    """
    import torch

    if requested in (None, "", "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    text = str(requested).strip()
    match = _DEVICE_RE.match(text)
    if not match:
        raise AcceleratorError(f"device {requested!r}: expected auto, cpu, cuda, cuda:N or mps")
    kind, index = match.group(1), match.group(2)
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise AcceleratorError(f"device {text} was asked for but no CUDA device is available")
        count = torch.cuda.device_count()
        if index is not None and int(index[1:]) >= count:
            raise AcceleratorError(f"device {text} was asked for but only {count} CUDA device(s) are visible")
    if kind == "mps":
        backend = getattr(torch.backends, "mps", None)
        if backend is None or not backend.is_available():
            raise AcceleratorError("device mps was asked for but the MPS backend is not available")
    return text


# ---------------------------------------------------------------------------
# dtype


@dataclass(frozen=True)
class DtypeChoice:
    """The weight dtype to load with and why."""

    name: str
    """``bfloat16``, ``float16``, ``float32`` or ``auto`` (the checkpoint's dtype)."""
    reason: str
    """Where it came from (a flag, or the default for the device)."""
    explicit: bool
    """True when the user chose it (a flag), False for the policy default."""

    def torch_dtype(self) -> Any:
        """The torch dtype object (or the string ``auto``) to hand to ``from_pretrained``."""
        return torch_dtype(self.name)


def torch_dtype(name: str) -> Any:
    """``"bfloat16"`` -> ``torch.bfloat16``; ``"auto"`` stays ``"auto"``."""
    if name == "auto":
        return "auto"
    if name not in DTYPES:
        raise AcceleratorError(f"dtype {name!r}: choose one of {', '.join(DTYPE_CHOICES)}")
    import torch

    return getattr(torch, name)


def resolve_dtype(
    requested: str | None,
    device: str,
    *,
    bf16: bool | None = None,
    flag: str = "--torch_dtype",
    bf16_flag: str = "--bf16",
    gpu_default: str = REFERENCE_DTYPE,
    gpu_default_reason: str = "default on GPU (the reference's bf16)",
    cpu_default: str = "float32",
) -> DtypeChoice:
    """The dtype to load with: ``requested`` wins, then ``bf16`` (True/False), then the device default.

    ``requested=None`` means "no dtype flag given"; ``"auto"`` is transformers' auto (the checkpoint's
    dtype). ``flag``/``bf16_flag`` name the caller's flags in the reason.
    """
    if requested not in (None, ""):
        if requested not in DTYPE_CHOICES:
            raise AcceleratorError(f"{flag} {requested!r}: choose one of {', '.join(DTYPE_CHOICES)}")
        if bf16 and requested != "bfloat16":
            log.warning("%s ignored: %s %s given", bf16_flag, flag, requested)
        return DtypeChoice(requested, flag, True)
    if bf16 is True:
        return DtypeChoice("bfloat16", bf16_flag, True)
    if bf16 is False:
        return DtypeChoice("float32", f"{bf16_flag} False", True)
    for value in (gpu_default, cpu_default):
        if value not in DTYPES:
            raise AcceleratorError(f"default dtype {value!r}: choose one of {', '.join(DTYPES)}")
    if on_gpu(device):
        return DtypeChoice(gpu_default, gpu_default_reason, False)
    return DtypeChoice(cpu_default, f"default on {str(device).split(':')[0].upper()}", False)


# ---------------------------------------------------------------------------
# attention


@dataclass(frozen=True)
class AttentionChoice:
    """The attention kernel to ask for, and what to tell the user about it."""

    implementation: str
    """Kernel name handed to ``from_pretrained(attn_implementation=...)``."""
    requested: str | None
    """What was asked (None: the default)."""
    warning: str | None = None
    """Why the reference's kernel is not used (log it as a warning and record it), or None."""
    note: str | None = None
    """A difference from the reference the user asked for (record it; no warning)."""

    @property
    def explicit(self) -> bool:
        return self.requested is not None


def resolve_attention(requested: str | None, device: str) -> AttentionChoice:
    """Default: flash_attention_2 on a CUDA GPU with flash-attn installed, else sdpa with a warning.

    ``requested`` None/empty/``auto`` is the default. An explicit flash_attention_2 that cannot work
    (no CUDA device, flash-attn not installed) raises :class:`AcceleratorError`.
    """
    gpu = on_gpu(device)
    if requested not in (None, "", "auto"):
        if requested not in ATTN_IMPLEMENTATIONS:
            raise AcceleratorError(f"attention implementation {requested!r}: choose one of {', '.join(ATTN_IMPLEMENTATIONS)}")
        if requested == REFERENCE_ATTENTION and not (gpu and flash_attn_available()):
            why = "flash-attn is not installed" if gpu else f"it needs a CUDA GPU (device is {device})"
            raise AcceleratorError(f"--attn_implementation flash_attention_2 was asked for but {why}; "
                                   "pass --attn_implementation sdpa to run anyway")
        note = None if requested == REFERENCE_ATTENTION else f"attention {requested} asked for (the reference uses {REFERENCE_ATTENTION})"
        return AttentionChoice(requested, requested, note=note)
    if not gpu:
        return AttentionChoice(FALLBACK_ATTENTION, None,
                               warning=f"{REFERENCE_ATTENTION} (the reference's kernel) needs a CUDA GPU; using {FALLBACK_ATTENTION} on {device}")
    if not flash_attn_available():
        return AttentionChoice(FALLBACK_ATTENTION, None,
                               warning=f"flash-attn is not installed; using {FALLBACK_ATTENTION} instead of {REFERENCE_ATTENTION} (the reference's kernel)")
    return AttentionChoice(REFERENCE_ATTENTION, None)


def load_with_attention(load: Callable[[str], Any], choice: AttentionChoice, *, what: str = "model") -> tuple[Any, AttentionChoice]:
    """``load(kernel)`` with the chosen kernel; return ``(model, the choice actually used)``.

    When flash_attention_2 was the *default* choice and the load refuses it (ImportError or
    ValueError: the architecture does not support it, a broken flash-attn build), the load is
    retried once with sdpa and the returned choice carries a warning saying so (the caller logs
    and records it). An explicit choice is never replaced: its error propagates.
    """
    try:
        return load(choice.implementation), choice
    except (ImportError, ValueError) as exc:
        if choice.explicit or choice.implementation != REFERENCE_ATTENTION:
            raise
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        warning = f"{REFERENCE_ATTENTION} could not be used for {what} ({first}); using {FALLBACK_ATTENTION} instead"
        log.warning("%s", warning)
        fallback = AttentionChoice(FALLBACK_ATTENTION, None, warning=warning)
        return load(FALLBACK_ATTENTION), fallback


def attention_in_use(model: Any) -> str | None:
    """The kernel a loaded transformers (or sentence-transformers) model reports, or None."""
    for candidate in (model, getattr(model, "transformers_model", None)):
        config = getattr(candidate, "config", None)
        value = getattr(config, "_attn_implementation", None) if config is not None else None
        if value:
            return str(value)
    return None


# ---------------------------------------------------------------------------
# out of memory


def is_out_of_memory(exc: BaseException) -> bool:
    """True for an accelerator out-of-memory error (CUDA's error class, or the message other backends use)."""
    try:
        import torch

        oom_class = getattr(torch.cuda, "OutOfMemoryError", None)
    except ImportError:  # pragma: no cover - torch is a hard requirement
        oom_class = None
    if oom_class is not None and isinstance(exc, oom_class):
        return True
    return isinstance(exc, (RuntimeError, MemoryError)) and "out of memory" in str(exc).lower()


def free_accelerator_memory() -> None:
    """Collect garbage and release cached GPU memory (before retrying smaller after running out)."""
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception as exc:  # pragma: no cover - best effort, but never silent
        log.debug("could not release GPU memory: %s", exc)


# ---------------------------------------------------------------------------
# the whole plan, for the artifact


@dataclass(frozen=True)
class AcceleratorPlan:
    """Device, dtype and attention decided for one model load (``to_dict`` goes into the artifact)."""

    device: str
    """Device the model is loaded on."""
    dtype: DtypeChoice
    """Weight dtype and why."""
    attention: AttentionChoice
    """Attention kernel and why."""

    @property
    def warnings(self) -> list[str]:
        return [w for w in (self.attention.warning,) if w]

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "dtype": self.dtype.name,
            "dtype_reason": self.dtype.reason,
            "attn_implementation": self.attention.implementation,
            "attn_implementation_requested": self.attention.requested,
            "flash_attn_installed": flash_attn_available(),
            "warnings": self.warnings,
        }


def plan_accelerator(
    device: str | None,
    dtype: str | None,
    attention: str | None,
    *,
    bf16: bool | None = None,
    **dtype_policy: Any,
) -> AcceleratorPlan:
    """Resolve all three at once (``dtype_policy``: the keyword arguments of :func:`resolve_dtype`)."""
    used = resolve_device(device)
    return AcceleratorPlan(device=used, dtype=resolve_dtype(dtype, used, bf16=bf16, **dtype_policy),
                           attention=resolve_attention(attention, used))
