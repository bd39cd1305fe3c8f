"""One accelerator policy for every model this project loads (the video LLM and the embedding model).

Five questions, one answer each:

- **device**: :func:`resolve_device` turns ``auto`` into ``cuda`` (a GPU is visible) or ``cpu``,
  and checks an explicit request up front: ``cuda`` / ``cuda:N`` without that GPU, or a device
  string torch does not know, is an :class:`AcceleratorError` before any weights are read.
- **dtype**: :func:`resolve_dtype` says what to load the weights in and why (returned as text,
  recorded in the artifact). An explicit dtype wins; then a ``--bf16`` style switch; then the
  caller's default for the device (bfloat16 on a GPU, float32 on a CPU unless the caller says
  otherwise: the scoring stage asks for float32 on a GPU too, see :mod:`k9bench.scoring.embedding`).
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
- **a model across devices**: :func:`parse_device_map` / :func:`parse_max_memory` read the HF
  backend's ``--device_map`` (accelerate's ``auto``/``balanced``/``balanced_low_0``/``sequential``, or a
  JSON map of module -> device) and ``--max_memory``; :func:`resolve_placement` checks the GPUs they name
  before any weights are read; :func:`placement_summary` says where a loaded model went (modules and
  layers per device) for the artifact.

Dtype names: every floating dtype torch names is accepted (:data:`DTYPE_NAMES`, as the reference's
``getattr(torch, name)``), the aliases ``half``/``float``/``double`` resolved to their canonical names
(:func:`canonical_dtype`); what was asked stays in :attr:`DtypeChoice.requested`.

Reconciled from the two copies that existed before (``k9bench/inference/hf/backend.py`` and
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
import glob
import importlib.util
import json
import logging
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable

log = logging.getLogger(__name__)

DTYPES = ("bfloat16", "float16", "float32", "float64", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
          "float8_e8m0fnu", "float4_e2m1fn_x2")
"""Concrete weight dtypes: every floating dtype torch names (``getattr(torch, name)``), by its canonical name."""

DTYPE_ALIASES = {"half": "float16", "float": "float32", "double": "float64"}
"""torch's other names of the same dtypes (``torch.half is torch.float16``)."""

DTYPE_NAMES = (*DTYPES, *DTYPE_ALIASES)
"""Every floating torch dtype name: what the reference accepts (it passes ``getattr(torch, name)`` on)."""

DTYPE_CHOICES = ("auto", *DTYPE_NAMES)
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


_GPU_DRIVER_MARKERS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/kfd", "/dev/dxg")
"""Files one of which a Linux machine that can run CUDA (NVIDIA, ROCm, WSL2) has, besides ``/dev/nvidiaN``."""


def cuda_absent_reason(env: Any = None) -> str | None:
    """Why no CUDA device can be visible to torch, known without importing it; None when unsure.

    Only what is sure: ``CUDA_VISIBLE_DEVICES`` set to ``""``/``-1`` (every GPU hidden), or a Linux machine
    with no GPU driver at all (no ``/dev/nvidia*``, ``/proc/driver/nvidia``, ROCm's ``/dev/kfd`` or WSL2's
    ``/dev/dxg``). Anything else is left to :func:`resolve_device`, after torch is imported."""
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
    if sys.platform.startswith("linux") and not any(os.path.exists(m) for m in _GPU_DRIVER_MARKERS) and not glob.glob("/dev/nvidia[0-9]*"):
        return "this machine has no GPU driver (no /dev/nvidia*, /proc/driver/nvidia, /dev/kfd or /dev/dxg)"
    return None


def device_problem_without_torch(requested: str | None, *, flag: str = "--device", env: Any = None) -> str | None:
    """The refusal :func:`resolve_device` would give, when it is sure without importing torch (a second, not
    the 10 s of ``import torch``); None when the request may work (then :func:`resolve_device` decides).

    ``cuda``/``cuda:N`` on a machine with no GPU driver or every GPU hidden, ``cuda:N`` beyond the GPUs
    ``CUDA_VISIBLE_DEVICES`` lists, ``mps`` anywhere but macOS."""
    env = os.environ if env is None else env
    text = str(requested or "").strip()
    match = _DEVICE_RE.match(text)
    if not match:
        return None  # auto, or a syntax error the flag's type and resolve_device report
    kind, index = match.group(1), match.group(2)
    if kind == "cuda":
        why = cuda_absent_reason(env)
        if why:
            return f"{flag} {text}: no CUDA device is available ({why})"
        visible = env.get("CUDA_VISIBLE_DEVICES")
        if index is not None and visible is not None:
            listed = [v for v in visible.split(",") if v.strip()]
            if int(index[1:]) >= len(listed):
                return f"{flag} {text}: at most {len(listed)} CUDA device(s) are visible (CUDA_VISIBLE_DEVICES={visible!r}; cuda:N counts from 0)"
    if kind == "mps" and sys.platform != "darwin":
        return f"{flag} mps: the MPS backend is Apple's (macOS only); this machine runs {sys.platform}"
    return None


