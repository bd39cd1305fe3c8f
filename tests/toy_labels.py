"""A stage the package does not have, written as docs/architecture.md's "Add a stage" says: this one module (its
typed header, its Stage, how the launcher builds it and plans it) and one entry, :data:`ENTRY`, in the stage
table. ``tests/test_pipeline_registry.py`` adds the entry after the judge and runs the launcher.

It stands for a labeller after the judge: it reads the run's eval file and writes ``labels_<tag>.json``, a
typed artifact of its own kind (``labels``, schema version 1) with its stage block, so that ``done()``, the
one header reader and the layout treat it as they treat the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from k9bench.artifact_io import write_json_atomic
from k9bench.headers.files import stamped
from k9bench.headers.kinds import Header
from k9bench.pipeline.stages import Step
from k9bench.stage import Stage
from k9bench.stage_table import StageEntry

EVENTS: list[str] = []
"""What the stage did, in order (the test reads and clears it)."""

RULE = "by size"
"""The stage's one setting (in its fingerprint: changing it reruns the stage)."""


@dataclass(frozen=True)
class LabelsHeader(Header):
    """``labels_<tag>.json``'s top level."""

    KIND: ClassVar[str] = "labels"

    rule: str | None = None
    """How the labels were made."""
    labelled: int | None = None
    """How many files were labelled."""
    labels: dict | None = None
    """File name -> its label."""


class LabelsStage(Stage):
    name = "labels"

    def __init__(self, evaluations: Path, output: Path):
        self.evaluations, self.output = evaluations, output

    def outputs(self) -> list[Path]:
        return [self.output]

    def inputs(self) -> list[Path]:
        return [self.evaluations]

    def fingerprint(self) -> dict:
        return {"rule": RULE}

    def run(self) -> int:
        EVENTS.append("labels runs")
        labels = {p.name: "big" if p.stat().st_size > 100 else "small" for p in self.inputs()}
        meta = {"rule": RULE, "labelled": len(labels), "labels": labels, "stage": self.stage_block()}
        write_json_atomic(self.outputs()[0], stamped("labels", self.name, meta))
        return 0


def build_parser():
    """Its own parser (the launcher shows a step's argv masked by it; a script would parse its command line with it)."""
    from k9bench.cli import ArgumentParser

    parser = ArgumentParser(prog="label_failures", description="Label the run's eval file (a toy stage).")
    parser.add_argument("--evaluations", type=Path, required=True, help="the eval JSON file")
    parser.add_argument("--output_file", type=Path, required=True, help="the labels JSON file")
    return parser


def build(step: Step) -> LabelsStage:
    """A plan step -> its Stage: the step's values (and any ``*_ARGS``) through its own parser."""
    args = build_parser().parse_values(step.values, step.extra)
    return LabelsStage(args.evaluations, args.output_file)


def steps(e: StageEntry, c) -> list[Step]:
    """Its plan step: the run's eval file in, its own file (named by its entry's ``files``) out."""
    f = c.layout.paths()
    return [Step(name=e.name, script=e.script, values={"--evaluations": f["eval"], "--output_file": f["labels"]},
                 inputs=[f["eval"]], outputs=[f["labels"]], depends=e.reruns_after)]


def check(settings, environ) -> None:
    """Its preflight: the launcher runs it before the first stage of a run that plans it."""
    EVENTS.append("labels preflight")


ENTRY = StageEntry("labels", "label_failures", "tests.toy_labels", "tests.toy_labels:build", "tests.toy_labels:steps",
                   checks=("tests.toy_labels:check",), follows=("judge",), reruns_after=("evaluate", "judge"),
                   kind="labels", schema_version=1, header="tests.toy_labels:LabelsHeader", files={"labels": "labels_{tag}.json"},
                   exits={0: "done"})
"""The one entry it adds to :data:`k9bench.stage_table.STAGES`, after the judge's."""
