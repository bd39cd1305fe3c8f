"""Logging set up by a script's ``main`` writes to the ``sys.stderr`` of the moment: a main called under a
capture that is later closed (pytest, a notebook, an embedding tool) leaves no handler that fails with
"--- Logging error --- ... I/O operation on closed file" and a traceback (seen in CI)."""

from __future__ import annotations

import io
import logging
import re
import sys
from pathlib import Path

from k9bench.logs import StderrHandler, basic_logging, setup_logging

REPO = Path(__file__).resolve().parents[1]


def test_lines_go_to_the_current_stderr_after_the_first_one_is_closed(monkeypatch):
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    setup_logging(0)
    logging.getLogger("k9bench.test_cli_logging").warning("one")
    assert "one" in first.getvalue()
    first.close()
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    logging.getLogger("k9bench.test_cli_logging").warning("two")
    assert "two" in second.getvalue() and "Logging error" not in second.getvalue()
    assert [type(h) for h in logging.getLogger().handlers] == [StderrHandler]


def test_every_logging_setup_in_the_code_is_in_k9bench_logs_and_uses_the_handler():
    sources = sorted((REPO / "k9bench").rglob("*.py")) + sorted(REPO.glob("*.py"))
    calls = [(path, line) for path in sources for line in path.read_text().splitlines() if "logging.basicConfig(" in line]
    assert {path.relative_to(REPO).as_posix() for path, _ in calls} == {"k9bench/logs.py"}
    unbound = [f"{path.relative_to(REPO)}: {line.strip()}" for path, line in calls if not re.search(r"handlers=\[StderrHandler\(\)\]", line)]
    assert unbound == []


def test_a_helper_command_s_logging_also_follows_the_current_stderr(monkeypatch):
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])  # nothing configured yet: basic_logging sets it up
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    basic_logging(logging.INFO)
    first.close()
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    logging.getLogger("k9bench.test_cli_logging").warning("three")
    assert second.getvalue() == "WARNING k9bench.test_cli_logging: three\n"