def attention_problem_without_torch(requested: str | None, device: str | None, *, device_map: Any = None,
                                    env: Any = None) -> str | None:
    """The refusal :func:`resolve_attention` would give to an explicit flash_attention_2, when it is sure
    without importing torch: the device is ``cpu``/``mps`` (or ``auto`` where no CUDA device can be,
    :func:`cuda_absent_reason`), or flash-attn is not installed. None otherwise."""
    if requested != REFERENCE_ATTENTION:
        return None
    fix = "; pass --attn_implementation sdpa to run anyway"
    text = str(device or "auto").strip()
    if not device_map:
        if text.startswith(("cpu", "mps")):
            return f"--attn_implementation flash_attention_2 was asked for but it needs a CUDA GPU (device is {text}){fix}"
        why = cuda_absent_reason(env) if text == "auto" else None
        if why:
            return f"--attn_implementation flash_attention_2 was asked for but it needs a CUDA GPU (device auto is cpu here: {why}){fix}"
    if not flash_attn_available():
        return f"--attn_implementation flash_attention_2 was asked for but flash-attn is not installed{fix}"
    return None


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
    """The canonical name (:data:`DTYPES`: ``bfloat16``, ``float16``, ``float32``...) or ``auto`` (the checkpoint's dtype)."""
    reason: str
    """Where it came from (a flag, or the default for the device)."""
    explicit: bool
    """True when the user chose it (a flag), False for the policy default."""
    requested: str | None = None
    """The name as given (``half``, ``double``...; None: no dtype flag), recorded next to :attr:`name`."""

    def torch_dtype(self) -> Any:
        """The torch dtype object (or the string ``auto``) to hand to ``from_pretrained``."""
        return torch_dtype(self.name)


def canonical_dtype(name: str) -> str:
    """``"half"`` -> ``"float16"``; a canonical name or ``auto`` stays itself; anything else is refused."""
    if name == "auto" or name in DTYPES:
        return name
    if name in DTYPE_ALIASES:
        return DTYPE_ALIASES[name]
    raise AcceleratorError(f"dtype {name!r}: choose one of {', '.join(DTYPE_CHOICES)}")


def torch_dtype(name: str) -> Any:
    """``"bfloat16"`` (or ``"half"``...) -> the torch dtype; ``"auto"`` stays ``"auto"``."""
    name = canonical_dtype(name)
    if name == "auto":
        return "auto"
    import torch

    value = getattr(torch, name, None)
    if value is None:
        raise AcceleratorError(f"dtype {name!r} is not known to this torch {torch.__version__}")
    return value


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
        name = canonical_dtype(requested)
        if bf16 and name != "bfloat16":
            log.warning("%s ignored: %s %s given", bf16_flag, flag, requested)
        reason = flag if name == requested else f"{flag} {requested} (= {name})"
        return DtypeChoice(name, reason, True, requested)
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
# a model across devices (accelerate's device maps)

DEVICE_MAP_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")
"""accelerate's placement strategies (``auto`` is the reference's ``device_map="auto"``)."""

