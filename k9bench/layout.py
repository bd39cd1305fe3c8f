"""Artifact names: every file a run writes is named here (the launcher asks this module)."""

from __future__ import annotations


def short_model_name(model: str) -> str:
    """The part of a model id after the last ``/`` (the launcher's file-name form)."""
    return str(model).rstrip("/").rsplit("/", 1)[-1]
