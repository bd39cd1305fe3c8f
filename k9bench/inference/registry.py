"""The backends ``--backend`` can name: one entry each, importable without torch or any backend's packages.

Each entry says where the class is (``"module:Class"``, imported only when chosen, by
:func:`k9bench.inference.backend.backend_class`) and the facts the checks before a run need without
importing it: which section of :class:`k9bench.inference.settings.RunConfig` holds the backend's own
flags, and whether it loads the checkpoint's weights on this machine (then a local model path and the
checkpoint's ``config.json`` are checked before anything loads). ``--backend``'s choices are this table's
keys (:data:`k9bench.inference.settings.BACKEND_NAMES`).

Nothing here imports another module of the project, so any module may import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BackendEntry:
    """One registered backend."""

    target: str
    """``"module:Class"``: the :class:`k9bench.inference.backend.Backend` subclass."""
    settings_section: str
    """The :class:`~k9bench.inference.settings.RunConfig` attribute holding its own flags (written as
    ``inference.backend_settings`` and compared on resume)."""
    local_weights: bool
    """True: it loads the checkpoint on this machine (``--model_name_or_path`` is a Hub id or a folder here)."""


REGISTRY: dict[str, BackendEntry] = {
    "hf": BackendEntry("k9bench.inference.hf:HFBackend", "hf", local_weights=True),
    "openai": BackendEntry("k9bench.inference.openai_backend:OpenAIBackend", "openai", local_weights=False),
    "vllm": BackendEntry("k9bench.inference.vllm_backend:VLLMBackend", "vllm", local_weights=True),
}
"""``--backend`` name -> :class:`BackendEntry`."""

BACKEND_NAMES: tuple[str, ...] = tuple(REGISTRY)
"""The registered names, in registry order."""


def entry(name: str) -> BackendEntry:
    """The entry of ``name``; ``KeyError`` naming the choices when unknown."""
    found = REGISTRY.get(name)
    if found is None:
        raise KeyError(f"unknown backend {name!r}; choose one of {', '.join(sorted(REGISTRY))}")
    return found


def backend_settings(config: Any) -> Any:
    """The run's own settings section of its backend (``config.hf``, ``config.openai``...)."""
    return getattr(config, entry(config.model.backend).settings_section)


__all__ = ["BACKEND_NAMES", "BackendEntry", "REGISTRY", "backend_settings", "entry"]
