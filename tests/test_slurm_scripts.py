"""The CI cluster scripts (.ci/slurm/) without a cluster: what they refuse to do."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_start_refuses_to_wipe_a_folder_it_did_not_make(tmp_path):
    """start.sh empties its STATE_DIR: a typo such as `start.sh ~` must not delete anything."""
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    proc = subprocess.run(["bash", str(REPO / ".ci" / "slurm" / "start.sh"), str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert f"refusing to wipe {tmp_path}" in proc.stderr
    assert precious.read_text() == "keep me"
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    proc = subprocess.run(["bash", str(REPO / ".ci" / "slurm" / "start.sh"), str(not_a_dir)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and "is not a folder" in proc.stderr
    assert not_a_dir.read_text() == "x"
