"""The download manifest: one typed entry per video, the run's summary, and what a rerun trusts.

The manifest (JSON, ``download_manifest.json`` in the output folder by default) is written
atomically by :mod:`k9bench.download.run`, refreshed during a run and at its end. A rerun reads
the previous one (:func:`load_previous_manifest`) to skip verifying again a file it recorded as
verified with the same size and modification time (:func:`verified_earlier`), and to keep what it
knew about a finished video (:func:`earlier_facts`: the format yt-dlp fetched, when, its
warnings), so a repeated or killed-and-rerun download never records a finished video as
``format: null``. Entries of the earlier manifest for videos this run has not (yet) decided are
kept under ``earlier`` (a run killed mid-way, a rerun with fewer ``--max_samples``).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path

from k9bench.download.failures import FAILURE_CLASSES
from k9bench.headers.files import NewerSchema, read_header, stamped

log = logging.getLogger(__name__)

MANIFEST_VERSION = 1
"""Bumped when the manifest layout changes meaning."""

MANIFEST_NAME = "download_manifest.json"
"""Default manifest file name, inside the output folder."""

STATUSES = ("ok", "skipped", "failed")
"""``ok``: fetched and verified now; ``skipped``: already present and verified; ``failed``."""

GENERATED_FORMAT = {"format_id": "generated", "ext": "mp4", "protocol": "local"}
"""The manifest's ``format`` for a video made locally instead of downloaded."""


@dataclass
class VideoResult:
    """The outcome for one video (one manifest entry)."""

    scene_name: str
    """The 11-character YouTube id."""
    url: str
    """The URL asked for."""
    status: str
    """``ok``, ``skipped`` or ``failed``."""
    file: str | None = None
    """File name inside the output folder when present and verified (``{scene}.mp4``)."""
    error_class: str | None = None
    """For a failure: one of :data:`~k9bench.download.failures.FAILURE_CLASSES`."""
    http_status: int | None = None
    """For ``http_error``: the status code."""
    message: str | None = None
    """For a failure: what went wrong; otherwise notes (e.g. a replaced invalid file)."""
    seconds: float = 0.0
    """Wall time spent on this video."""
    size_bytes: int | None = None
    """Size of the final file."""
    format: dict | None = None
    """What yt-dlp fetched: format_id, ext, width, height, vcodec, acodec."""
    video: dict | None = None
    """What verification found: codec, width, height, duration, header_frames, packets, has_audio."""
    warnings: list[str] | None = None
    """yt-dlp's warnings for this video (e.g. formats skipped, no JavaScript runtime), None when there were none."""
    replaced_invalid: str | None = None
    """Why a pre-existing ``{scene}.mp4`` was rejected and deleted, if one was."""
    mtime_ns: int | None = None
    """Modification time of the final file (with ``size_bytes``, lets a rerun trust an unchanged verified file)."""
    downloaded_at: str | None = None
    """When the file was downloaded (or made locally): this run's time for ``ok``, the earlier run's for ``skipped``
    (None when no manifest recorded it)."""
    timestamp: str = ""
    """When this outcome was reached (ISO 8601)."""

    @property
    def made_locally(self) -> bool:
        """True for a video made here (the demo set's) rather than downloaded."""
        return (self.format or {}).get("format_id") == GENERATED_FORMAT["format_id"]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def count_statuses(results) -> dict[str, int]:
    """Videos per status (every status present, zeros included)."""
    out = {s: 0 for s in STATUSES}
    for r in results:
        out[r.status] = out.get(r.status, 0) + 1
    return out


