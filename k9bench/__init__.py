"""k9bench: shared logic behind the K9-Bench evaluation scripts.

The four scripts at the repository root are thin front ends; every concern lives
in exactly one module here:

===============================  =====================================================
``k9bench.youtube``              YouTube URL parsing, safe scene names
``k9bench.dataset``              loading and validating question rows (Hub, local, demo)
``k9bench.demo``                 the bundled synthetic demo set and its videos
``k9bench.ffmpeg``               locating ffmpeg, generating synthetic videos
``k9bench.artifacts``            typed records, atomic writes, checkpoints, provenance
``k9bench.cli``                  logging setup and small argparse helpers
``k9bench.prompts``              our system and judge prompts (data files) and their hashes
``k9bench.download``             yt-dlp downloads, remux, manifest (``verify``: file checks)
``k9bench.video``                frame sampling with qwen-vl-utils' rules (``frame_cache``: caches)
``k9bench.answers``              answer extraction from model replies
``k9bench.inference``            the inference loop, backend protocol, HF and OpenAI backends
``k9bench.tiny_model``           a tiny random-weight Qwen3-VL / Qwen2.5-VL for tests and the demo
``k9bench.scoring``              embedding similarities and the fine rule (``stats``: bootstrap)
``k9bench.openai_api``           OpenAI-compatible client: key, retries, concurrency
``k9bench.judge``                LLM-as-judge prompts, parsing, scoring runs
``k9bench.merge``                merging sharded raw files
``k9bench.report``               leaderboards and plots (``published``: the paper's numbers)
===============================  =====================================================
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
