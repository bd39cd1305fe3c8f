"""Artifact names: every file a run writes is named here, and nowhere else.

The launcher (``run_eval.sh``) asks this module for its file names
(``python -m k9bench.layout --model M --max_frames F --max_samples N``) instead of building
them itself; the scripts use the same functions for their defaults. Names are only names:
readers (the report, the merge) take a run's settings from the files' contents, not from them.

Layout of one run ``<tag> = <model short name>_mf<frames>_n<samples>`` in ``OUT_DIR``::

    raw_<tag>.json               eval_video_llm.py        (+ raw_<tag>.json.partial.jsonl checkpoint while running)
    raw_<tag>.shard<i>of<n>.json one task of a sharded run
    sim_<tag>.json               evaluate_results.py --mode calculate
    eval_<tag>.json              evaluate_results.py --mode evaluate
    judge_<tag>.json             subjective_evals.py      (+ judge_<tag>_skipped.json, .meta.json)
    report_<tag>/                evaluate_results.py --mode report
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass
from pathlib import Path

STAGES = ("raw", "sim", "eval", "judge")
"""Artifact stages, in pipeline order (the file-name prefixes)."""


def short_model_name(model: str) -> str:
    """The part of a model id after the last ``/`` (the launcher's file-name form)."""
    return str(model).rstrip("/").rsplit("/", 1)[-1]


def run_tag(model: str, max_frames: int, max_samples: int) -> str:
    """``<model short name>_mf<frames>_n<samples>``: names one run's artifacts."""
    return f"{short_model_name(model)}_mf{max_frames}_n{max_samples}"


def artifact_name(stage: str, model: str, max_frames: int, max_samples: int) -> str:
    """``<stage>_<tag>.json``, e.g. ``raw_Qwen3-VL-4B-Instruct_mf32_n10.json``."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; one of {', '.join(STAGES)}")
    return f"{stage}_{run_tag(model, max_frames, max_samples)}.json"


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

    @property
    def tag(self) -> str:
        return run_tag(self.model, self.max_frames, self.max_samples)

    def path(self, stage: str) -> Path:
        return Path(self.out_dir) / artifact_name(stage, self.model, self.max_frames, self.max_samples)

    def shell_vars(self, num_shards: int = 1) -> dict[str, str]:
        """The launcher's variables: MODEL_SHORT TAG RAW SIM EVAL JUDGE JUDGE_SKIPPED REPORT_DIR SHARD_PATTERN."""
        raw = self.path("raw")
        judge = self.path("judge")
        return {
            "MODEL_SHORT": short_model_name(self.model),
            "TAG": self.tag,
            "RAW": str(raw),
            "SIM": str(self.path("sim")),
            "EVAL": str(self.path("eval")),
            "JUDGE": str(judge),
            "JUDGE_SKIPPED": str(skipped_path(judge)),
            "REPORT_DIR": str(Path(self.out_dir) / f"report_{self.tag}"),
            # the launcher substitutes the shard number for {i}
            "SHARD_PATTERN": str(raw.with_name(f"raw_{self.tag}.shard{{i}}of{num_shards}.json")),
        }


def main(argv: list[str] | None = None) -> int:
    """Print the launcher's file names as shell assignments (``eval "$(python -m k9bench.layout ...)"``)."""
    parser = argparse.ArgumentParser(prog="python -m k9bench.layout", description="Print a run's artifact paths as shell variables.")
    parser.add_argument("--out_dir", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--max_frames", type=int, required=True)
    parser.add_argument("--max_samples", type=int, required=True)
    parser.add_argument("--num_shards", type=int, default=1)
    args = parser.parse_args(argv)
    layout = RunLayout(out_dir=args.out_dir, model=args.model, max_frames=args.max_frames, max_samples=args.max_samples)
    for key, value in layout.shell_vars(args.num_shards).items():
        print(f"{key}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