@dataclass
class DownloadReport:
    """Everything a run did: one :class:`VideoResult` per video, counts and the manifest."""

    output_dir: str
    """The video folder (absolute)."""
    results: list[VideoResult] = field(default_factory=list)
    """Per-video outcomes, in input order (only finished ones after an interrupt)."""
    manifest_path: str | None = None
    """Where the manifest was written (None when not written)."""
    started_at: str = ""
    """Run start (ISO 8601)."""
    finished_at: str = ""
    """Run end (ISO 8601)."""
    complete: bool = True
    """False when the run was interrupted before every video was tried."""
    config: dict = field(default_factory=dict)
    """The settings used."""
    provenance: dict = field(default_factory=dict)
    """What produced the run (script, arguments, versions)."""
    earlier: dict = field(default_factory=dict)
    """Entries of the earlier manifest (by scene) for videos not decided by this run: kept, not counted."""
    stage: dict | None = None
    """The stage block (:meth:`k9bench.stage.Stage.stage_block`) when run as a stage."""

    @property
    def counts(self) -> dict[str, int]:
        """Videos per status (``ok``, ``skipped``, ``failed``)."""
        return count_statuses(self.results)

    @property
    def failed_by_class(self) -> dict[str, int]:
        """Failed videos per failure class (only classes that occurred)."""
        out: dict[str, int] = {}
        for r in self.results:
            if r.status == "failed":
                key = r.error_class or "error"
                out[key] = out.get(key, 0) + 1
        return dict(sorted(out.items()))

    @property
    def failed(self) -> list[VideoResult]:
        """The failed entries."""
        return [r for r in self.results if r.status == "failed"]

    @property
    def ok_scenes(self) -> set[str]:
        """Scenes whose ``{scene}.mp4`` is present and verified (ok or skipped)."""
        return {r.scene_name for r in self.results if r.status in ("ok", "skipped")}

    @property
    def by_scene(self) -> dict[str, VideoResult]:
        """Entries by scene name."""
        return {r.scene_name: r for r in self.results}

    @property
    def exit_code(self) -> int:
        """0 when every video is present and verified, else 1."""
        return 0 if self.complete and not self.failed else 1

    def summary(self) -> dict:
        """Counts for the manifest and the log."""
        return {"total": len(self.results), **self.counts, "failed_by_class": self.failed_by_class}

    def summary_line(self) -> str:
        """One human line: totals and failure classes."""
        c = self.counts
        made = sum(r.status == "ok" and r.made_locally for r in self.results)
        fetched = f"{c['ok'] - made} downloaded, {made} made locally" if made else f"{c['ok']} downloaded"
        text = f"{len(self.results)} video(s): {fetched}, {c['skipped']} already present, {c['failed']} failed"
        if self.failed_by_class:
            text += " (" + ", ".join(f"{k}: {v}" for k, v in self.failed_by_class.items()) + ")"
        return text

    def manifest(self) -> dict:
        """The manifest JSON object, through :class:`k9bench.headers.kinds.ManifestHeader` (header block: stage ``download``)."""
        decided = {r.scene_name for r in self.results}
        out = {
            "manifest_version": MANIFEST_VERSION,
            "output_dir": self.output_dir,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "complete": self.complete,
            "summary": self.summary(),
            "failure_classes": FAILURE_CLASSES,
            "config": self.config,
            "videos": [r.to_dict() for r in self.results],
            "earlier": {s: e for s, e in self.earlier.items() if s not in decided},
            "provenance": self.provenance,
        }
        if self.stage is not None:
            out["stage"] = self.stage
        return stamped("manifest", "download", out)


def load_previous_manifest(path: Path | None) -> dict[str, dict]:
    """Entries of an earlier manifest by scene, its ``earlier`` ones included (empty when absent,
    unreadable or of another version)."""
    if path is None or not path.is_file():
        return {}
    from k9bench.artifact_io import ArtifactError, read_json

    try:
        data = read_json(path)
        read_header(data, kind="manifest", path=path)
    except NewerSchema:
        raise  # written by a newer k9bench: refused (exit 2), not overwritten with an older layout
    except ArtifactError as exc:
        log.warning("ignoring the earlier manifest: %s", exc)
        return {}
    if not isinstance(data, dict) or data.get("manifest_version") != MANIFEST_VERSION or not isinstance(data.get("videos"), list):
        return {}
    earlier = data.get("earlier") if isinstance(data.get("earlier"), dict) else {}
    out = {s: e for s, e in earlier.items() if isinstance(s, str) and isinstance(e, dict)}
    out.update({e["scene_name"]: e for e in data["videos"] if isinstance(e, dict) and isinstance(e.get("scene_name"), str)})
    return out


def verified_earlier(final: Path, entry: dict | None) -> dict | None:
    """The earlier manifest entry when it recorded this very file (same size and mtime) as verified."""
    if not entry or entry.get("status") not in ("ok", "skipped") or entry.get("file") != final.name:
        return None
    try:
        stat = final.stat()
    except OSError:
        return None
    if entry.get("size_bytes") == stat.st_size and entry.get("mtime_ns") == stat.st_mtime_ns:
        return entry
    return None


KEPT_FACTS = ("format", "downloaded_at", "warnings")
"""What a ``skipped`` entry takes over from the earlier entry of the same file."""


def earlier_facts(entry: dict | None, final: Path) -> dict:
    """What the earlier entry knew about ``final`` (:data:`KEPT_FACTS`), when it recorded this very
    file present and verified with the same size; else nothing."""
    if not entry or entry.get("status") not in ("ok", "skipped") or entry.get("file") != final.name:
        return {}
    try:
        size = final.stat().st_size
    except OSError:
        return {}
    if entry.get("size_bytes") != size:
        return {}
    return {key: entry.get(key) for key in KEPT_FACTS if entry.get(key) is not None}
