"""Every entry point keeps the flags and defaults of the snapshot taken before the typed-settings
change (tests/data/cli_snapshot.json): same names, defaults, choices and arity."""

from __future__ import annotations

import json

import pytest

from tests.cli_snapshot import ENTRY_POINTS, SNAPSHOT, snapshot

EXPECTED = json.loads(SNAPSHOT.read_text())
CURRENT = snapshot()


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_flags_and_defaults_unchanged(entry_point):
    expected, current = EXPECTED[entry_point], CURRENT[entry_point]
    assert sorted(current) == sorted(expected), f"{entry_point}: flags added or removed"
    for flag, spec in expected.items():
        assert current[flag] == spec, f"{entry_point} {flag}"
