"""Video-LLM inference for K9-Bench (the engine behind ``eval_video_llm.py``), laid out by engine.

Shared by every engine: the run loop, the records and the planning.

- :mod:`k9bench.inference.settings`      the run's typed settings (one frozen dataclass per concern, composed into
                                         ``RunConfig``; ``python -m k9bench.inference.settings`` lists them)
- :mod:`k9bench.inference.backend`       the ``Backend`` base class (every optional capability has a default),
                                         ``create_backend``, the errors that end a run (``EngineDead``)
- :mod:`k9bench.inference.registry`      the backends ``--backend`` names, importable without torch
- :mod:`k9bench.inference.stage`         the stage (``eval_video_llm.py``'s ``build_parser``, ``config_from_argv``,
                                         ``InferenceStage`` on :mod:`k9bench.stage`'s contract)
- :mod:`k9bench.inference.planning`      questions grouped by video, shards, output names, the preflight checks
- :mod:`k9bench.inference.records`       a question's record, the per-video records, the raw file's top-level keys
- :mod:`k9bench.inference.runner`        the loop: batches (by video, or spanning videos prepared ahead), each record
                                         checkpointed at once, out-of-memory retry, progress lines
- :mod:`k9bench.inference.batching`      batches spanning videos (``plan_batches``), the batch size in use and why
- :mod:`k9bench.inference.pipeline`      CPU preparation of the next batches and frames on worker threads
- :mod:`k9bench.inference.data_parallel` ``--data_parallel N``: N shard workers at once, then one merge
- :mod:`k9bench.inference.resume_check`  the one inference fingerprint (records, and the stage's)

One package per engine, each with its own settings: :mod:`k9bench.inference.hf` (transformers),
:mod:`k9bench.inference.vllm` (vLLM in-process), :mod:`k9bench.inference.openai_compat` (an OpenAI-compatible server).
"""
