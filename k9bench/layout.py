"""Artifact names: every file a run writes is named by its stage's entry in :data:`k9bench.stage_table.STAGES`
(:attr:`~k9bench.stage_table.StageEntry.files`), and this module works the paths out from them.

The launcher (``python -m k9bench.pipeline``) and the scripts' defaults take their file names
from here; ``python -m k9bench.layout --model M --max_frames F --max_samples N`` prints a run's.
Names are only names: readers (the report, the merge) take a run's settings from the files'
contents, not from them.

One run's files are tagged ``<tag> = <model short name>_mf<frames>_n<samples>`` in ``OUT_DIR`` (an
audio+video run, ``--audio`` / ``AUDIO=1``, is tagged ``<model short name>_mf<frames>_n<samples>_av``,
so it never shares a file with the video-only run of the same model and budget): ``raw_<tag>.json``
(``raw_<tag>.shard<i>of<n>.json`` for one task of a sharded run, ``.partial.jsonl`` beside a file being
written), ``sim_<tag>.json``, ``eval_<tag>.json``, ``judge_<tag>.json`` (``_skipped.json``, ``.meta.json``)
and the folder ``report_<tag>/``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from k9bench.stage_table import TableView, artifact_stages, run_files
from k9bench.validators import positive_int

RESULTS_DIR = "eval_results"
"""The folder of a run's artifacts by default: the launcher's ``OUT_DIR`` and a hand run's ``eval_video_llm.py``
without ``--output_file``."""

STAGES = TableView(artifact_stages)
"""Artifact stages, in pipeline order (the file-name prefixes ``raw``, ``sim``, ``eval``, ``judge``) -> the stage that
writes each: every ``<prefix>_{tag}.json`` of the stage table."""


def short_model_name(model: str) -> str:
    """The part of a model id after the last ``/`` (the launcher's file-name form)."""
    return str(model).rstrip("/").rsplit("/", 1)[-1]


AUDIO_SUFFIX = "_av"
"""The tag suffix of an audio+video run (the model hears the videos' soundtracks too)."""


def run_tag(model: str, max_frames: int, max_samples: int, audio: bool = False) -> str:
    """``<model short name>_mf<frames>_n<samples>`` (``..._av`` with ``audio``): names one run's artifacts."""
    return f"{short_model_name(model)}_mf{max_frames}_n{max_samples}{AUDIO_SUFFIX if audio else ''}"


def artifact_name(stage: str, model: str, max_frames: int, max_samples: int, audio: bool = False) -> str:
    """``<stage>_<tag>.json``, e.g. ``raw_Qwen3-VL-4B-Instruct_mf32_n10.json`` (``..._n10_av.json`` with ``audio``)."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; one of {', '.join(STAGES)}")
    return f"{stage}_{run_tag(model, max_frames, max_samples, audio)}.json"


def shard_path(output: str | Path, num_shards: int, shard_id: int) -> Path:
    """``x.json`` -> ``x.shard{i}of{n}.json`` for a sharded run (unchanged when not sharded or already so named)."""
    output = Path(output)
    tag = f"shard{shard_id}of{num_shards}"
    if num_shards <= 1 or tag in output.name:
        return output
    suffix = output.suffix or ".json"
    stem = output.name[: -len(output.suffix)] if output.suffix else output.name
    return output.with_name(f"{stem}.{tag}{suffix}")


def next_stage_path(input_path: str | Path, stage: str) -> Path:
    """The default output of ``stage`` beside ``input_path``: a ``raw_``/``sim_``/``eval_`` prefix is
    replaced (``raw_X.json`` -> ``sim_X.json``); other names get ``_<stage>`` before the suffix
    (``judge`` drops the ``.json`` of any suffix, as subjective_evals.py always did)."""
    p = Path(input_path)
    for prefix in ("raw_", "sim_", "eval_"):
        if p.name.startswith(prefix):
            rest = p.name[len(prefix):]
            if stage == "judge":
                rest = rest[:-5] if rest.endswith(".json") else rest
                return p.with_name(f"judge_{rest}.json")
            return p.with_name(f"{stage}_{rest}")
    if stage == "judge":
        stem = p.name[:-5] if p.name.endswith(".json") else p.name
        return p.with_name(f"judge_{stem}.json")
    return p.with_name(f"{p.stem}_{stage}{p.suffix or '.json'}")


def skipped_path(judge_output: str | Path) -> Path:
    """``<judge output stem>_skipped.json`` beside the judge output."""
    p = Path(judge_output)
    stem = p.name[:-5] if p.name.endswith(".json") else p.name
    return p.with_name(f"{stem}_skipped.json")


def checkpoint_path(final: str | Path) -> Path:
    """The append-only checkpoint log beside a final artifact: ``x.json`` -> ``x.json.partial.jsonl``."""
    p = Path(final)
    return p.with_name(p.name + ".partial.jsonl")


def _name_re() -> re.Pattern:
    stages = "|".join(map(re.escape, STAGES))
    return re.compile(rf"^(?P<stage>{stages})_(?P<model>.+?)_mf(?P<frames>-?\d+)_n(?P<samples>-?\d+)(?P<av>_av)?(?P<rest>[._].*)?$")


@dataclass(frozen=True)
class ArtifactName:
    """What a launcher-style file name says. Only a label: readers take settings from contents."""

    stage: str
    """A prefix of :data:`STAGES` (``raw``, ``sim``, ``eval``, ``judge``)."""
    model: str
    """The model's short name."""
    max_frames: int
    """The frame budget in the name."""
    max_samples: int
    """The question count asked for in the name."""
    audio: bool = False
    """The name carries the audio+video suffix ``_av``."""


def parse_artifact_name(path: str | Path) -> ArtifactName | None:
    """The parts of ``<stage>_<model>_mf<F>_n<N>[...].json``, or None for any other name."""
    name = Path(path).name
    stem = name[:-5] if name.endswith(".json") else name
    match = _name_re().match(stem)
    if not match:
        return None
    return ArtifactName(stage=match["stage"], model=match["model"], max_frames=int(match["frames"]), max_samples=int(match["samples"]),
                        audio=bool(match["av"]))


@dataclass(frozen=True)
class RunLayout:
    """Every path of one launcher run in ``out_dir``."""

    out_dir: str
    """The run's output folder (``OUT_DIR``)."""
    model: str
    """Model id or path (``MODEL_NAME``)."""
    max_frames: int
    """Frame budget (``MAX_FRAMES``)."""
    max_samples: int
    """Question count asked for (``MAX_SAMPLES``)."""
    audio: bool = False
    """The model hears the soundtracks too (``AUDIO=1``): every name gets the ``_av`` tag."""

    @property
    def tag(self) -> str:
        return run_tag(self.model, self.max_frames, self.max_samples, self.audio)

    def path(self, stage: str) -> Path:
        return Path(self.out_dir) / artifact_name(stage, self.model, self.max_frames, self.max_samples, self.audio)

    def paths(self, num_shards: int = 1) -> dict[str, Path]:
        """Every file (or folder) of the run in :attr:`out_dir`, by role (the stage table's
        :attr:`~k9bench.stage_table.StageEntry.files`; the shard files with ``{i}`` for the shard number)."""
        return {role: Path(self.out_dir) / name for role, name in run_files(self.tag, num_shards).items()}


def main(argv: list[str] | None = None) -> int:
    """Print a run's artifact paths, one ``role: path`` per line."""
    from k9bench.cli import ArgumentParser  # the project's one parser: no abbreviated flags
    parser = ArgumentParser(prog="python -m k9bench.layout", description="Print the artifact paths of one launcher run.")
    parser.add_argument("--out_dir", default=RESULTS_DIR, help="the run's OUT_DIR (default: %(default)s)")
    parser.add_argument("--model", required=True, help="MODEL_NAME (its short name names the files)")
    parser.add_argument("--max_frames", type=int, required=True, help="MAX_FRAMES")
    parser.add_argument("--max_samples", type=int, required=True, help="MAX_SAMPLES")
    parser.add_argument("--num_shards", type=positive_int, default=1, help="NUM_SHARDS (default: %(default)s)")
    parser.add_argument("--audio", action="store_true", help="an audio+video run (AUDIO=1): the tag ends in _av")
    args = parser.parse_args(argv)
    if not short_model_name(args.model):
        parser.error("--model is empty")
    layout = RunLayout(out_dir=args.out_dir, model=args.model, max_frames=args.max_frames, max_samples=args.max_samples,
                       audio=args.audio)
    for role, path in layout.paths(args.num_shards).items():
        if role != "shards" or args.num_shards > 1:
            print(f"{role:<14}{path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
