"""Progress lines in a batch log: at each tenth and at least every interval, with rate and ETA."""

from __future__ import annotations

import logging
import re

from k9bench.progress import ProgressLog, format_duration, progress_interval

LINE = re.compile(r"^inference: (\d+)/40 \((\d+)%\), [\d.]+ questions/s, (ETA [\w ]+|took [\w ]+), (\d+) failed$")


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_lines_at_each_tenth_and_after_each_interval(caplog):
    caplog.set_level(logging.INFO, logger="k9bench.progress")
    clock = Clock()
    progress = ProgressLog("inference", 40, interval=30, clock=clock, bar=False)
    for i in range(40):
        clock.now += 1.0 if i != 5 else 100.0  # one slow question: the interval line comes between tenths
        progress.update(failed=1 if i == 7 else 0)
    progress.close()
    lines = [r.getMessage() for r in caplog.records]
    assert all(LINE.match(line) for line in lines), lines
    done = [int(LINE.match(line).group(1)) for line in lines]
    assert done == [4, 6, 8, 12, 16, 20, 24, 28, 32, 36, 40]
    assert "ETA" in lines[0] and lines[-1].endswith("took 2 min, 1 failed")
    assert "it/s" not in "".join(lines)


def test_no_line_repeated_on_close_and_empty_total(caplog):
    caplog.set_level(logging.INFO, logger="k9bench.progress")
    with ProgressLog("judge", 0, unit="entries", bar=False):
        pass
    assert caplog.records == []


def test_interval_from_environment(monkeypatch):
    monkeypatch.setenv("K9BENCH_PROGRESS_INTERVAL", "2.5")
    assert progress_interval() == 2.5
    for bad in ("0", "-1", "nan", "soon"):
        monkeypatch.setenv("K9BENCH_PROGRESS_INTERVAL", bad)
        assert progress_interval() == 60.0


def test_durations_read_like_a_person_writes_them():
    assert [format_duration(s) for s in (5, 600, 3 * 3600 + 300)] == ["5 s", "10 min", "3 h 05 min"]
