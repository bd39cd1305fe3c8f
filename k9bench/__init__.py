"""k9bench: shared logic behind the K9-Bench evaluation scripts.

The four scripts at the repository root are thin front ends; every concern lives
in exactly one module here:

========================  ==================================================
``k9bench.youtube``       YouTube URL parsing, safe scene names
``k9bench.dataset``       loading and validating question rows
``k9bench.demo``          the bundled synthetic demo set and its videos
``k9bench.ffmpeg``        locating ffmpeg, generating synthetic videos
``k9bench.artifacts``     typed records, atomic writes, checkpoints, provenance
``k9bench.cli``           logging setup and small argparse helpers
========================  ==================================================
"""

__version__ = "0.1.0"

CATEGORIES = (
    "posture analysis",
    "action sequence",
    "context analysis",
    "cause-effect analysis",
    "interaction analysis",
)
"""The five K9-Bench categories, spelled exactly as in the released data."""

LETTERS = ("A", "B", "C", "D", "E")
"""Option letters, in order."""
