"""k9bench: shared logic behind the K9-Bench evaluation scripts.

The four scripts at the repository root are thin front ends; every concern lives
in exactly one module here (``tests/test_package_layout.py`` checks that this table lists
every module, that no import forms a cycle, and that library modules never see an
``argparse.Namespace``). Data flow: ``eval_video_llm.py`` (raw) -> ``evaluate_results.py``
(sim, eval) -> ``subjective_evals.py`` (judge) -> ``evaluate_results.py --mode report``;
``run_eval.sh`` chains them.

====================================  ================================================================================
``k9bench.settings``                  typed settings: one field = type, default, flag, help; flags generated from them
``k9bench.validators``                argparse value types shared by every script
``k9bench.cli``                       front-end helpers for the scripts' main() only: logging, shared flags
``k9bench.layout``                    every artifact name; the launcher's preflight (python -m k9bench.layout)
``k9bench.progress``                  progress bars, ours and the libraries', quiet off a terminal
``k9bench.redact``                    secrets kept out of artifacts and logs
``k9bench.hub``                       fast check of a model or dataset source before a Hub load
``k9bench.accelerator``               device, dtype, attention, out-of-memory policy (inference and scoring)
``k9bench.artifacts``                 typed records, atomic writes, checkpoints, provenance
``k9bench.resume``                    one resumable stage: final file, checkpoint log, retries, fingerprint
``k9bench.youtube``                   YouTube URL parsing, safe scene names
``k9bench.dataset``                   loading and validating question rows (Hub, local, demo)
``k9bench.data``                      package data: the demo set's rows
``k9bench.demo``                      the bundled synthetic demo set and its videos
``k9bench.ffmpeg``                    locating ffmpeg, generating synthetic videos
``k9bench.download``                  fetching the videos: once each, verified, in parallel
``k9bench.download_failures``         why a download did not happen (input errors, failure classes)
``k9bench.ytdlp``                     the yt-dlp part of a download: parameters, one fetch, cookies
``k9bench.manifest``                  the download manifest and what a rerun trusts
``k9bench.verify``                    checks that a downloaded video is complete and usable
``k9bench.frame_sampling``            decoding and sampling a video's frames (qwen-vl-utils' rules)
``k9bench.video``                     video frames for the model, decoded once, explicit decoder
``k9bench.frame_cache``               per-run frame cache with an optional on-disk store
``k9bench.frame_policy``              how frames (and a soundtrack) reach a model's processor
``k9bench.audio``                     a video's soundtrack for audio-capable models (ffmpeg, mono float32)
``k9bench.prompts``                   our system and judge prompts (data files) and their hashes
``k9bench.answers``                   answer extraction from model replies
``k9bench.inference``                 the engine behind eval_video_llm.py:
``k9bench.inference.settings``          the run's typed settings (RunConfig)
``k9bench.inference.runner``            the inference loop, its artifacts
``k9bench.inference.resume_check``      which earlier records a run may reuse
``k9bench.inference.batching``          batch planning, --batch_size auto
``k9bench.inference.pipeline``          CPU preparation ahead of the accelerator
``k9bench.inference.prefix_cache``      each video prefilled once for all its questions
``k9bench.inference.backend``           the backend interface and registry
``k9bench.inference.hf``                the transformers backend
``k9bench.inference.openai_backend``    the OpenAI-compatible backend
``k9bench.tiny_model``                tiny random-weight checkpoints for tests, the demo, benchmarks
``k9bench.scoring_settings``          settings of the scoring stage (evaluate_results.py)
``k9bench.embedding``                 the embedding model: loading, encoding, cosine tables
``k9bench.scoring``                   the fine rule and its stages: calculate (raw -> sim), evaluate (sim -> eval)
``k9bench.stats``                     bootstrap intervals that resample videos
``k9bench.openai_api``                OpenAI-compatible client: key, retries, concurrency
``k9bench.judge``                     LLM-as-judge prompts, parsing, resumable runs
``k9bench.merge``                     merging the raw files of a sharded run
``k9bench.published``                 the paper's published numbers and setup
``k9bench.report``                    leaderboards, run settings, plots (evaluate_results.py --mode report)
====================================  ================================================================================
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