_SIZE_RE = re.compile(r"^\s*\d+(\.\d+)?\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_PLACE_RE = re.compile(r"^(cpu|disk|mps|cuda(:\d+)?)$")


def _place(value: Any, what: str) -> Any:
    """A device of a device map: an int GPU index, ``cuda[:N]``, ``cpu``, ``disk`` or ``mps``."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    if isinstance(value, str) and _PLACE_RE.match(value.strip()):
        return value.strip()
    raise AcceleratorError(f"{what}: device {value!r} is not a GPU index, cuda:N, cpu, disk or mps")


def parse_device_map(text: str, *, flag: str = "--device_map") -> str | dict[str, Any]:
    """``auto``/``balanced``/``balanced_low_0``/``sequential``, or a JSON object of module name -> device."""
    value = str(text).strip()
    if value in DEVICE_MAP_STRATEGIES:
        return value
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or not parsed:
        raise AcceleratorError(f"{flag} {text!r}: one of {', '.join(DEVICE_MAP_STRATEGIES)}, or a JSON object of module name -> "
                               "device, e.g. '{\"model.visual\": 0, \"model.language_model\": 1, \"lm_head\": 1}'")
    return {str(k): _place(v, f"{flag} {k!r}") for k, v in parsed.items()}


def parse_max_memory(text: str, *, flag: str = "--max_memory") -> dict[Any, str]:
    """Memory per device: JSON ``{"0": "40GiB", "cpu": "200GB"}`` or ``0=40GiB,cpu=2GiB``; GPU keys become ints."""
    value = str(text).strip()
    pairs: list[tuple[Any, Any]]
    if value.startswith("{"):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            raise AcceleratorError(f"{flag} is not valid JSON ({exc})") from None
        if not isinstance(parsed, dict):
            raise AcceleratorError(f"{flag} must be a JSON object of device -> size")
        pairs = list(parsed.items())
    else:
        pairs = []
        for part in filter(None, (p.strip() for p in value.split(","))):
            if "=" not in part:
                raise AcceleratorError(f"{flag} {part!r}: expected DEVICE=SIZE, e.g. 0=40GiB,cpu=2GiB")
            key, size = part.split("=", 1)
            pairs.append((key.strip(), size.strip()))
    if not pairs:
        raise AcceleratorError(f"{flag} {text!r}: no device given")
    out: dict[Any, str] = {}
    for key, size in pairs:
        device = _place(key, f"{flag} {key!r}")
        if isinstance(device, str) and device.startswith("cuda"):
            device = int(device.split(":")[1]) if ":" in device else 0
        if isinstance(size, int) and not isinstance(size, bool) and size > 0:
            size = str(size)
        if not isinstance(size, str) or not _SIZE_RE.match(size):
            raise AcceleratorError(f"{flag} {key!r}: size {size!r} is not like 40GiB, 200MB or a byte count")
        out[device] = size.replace(" ", "")
    return out


def placement_flags_problem(device: str | None, device_map: str | None, max_memory: str | None) -> str | None:
    """Why ``--device``/``--device_map``/``--max_memory`` together cannot mean one thing (one line), or None."""
    if not device_map:
        return "--max_memory needs --device_map (auto, balanced, balanced_low_0, sequential or a JSON map)" if max_memory else None
    if device not in (None, "", "auto"):
        return f"--device {device} and --device_map {device_map}: give one of them (--device_map places the model itself)"
    return None


def placement_gpus(device_map: str | dict, max_memory: dict | None) -> list[int]:
    """The GPU indices a device map (or the ``max_memory`` of a strategy) names."""
    values = list(device_map.values()) if isinstance(device_map, dict) else []
    values += list((max_memory or {}).keys())
    gpus = set()
    for v in values:
        if isinstance(v, int):
            gpus.add(v)
        elif isinstance(v, str) and v.startswith("cuda"):
            gpus.add(int(v.split(":")[1]) if ":" in v else 0)
    return sorted(gpus)


def resolve_placement(device_map: str | dict, max_memory: dict | None) -> str:
    """Check a placement against the visible GPUs (before any weights are read); return the device the
    dtype and attention policy follow: ``cuda`` when the model goes (partly) on a GPU, else ``cpu``."""
    import torch

    gpus = placement_gpus(device_map, max_memory)
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    missing = [g for g in gpus if g >= count]
    if missing:
        raise AcceleratorError(f"--device_map/--max_memory name GPU {missing[0]} but {count} CUDA device(s) are visible")
    if isinstance(device_map, str):
        return "cuda" if count else "cpu"
    return "cuda" if gpus else "cpu"


def _device_name(value: Any) -> str:
    return f"cuda:{value}" if isinstance(value, int) else str(value)


def placement_summary(model: Any) -> dict[str, Any] | None:
    """Where a device-mapped model went (None for a model on one device): modules per device and, for
    every stack of layers (decoder layers, vision blocks), how many sit on each device."""
    device_map = getattr(model, "hf_device_map", None)
    if not device_map:
        return None
    entries = sorted(((str(k), _device_name(v)) for k, v in device_map.items()), key=lambda kv: -len(kv[0]))

    def device_of(name: str) -> str | None:
        for key, device in entries:
            if key == "" or name == key or name.startswith(key + "."):
                return device
        return None

    devices: dict[str, int] = {}
    for _, device in entries:
        devices[device] = devices.get(device, 0) + 1
    stacks: dict[str, dict[str, int]] = {}
    for name, _ in model.named_modules():
        match = re.match(r"^(.*\.(?:layers|blocks))\.\d+$", name)
        if match:
            device = device_of(name) or "unplaced"
            counts = stacks.setdefault(match.group(1), {})
            counts[device] = counts.get(device, 0) + 1
    return {"modules_per_device": devices, "layers_per_device": stacks,
            "hf_device_map": {str(k): _device_name(v) for k, v in device_map.items()}}
