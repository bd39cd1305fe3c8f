"""Prompt texts, stored as data files beside this module.

``system_prompt.txt``  the inference system prompt (SPEC section 3: watch the whole video,
                       reason step by step, reply as JSON with ``reasoning`` and ``answer``)
``judge_prompt.txt``   the LLM-as-judge prompt (SPEC section 5), a ``str.format`` template
                       with ``{question}``, ``{correct_answer}`` and ``{model_output}``

Both were written for this project. A user-supplied file replaces a prompt verbatim.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path

BUILTIN = ("system_prompt", "judge_prompt")


def load_prompt(name: str, override: str | Path | None = None) -> tuple[str, str]:
    """Return ``(text, source)`` for a built-in prompt, or the file ``override`` verbatim (its UTF-8 bytes as
    they are: line endings untouched).

    ``source`` is ``builtin:<name>`` or the override's path, for the artifact's record. An override that
    is missing, not a regular file, not UTF-8 or empty raises :class:`k9bench.artifacts.ArtifactError`
    (one line naming the file; exit 2).
    """
    if override:
        from k9bench.artifact_io import read_text

        path = Path(override)
        return read_text(path), str(path)
    if name not in BUILTIN:
        raise KeyError(f"unknown built-in prompt {name!r}")
    text = resources.files(__name__).joinpath(f"{name}.txt").read_text(encoding="utf-8")
    return text.rstrip("\n"), f"builtin:{name}"


def sha256(text: str) -> str:
    """Hex SHA-256 of a prompt text (recorded in artifacts)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
