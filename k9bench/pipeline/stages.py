"""The launcher's steps: one :class:`Step` per stage of the plan (what the registry's entry made of the
launch settings), and the note a stage that ended "incomplete" leaves for the next run.

Every step runs as its entry's Stage object (:func:`k9bench.pipeline.registry.make_stage`), in this
process, through :func:`k9bench.stage.run_stage`: the Stage writes its own stage block into its artifact
and its ``done()`` reads it back. A step's ``argv`` is the record of how to run it by hand (the log's
``step X: <script> <argv>`` line) and what its Stage's settings are parsed from, with the user's
``*_ARGS`` in it (they are free-form, so only the stage's own parser can read them).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

RECORD_DIR = ".k9bench"
"""The folder (in OUT_DIR) of the launcher's notes on its stages (:func:`incomplete_marker`)."""


@dataclass
class Step:
    """One stage of a launcher run, as the plan holds it."""

    name: str
    """Its name in the plan and the log: its registry entry's name (an inference shard: ``inference-shard<i>``)."""
    script: str
    """The script or tool that runs it by hand (:attr:`k9bench.pipeline.registry.StageEntry.script`)."""
    argv: list[str]
    """Its command line by hand (and what its Stage's settings are parsed from)."""
    outputs: list[Path]
    inputs: list[Path] = field(default_factory=list)
    """Earlier outputs this stage reads (their content is part of its record)."""
    depends: tuple[str, ...] = ()
    """Steps whose running makes this one run again."""
    complete_codes: tuple[int, ...] = (0,)
    """Exit codes after which the stage counts as done."""
    incomplete_codes: tuple[int, ...] = ()
    """Exit codes after which the run goes on but the stage runs again next time (skipped judge entries...)."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """Typed values for a stage without a parser of its own (the demo's model family, the soundtracks)."""
    served: bool = False
    """Runs through the server the launcher starts (SERVE=vllm): its Stage is built again, with the server's
    URL, once the server answers (:meth:`with_url`)."""

    def with_url(self, placeholder: str, url: str) -> "Step":
        """This step with ``placeholder`` in its argv replaced by ``url`` (the started server's)."""
        return dataclasses.replace(self, argv=[url if a == placeholder else a for a in self.argv])


def incomplete_marker(step: Step) -> Path:
    """Where the launcher notes that a stage ended "incomplete" (judge entries skipped...): its next run retries."""
    return step.outputs[0].parent / RECORD_DIR / f"{step.outputs[0].name}.incomplete"


def mark_incomplete(step: Step, code: int | None) -> None:
    """Note (``code``) or clear (None) that the stage's last run left work to retry."""
    marker = incomplete_marker(step)
    if code is None:
        marker.unlink(missing_ok=True)
        return
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"{code}\n")
