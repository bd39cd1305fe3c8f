"""Video-LLM inference for K9-Bench (the engine behind ``eval_video_llm.py``).

- :mod:`k9bench.inference.settings`      the run's typed settings (one frozen dataclass per concern,
                                         composed into ``RunConfig``; the script's flags are generated
                                         from them; ``python -m k9bench.inference.settings`` lists them)
- :mod:`k9bench.inference.backend`       the ``Backend`` base class (every optional capability has a default)
                                         and ``create_backend``; a backend is built as ``Cls(config)``
- :mod:`k9bench.inference.registry`      the backends ``--backend`` names, importable without torch
- :mod:`k9bench.inference.hf.backend`            the Hugging Face transformers backend (device, dtype, attention:
                                         :mod:`k9bench.models.accelerator`)
- :mod:`k9bench.inference.openai_compat.backend` the OpenAI-compatible HTTP backend; its parts:
  :mod:`k9bench.inference.openai_compat.request` (what a request is built from, the errors a call ends in),
  :mod:`k9bench.inference.openai_compat.video_transport` (``--video_transport``: frames, one mp4, the video file) and
  :mod:`k9bench.inference.openai_compat.server_info` (what the server says about itself, ``inference.backend.server``)
- :mod:`k9bench.inference.stage`         the stage (``eval_video_llm.py``'s ``build_parser``, ``config_from_argv``,
                                         ``InferenceStage`` on :mod:`k9bench.stage`'s contract): checks before the
                                         model loads, resume, the final write with its stage block
- :mod:`k9bench.inference.planning`      questions grouped by video, shards, output names, the preflight checks
- :mod:`k9bench.inference.records`       a question's record, the per-video records, the raw file's top-level keys
- :mod:`k9bench.inference.runner`        the loop: batching, prefetch, each record checkpointed at once,
                                         out-of-memory retry, progress lines
- :mod:`k9bench.inference.data_parallel` ``--data_parallel N``: N shard workers at once, then one merge
- :mod:`k9bench.inference.resume_check`  the one inference fingerprint (records, and the stage's); the files
                                         themselves are :class:`k9bench.resume.ResumableStage`'s
- :mod:`k9bench.inference.batching`      batches spanning videos (``plan_batches``) and ``--batch_size auto``
- :mod:`k9bench.inference.prefix_cache`  each video's shared prefix prefilled once (Qwen-VL, the HF backend)
- :mod:`k9bench.inference.shared_decode` the device side of that engine: a batch's questions decode on ONE
                                         copy of each video's prefix (a 4-D mask, one static cache)
- :mod:`k9bench.inference.pipeline`      CPU preparation of the next batches on worker threads
"""
