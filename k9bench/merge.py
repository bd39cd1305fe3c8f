"""Merge the raw files of a sharded inference run (a SLURM array) into one raw file.

Each array task runs ``eval_video_llm.py --num_shards N --shard_id i`` and writes its
own raw file; this joins them into the raw JSON of SPEC section 2, as if one job had
run every question, so scoring, the judge and the report need nothing special.

Usage::

    python -m k9bench.merge --output_file raw_model_mf32_n-1.json \\
        raw_model_mf32_n-1.shard0of4.json raw_model_mf32_n-1.shard1of4.json ...

Refused (non-zero exit, message naming the file): a missing or unfinished shard, a
file that is not a raw/sim file, the same question in two shards with different
content, shards of different models or frame budgets. Records are written in idx
order; the output is written atomically and carries the merge's provenance plus,
under ``merged_from``, each shard's path, record count and top-level keys.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

from k9bench.artifacts import (
    ArtifactError,
    QuestionRecord,
    RecordsArtifact,
    checkpoint_path,
    load_records_artifact,
    provenance,
    write_json_atomic,
)
from k9bench.cli import add_logging_args, setup_logging

log = logging.getLogger(__name__)

_PER_RUN_KEYS = ("model_name", "max_frames")
"""Record fields that must agree across shards (one run, one model, one frame budget)."""

_VOLATILE_RECORD_KEYS = ("timestamp",)
"""Record fields ignored when the same question appears in two shards."""


class MergeError(ArtifactError):
    """The shards cannot be merged into a trustworthy raw file; the message names the file."""


@dataclass
class MergeResult:
    """What :func:`merge_shards` produced."""

    artifact: RecordsArtifact
    """The merged raw artifact."""
    duplicates: int
    """Questions present, identically, in more than one shard (kept once)."""
    failed: int
    """Failed records (with ``error``) in the merged file."""


def _load_shard(path: Path) -> RecordsArtifact:
    if not path.exists():
        partial = checkpoint_path(path)
        if partial.exists():
            raise MergeError(f"{path}: shard not finished (only its checkpoint {partial.name} exists); rerun that array task")
        raise MergeError(f"{path}: shard file missing; did every array task finish?")
    art = load_records_artifact(path)
    if art.stage == "eval":
        raise MergeError(f"{path}: is an eval file; merge the raw shard files written by eval_video_llm.py")
    return art


def _comparable(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in _VOLATILE_RECORD_KEYS}


def merge_shards(paths: list[str | Path]) -> MergeResult:
    """Join shard raw files; raise :class:`MergeError` on anything that would make the result untrustworthy."""
    if not paths:
        raise MergeError("no shard file given")
    paths = [Path(p) for p in paths]
    seen_paths = set()
    for path in paths:
        if path.resolve() in seen_paths:
            raise MergeError(f"{path}: given twice")
        seen_paths.add(path.resolve())
    shards = [(path, _load_shard(path)) for path in paths]

    by_idx: dict = {}
    origin: dict = {}
    run_values: dict[str, dict] = {k: {} for k in _PER_RUN_KEYS}
    duplicates = 0
    for path, art in shards:
        for rec in art.records:
            data = rec.to_dict()
            for key in _PER_RUN_KEYS:
                value = data.get(key)
                if value not in (None, ""):
                    run_values[key].setdefault(value, path)
            if rec.idx in by_idx:
                if _comparable(by_idx[rec.idx]) != _comparable(data):
                    raise MergeError(f"{path}: question idx {rec.idx} differs from the one in {origin[rec.idx]}; the shards come from different runs")
                duplicates += 1
                continue
            by_idx[rec.idx] = data
            origin[rec.idx] = path
    for key, values in run_values.items():
        if len(values) > 1:
            listing = ", ".join(f"{v!r} in {p}" for v, p in values.items())
            raise MergeError(f"shards disagree on {key}: {listing}")
    if duplicates:
        log.warning("%d question(s) appear identically in more than one shard; kept once", duplicates)

    first_meta = dict(shards[0][1].meta)
    meta = {k: v for k, v in first_meta.items() if k not in ("provenance", "total_count", "num_shards", "shard_id")}
    records = [by_idx[k] for k in sorted(by_idx, key=lambda i: (not isinstance(i, int), i if isinstance(i, int) else str(i)))]
    meta["total_count"] = len(records)
    meta["merged_from"] = [
        {"path": str(path), "records": len(art.records), "meta": dict(art.meta)} for path, art in shards
    ]
    artifact = RecordsArtifact(records=[QuestionRecord.from_dict(r, where=f"merged idx {r['idx']}") for r in records], meta=meta)
    failed = sum(r.failed for r in artifact.records)
    return MergeResult(artifact=artifact, duplicates=duplicates, failed=failed)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m k9bench.merge",
        description="Merge the raw files of a sharded inference run (SLURM array) into one raw file.",
    )
    parser.add_argument("shards", nargs="+", help="the shard raw files (every shard of the run)")
    parser.add_argument("--output_file", required=True, help="the merged raw JSON file")
    parser.add_argument("--expect_shards", type=int, default=None, help="refuse unless exactly this many shard files are given")
    add_logging_args(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose, args.quiet)
    if args.expect_shards is not None and len(args.shards) != args.expect_shards:
        log.error("merge: %d shard files given, %d expected", len(args.shards), args.expect_shards)
        return 2
    try:
        result = merge_shards(args.shards)
        result.artifact.meta["provenance"] = provenance("k9bench.merge", argv if argv is not None else sys.argv[1:], args)
        write_json_atomic(args.output_file, result.artifact.to_dict())
    except ArtifactError as exc:
        log.error("merge: %s", exc)
        return 1
    log.info(
        "merged %d shard(s) into %s: %d questions (%d failed)",
        len(args.shards), args.output_file, len(result.artifact.records), result.failed,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
