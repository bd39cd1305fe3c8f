"""Merge the raw files of a sharded inference run (a SLURM array) into one raw file.

Each array task runs ``eval_video_llm.py --num_shards N --shard_id i`` and writes its
own raw file; this joins them into the raw JSON of SPEC section 2, as if one job had
run every question, so scoring, the judge and the report need nothing special.

Usage::

    python -m k9bench.merge --output_file raw_model_mf32_n-1.json \\
        raw_model_mf32_n-1.shard0of4.json raw_model_mf32_n-1.shard1of4.json ...

Refused (non-zero exit, message naming the file): a shard or output path that is a symbolic link
loop (exit 2), a missing or unfinished shard, a
file that is not a raw/sim file, a shard holding no records, a record scoring would refuse (named
with its idx and field: options not A-E, a ground truth outside them...), the same question in two shards with different
content, shards of different models (short name or model_name_or_path) or frame
budgets, an incomplete or repeated
shard set (read from the shards' own ``num_shards``/``shard_id``), shards run with
different inference settings (``inference`` apart from the backend description).
Records are written in idx order; the output is written atomically and carries the
merge's provenance plus, under ``merged_from``, each shard's path, record count and
top-level keys.

Top-level keys that describe one shard are not copied from the first one:
``failed_count``, ``failures_by_class``, ``thinking_unfinished_count`` and ``token_totals``
are recomputed over the merged records; ``run_stats`` sums the counters, spans the earliest start to the
latest finish and lists every shard's own block under ``per_shard`` (wall times add
up as ``wall_seconds_sum``: the shards ran side by side); ``num_shards``/``shard_id``
are dropped; a backend description that differs between shards is listed per shard
under ``inference.backend_by_shard``; any other top-level key whose value differs
between shards is listed per shard under ``differing_by_shard`` (and left out of the top level).
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

from k9bench.artifacts import QuestionRecord, is_finite_number, RecordsArtifact, load_records_artifact, provenance
from k9bench.artifact_io import ArtifactError, write_json_atomic
from k9bench.headers.files import NewerSchema
from k9bench.layout import checkpoint_path, shard_path
from k9bench.scoring.rule import check_record, where_of
from k9bench.scoring.settings import ScoringError
from k9bench.stage import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Stage, StageError, deferred, run_stage
from k9bench.validators import positive_int

log = logging.getLogger(__name__)

_PER_RUN_KEYS = ("model_name", "max_frames")
"""Record fields that must agree across shards (one run, one model, one frame budget)."""

_VOLATILE_RECORD_KEYS = ("timestamp",)
"""Record fields ignored when the same question appears in two shards."""


class MergeError(ArtifactError):
    """The shards cannot be merged into a trustworthy raw file; the message names the file (exit 1)."""

    exit_code = EXIT_FAILED


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
    art = load_records_artifact(path, allow_empty=False)  # a header newer than this code reads: refused, naming it
    if art.stage == "eval":
        raise MergeError(f"{path}: is an eval file; merge the raw shard files written by eval_video_llm.py")
    for record in art.records:
        _check_shard_record(path, record)
    return art


def _check_shard_record(path: Path, record: QuestionRecord) -> None:
    """Scoring's record checks (:func:`k9bench.scoring.rule.check_record`) on a shard record that is not a
    failed sample, so a record scoring would refuse (options not A-E, a ground truth outside them, ...) is
    refused here, naming the file, the record and the field. A lower-case ground-truth letter is checked as
    scoring reads it (upper-cased) and merged as given; failed records (ours, the reference's) are not checked."""
    if record.failed:
        return
    gt = record.ground_truth
    checked = dataclasses.replace(record, ground_truth=gt.upper()) if isinstance(gt, str) else record
    try:
        check_record(checked, record.to_dict(), where_of(path, record))
    except ScoringError as exc:
        raise MergeError(str(exc)) from None


_PER_SHARD_KEYS = ("provenance", "total_count", "num_shards", "shard_id", "failed_count", "failures_by_class",
                   "thinking_unfinished_count", "token_totals", "run_stats", "inference", "merged_from", "differing_by_shard",
                   "videos", "stage", "data_parallel", "header")
"""Top-level keys never copied from the first shard (recomputed, merged or dropped)."""

_SUMMED_STATS = ("resumed", "generated", "failed", "oom_retries", "batch_fallbacks", "generate_seconds", "frame_wait_seconds")
"""``run_stats`` counters that add up over shards."""


def _check_shard_set(shards: list, output: Path | None = None) -> None:
    """The shards' own ``num_shards``/``shard_id`` (when they carry them) form one complete set
    (``output``, the merged file, names the missing shards' files: :func:`k9bench.layout.shard_path`)."""
    ids: dict = {}
    counts: dict = {}
    for path, art in shards:
        header = art.header
        n, sid = header.num_shards, header.shard_id
        if n is None and sid is None:
            continue
        counts.setdefault(n, path)
        if sid in ids:
            raise MergeError(f"{path}: is shard_id {sid}, like {ids[sid]}; each shard must be given once")
        ids[sid] = path
    if not counts:
        return
    if len(counts) > 1:
        listing = ", ".join(f"{n!r} in {p}" for n, p in counts.items())
        raise MergeError(f"shards disagree on num_shards: {listing}")
    (n,) = counts
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise MergeError(f"{counts[n]}: num_shards {n!r} is not a positive integer")
    if len(ids) != len(shards):
        unmarked = [str(p) for p, art in shards if art.header.shard_id is None]
        raise MergeError(f"{', '.join(unmarked)}: no shard_id, while the other shards have one")
    missing = [i for i in range(n) if i not in ids]
    if missing:
        expected = f" (expected {', '.join(str(shard_path(output, n, i)) for i in missing)})" if output is not None else ""
        raise MergeError(f"shard {', '.join(map(str, missing))} of {n} missing{expected} (given: {', '.join(str(p) for p in ids.values())}); "
                         "every shard of the run is needed")
    extra = sorted(set(ids) - set(range(n)), key=str)
    if extra:
        raise MergeError(f"{ids[extra[0]]}: shard_id {extra[0]!r} is outside 0..{n - 1}")


def _merged_inference(shards: list) -> dict | None:
    """The shards' common ``inference`` block; refuse shards run with different settings."""
    blocks = [(path, art.header.inference) for path, art in shards]
    present = [(p, b) for p, b in blocks if isinstance(b, dict)]
    if not present:
        return None
    first_path, first = present[0]
    for path, block in present[1:]:
        for key in sorted(set(first) | set(block)):
            if key != "backend" and first.get(key) != block.get(key):
                raise MergeError(f"{path}: inference.{key} differs from {first_path} ({block.get(key)!r} vs {first.get(key)!r}); "
                                 "the shards were run with different settings")
    merged = dict(first)
    backends = [b.get("backend") for _, b in present]
    if any(b != backends[0] for b in backends[1:]):
        merged["backend_by_shard"] = [{"path": str(p), **(b.get("backend") or {})} for p, b in present]
        log.info("the shards' backend descriptions differ (warnings, devices...): listed per shard under inference.backend_by_shard")
    return merged


def _merged_run_stats(shards: list) -> dict | None:
    """Summed counters, the overall time span, and each shard's own block."""
    per_shard = [(path, header.shard_id, header.run_stats) for path, header in ((p, art.header) for p, art in shards)]
    per_shard = [(p, sid, s) for p, sid, s in per_shard if isinstance(s, dict)]
    if not per_shard:
        return None
    merged: dict = {}
    for key in _SUMMED_STATS:
        values = [s.get(key) for _, _, s in per_shard if is_finite_number(s.get(key))]
        if values:
            merged[key] = sum(values)
    starts = [s["started_at"] for _, _, s in per_shard if isinstance(s.get("started_at"), str)]
    ends = [s["finished_at"] for _, _, s in per_shard if isinstance(s.get("finished_at"), str)]
    merged["started_at"] = min(starts) if starts else None
    merged["finished_at"] = max(ends) if ends else None
    walls = [s.get("wall_seconds") for _, _, s in per_shard if is_finite_number(s.get("wall_seconds"))]
    merged["wall_seconds_sum"] = sum(walls) if walls else None
    merged["per_shard"] = [{"path": str(p), "shard_id": sid, **s} for p, sid, s in per_shard]
    return merged


def _comparable(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in _VOLATILE_RECORD_KEYS}


def _resolved(path: Path) -> Path:
    """``path`` resolved; :class:`MergeError` naming it for a symbolic link loop (or a path that cannot be resolved)."""
    try:
        return path.resolve()
    except RuntimeError:  # Python < 3.13: "Symlink loop from ..."
        raise MergeError(f"{path}: a symbolic link loop") from None
    except OSError as exc:
        raise MergeError(f"{path}: {'a symbolic link loop' if exc.errno == errno.ELOOP else exc.strerror or exc}") from None


def symlink_loop(path: Path) -> bool:
    """True when ``path`` is a symbolic link that never reaches a file or folder (a loop)."""
    try:
        path.stat()
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def merge_shards(paths: list[str | Path], output: str | Path | None = None) -> MergeResult:
    """Join shard raw files; raise :class:`MergeError` on anything that would make the result untrustworthy.
    ``output`` (the merged file, optional) must not be one of the shards; it names missing shards' files."""
    if not paths:
        raise MergeError("no shard file given")
    paths = [Path(p) for p in paths]
    output = Path(output) if output is not None else None
    resolved = {p: _resolved(p) for p in paths}
    if output is not None and any(_resolved(output) == r for r in resolved.values()):
        raise MergeError(f"{output}: the output file is one of the shards; give the merged file another name")
    seen_paths = set()
    for path in paths:
        if resolved[path] in seen_paths:
            raise MergeError(f"{path}: given twice")
        seen_paths.add(resolved[path])
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

    _check_shard_set(shards, output)
    paths_of_model = {}
    for path, art in shards:
        model = art.header.model_name_or_path
        if model is not None:
            paths_of_model.setdefault(model, path)
    if len(paths_of_model) > 1:
        listing = ", ".join(f"{v!r} in {p}" for v, p in paths_of_model.items())
        raise MergeError(f"shards disagree on model_name_or_path: {listing}")
    inference = _merged_inference(shards)

    first_meta = dict(shards[0][1].meta)
    meta = {k: v for k, v in first_meta.items() if k not in _PER_SHARD_KEYS}
    # any other key whose value differs between shards describes one shard, not the run:
    # listed per shard instead of shard 0's value standing for all
    differing = {}
    for key in sorted({k for _, art in shards for k in art.meta} - set(_PER_SHARD_KEYS)):
        values = [art.meta[key] for _, art in shards if key in art.meta]  # shards that carry it
        if any(v != values[0] for v in values[1:]):
            differing[key] = [{"path": str(path), "value": art.meta.get(key)} for path, art in shards if key in art.meta]
            meta.pop(key, None)
    if differing:
        meta["differing_by_shard"] = differing
        log.warning("top-level keys that differ between shards are listed per shard under differing_by_shard: %s", ", ".join(differing))
    records = [by_idx[k] for k in sorted(by_idx, key=lambda i: (not isinstance(i, int), i if isinstance(i, int) else str(i)))]
    meta["total_count"] = len(records)
    if inference is not None:
        meta["inference"] = inference
    failures: dict[str, int] = {}
    for rec in records:
        if rec.get("error") is not None:
            cls = rec.get("error_class") or "error"
            failures[cls] = failures.get(cls, 0) + 1
    meta["failed_count"] = sum(failures.values())
    meta["failures_by_class"] = failures
    if any("thinking_unfinished_count" in art.meta for _, art in shards):
        meta["thinking_unfinished_count"] = sum(1 for r in records if r.get("thinking_unfinished"))
    if any("token_totals" in art.meta for _, art in shards):
        meta["token_totals"] = {
            "input": sum(r.get("num_input_tokens") or 0 for r in records),
            "output": sum(r.get("num_output_tokens") or 0 for r in records),
            "records_with_counts": sum(1 for r in records if r.get("num_input_tokens") is not None),
        }
    if any("videos" in art.meta for _, art in shards):  # each video is in one shard: listed once, in the order of the records
        videos: dict = {}
        for _, art in shards:
            for entry in art.meta.get("videos") or []:
                if isinstance(entry, dict):
                    videos.setdefault(entry.get("scene_name"), entry)
        first_use = {}
        for n, rec in enumerate(records):
            first_use.setdefault(rec.get("scene_name"), n)
        meta["videos"] = sorted(videos.values(), key=lambda v: first_use.get(v.get("scene_name"), len(records)))
    run_stats = _merged_run_stats(shards)
    if run_stats is not None:
        meta["run_stats"] = run_stats
    meta["merged_from"] = [
        {"path": str(path), "records": len(art.records), "meta": dict(art.meta)} for path, art in shards
    ]
    artifact = RecordsArtifact(records=[QuestionRecord.from_dict(r, where=f"merged idx {r['idx']}") for r in records], meta=meta)
    failed = sum(r.failed for r in artifact.records)
    return MergeResult(artifact=artifact, duplicates=duplicates, failed=failed)


class MergeStage(Stage):
    """The merge as a stage (:mod:`k9bench.stage`): output the merged file, inputs the shard files (by content),
    fingerprint the shard count asked for. ``run()`` checks ``expect_shards``, merges and writes atomically."""

    name = "merge"

    def __init__(self, shards: list[str | Path], output_file: str | Path, *, expect_shards: int | None = None,
                 argv: list[str] | None = None):
        self.shards = [Path(p) for p in shards]
        self.output_file = Path(output_file)
        self.expect_shards = expect_shards
        self.argv = argv

    def outputs(self) -> list[Path]:
        return [self.output_file]

    def inputs(self) -> list[Path]:
        return list(self.shards)

    def fingerprint(self) -> dict:
        return {"shards": len(self.shards), "expect_shards": self.expect_shards}

    def done(self) -> str | None:
        missing = [p for p in self.shards if not p.is_file()]
        if missing:
            return f"shard file {missing[0]} is missing"
        return super().done()

    def check_expected(self) -> None:
        """Raise :class:`StageError` (exit 2) unless exactly ``expect_shards`` shard files are given."""
        n = self.expect_shards
        if n is None or len(self.shards) == n:
            return
        if n < 1:
            raise StageError(f"--expect_shards {n}: must be at least 1")
        given = {p.name for p in self.shards}
        missing = [shard_path(self.output_file, n, i).name for i in range(n) if shard_path(self.output_file, n, i).name not in given]
        hint = f"; missing by name: {', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}" if missing and len(self.shards) < n else ""
        raise StageError(f"--expect_shards {n}: {len(self.shards)} shard file(s) given ({', '.join(str(p) for p in self.shards[:8])}"
                         f"{' ...' if len(self.shards) > 8 else ''}), {n} expected{hint}; pass every shard file of the run once")

    def check_paths(self) -> None:
        """Raise :class:`StageError` (exit 2) for a shard or output path that is a symbolic link loop (a bad
        argument: no file can ever be read or written there)."""
        for path, what in [*((p, "shard") for p in self.shards), (self.output_file, "--output_file")]:
            if symlink_loop(path):
                raise StageError(f"{path}: {what} path is a symbolic link loop (it never reaches a file); give the file itself",
                                 EXIT_USAGE)

    def run(self) -> int:
        self.check_paths()
        self.check_expected()
        try:
            result = merge_shards(self.shards, self.output_file)
        except ArtifactError as exc:  # a shard written by a newer k9bench: exit 2, as in every script
            raise StageError(f"merge: {exc}", EXIT_USAGE if isinstance(exc, NewerSchema) else EXIT_FAILED) from None
        result.artifact.meta["provenance"] = provenance("k9bench.merge", self.argv, {
            "shards": [str(p) for p in self.shards], "output_file": str(self.output_file), "expect_shards": self.expect_shards})
        result.artifact.meta["stage"] = self.stage_block()
        with deferred():
            write_json_atomic(self.output_file, result.artifact.to_dict())
        log.info("merged %d shard(s) into %s: %d questions (%d failed)", len(self.shards), self.output_file,
                 len(result.artifact.records), result.failed)
        return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    from k9bench.cli import ArgumentParser, add_logging_args  # front-end helpers: only the command line uses them

    parser = ArgumentParser(
        prog="python -m k9bench.merge",
        description="Merge the raw files of a sharded inference run (SLURM array) into one raw file.",
    )
    parser.add_argument("shards", nargs="+", help="the shard raw files (every shard of the run)")
    parser.add_argument("--output_file", required=True, help="the merged raw JSON file")
    parser.add_argument("--expect_shards", type=positive_int, default=None,
                        help="refuse unless exactly this many shard files are given (the run's --num_shards)")
    add_logging_args(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    from k9bench.logs import setup_logging

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    setup_logging(args.verbose, args.quiet)
    return run_stage(MergeStage(args.shards, args.output_file, expect_shards=args.expect_shards, argv=argv))


if __name__ == "__main__":
    raise SystemExit(main())
