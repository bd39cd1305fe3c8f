"""What a finished inference run's records mean for its exit code (shared by :mod:`k9bench.inference.stage`
and :mod:`k9bench.inference.data_parallel`, which merges its workers' files: neither imports the other)."""

from __future__ import annotations

import logging
from pathlib import Path

from k9bench.errors import EXIT_FAILED, EXIT_OK
from k9bench.inference.records import failure_counts

log = logging.getLogger("k9bench.inference")


def all_failed_exit(records: list[dict], output: Path) -> int:
    """EXIT_FAILED when every record failed (nothing was answered), else EXIT_OK.

    Scoring such a file would report 0% for a broken setup (no videos, a dead server), not for the
    model, so the run says it cannot be trusted; the file is kept for inspection.
    """
    if not records or not all(r.get("error") is not None for r in records):
        return EXIT_OK
    classes = failure_counts(records)
    log.error("every one of the %d question(s) failed (%s): this run cannot be trusted. %s is kept for "
              "inspection; fix the cause and rerun the same command (failed records are retried).",
              len(records), ", ".join(f"{k}: {v}" for k, v in sorted(classes.items())), output)
    return EXIT_FAILED
