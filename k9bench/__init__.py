"""k9bench: shared logic behind the K9-Bench evaluation scripts.

The four scripts at the repository root are thin front ends; every concern lives
in exactly one module here (``tests/test_package_layout.py`` checks that this table lists
every module, that no import forms a cycle, and that library modules never see an
``argparse.Namespace``). Data flow: ``eval_video_llm.py`` (raw) -> ``evaluate_results.py``
(sim, eval) -> ``subjective_evals.py`` (judge) -> ``evaluate_results.py --mode report``;
``python -m k9bench.pipeline`` (which ``run_eval.sh`` execs) chains them, each through
the one :class:`k9bench.stage.Stage` contract.

========================================  ================================================================================================
``k9bench.errors``                        the shared exit codes and StageError, the one-line refusal
``k9bench.stage``                         the one Stage contract: outputs, fingerprint, done() by content, run(); output check, locks, stop signals
``k9bench.settings``                      typed settings: one field = type, default, flag, help; flags generated; one fingerprint comparison
``k9bench.validators``                    argparse value types shared by every script
``k9bench.cli``                           front-end helpers for the scripts' main() only: shared flags, a parser that masks secrets
``k9bench.logs``                          logging set up once from a main: format, level, redacting filter, a handler that follows sys.stderr
``k9bench.layout``                        every artifact name (python -m k9bench.layout prints them)
``k9bench.progress``                      progress: a bar on a terminal, periodic lines in a batch log; library bars kept out of logs
``k9bench.redact``                        secrets kept out of artifacts and logs, by name and by value
``k9bench.artifact_io``                   the one reader of every JSON/text input, atomic writes, checkpoints, full-disk messages
``k9bench.artifacts``                     typed records, record files, provenance
``k9bench.headers``                       typed, versioned artifact headers: what each file says about itself
``k9bench.headers.kinds``                 one frozen header class per artifact kind, the schema versions, the stage -> kind table
``k9bench.headers.blocks``                typed views of the nested header blocks readers use (run settings, judge settings)
``k9bench.headers.files``                 the one header reader and writer; a newer schema version refused in one line
``k9bench.resume``                        one resumable stage: final file, checkpoint log, retries, refusal to mix settings
``k9bench.answers``                       answer extraction from model replies
``k9bench.stats``                         bootstrap intervals that resample videos; when an interval is shown
``k9bench.merge``                         merging the raw files of a sharded run (MergeStage)
``k9bench.prefetch``                      everything a GPU job reads, fetched on a login node (python -m k9bench.prefetch)
``k9bench.data``                          the questions: the dataset, the demo set (its rows are package data), subsets, the paper's numbers:
``k9bench.data.dataset``                    loading and validating question rows (Hub, local, demo)
``k9bench.data.demo``                       the bundled synthetic demo set and its seeded videos
``k9bench.data.subset``                     question subsets: runs compared on the questions they all had (python -m k9bench.data.subset)
``k9bench.data.published``                  the paper's published numbers and setup; the reference prompts' hashes
``k9bench.models``                        loading models:
``k9bench.models.hub``                      fast check of a model or dataset source before a Hub load; the one local-path rule
``k9bench.models.accelerator``              device, dtype, attention, out-of-memory policy (inference and scoring)
``k9bench.models.families``                 the one model-family table: model_type -> frame rule, audio, quirks, tiny model
``k9bench.download``                      fetching the videos (download_videos.py):
``k9bench.download.youtube``                YouTube URL parsing, safe scene names
``k9bench.download.stage``                  the download stage: parser, config, DownloadStage, fetching for a run's questions
``k9bench.download.settings``               the download's settings (what, where, how)
``k9bench.download.checks``                 the download's input checks, before anything is written
``k9bench.download.run``                    the download run: each video once, on a thread pool, the manifest kept current
``k9bench.download.one``                    one video: fetched or made, remuxed, verified, or why not
``k9bench.download.failures``               why a download did not happen (input errors, failure classes)
``k9bench.download.ytdlp``                  the yt-dlp part of a download: parameters, one fetch, cookies
``k9bench.download.manifest``               the download manifest and what a rerun trusts
``k9bench.download.verify``                 checks that a downloaded video is complete and usable
``k9bench.video``                         video frames for the model, decoded once, explicit decoder:
``k9bench.video.ffmpeg``                    locating ffmpeg, generating synthetic videos
``k9bench.video.sampling``                  decoding and sampling a video's frames (qwen-vl-utils' rules)
``k9bench.video.cache``                     per-run frame cache with an optional on-disk store; each video's file identity
``k9bench.video.policy``                    how frames (and a soundtrack) reach a model's processor
``k9bench.video.audio``                     a video's soundtrack for audio-capable models (ffmpeg, mono float32)
``k9bench.serving``                       OpenAI-compatible servers:
``k9bench.serving.serve``                   a vLLM server for the length of a with block (the launcher's SERVE=vllm)
``k9bench.serving.openai_api``              OpenAI-compatible client: key, base-URL check, probe, retries, concurrency
``k9bench.serving.endpoint``                an endpoint before any chat call: base-URL check, reachability probe, small GETs
``k9bench.prompts``                       our system and judge prompts (data files) and their hashes:
``k9bench.prompts.__main__``                python -m k9bench.prompts from-reference PATH
``k9bench.prompts.reference``               the reference's prompt texts out of a user's copy of its script (ast, never run)
``k9bench.inference``                     the engine behind eval_video_llm.py:
``k9bench.inference.stage``                 the parser, the config and InferenceStage (the Stage contract)
``k9bench.inference.settings``              the run's typed settings (RunConfig)
``k9bench.inference.planning``              which questions, grouped how, into which file; checks before a model loads
``k9bench.inference.records``               one record per question, the per-video records, the raw file's blocks
``k9bench.inference.runner``                the loop: batch by batch, each record checkpointed at once
``k9bench.inference.resume_check``          which earlier records a run may reuse
``k9bench.inference.data_parallel``         --data_parallel N: one worker process per GPU, then one merge
``k9bench.inference.outcome``               what a finished run's records mean for its exit code (all failed: exit 1)
``k9bench.inference.batching``              batches spanning videos, the batch size in use and why
``k9bench.inference.pipeline``              CPU preparation ahead of the accelerator
``k9bench.inference.backend``               the Backend base class (defaults for every optional capability)
``k9bench.inference.registry``              the backends --backend names (importable without torch)
``k9bench.inference.hf``                  ``--backend hf``: transformers, local weights (batch 1 the reference; batched generate)
``k9bench.inference.hf.backend``            the backend (device maps, offload, placement recorded)
``k9bench.inference.hf.load``               how it loads a checkpoint (device, dtype, attention, device map)
``k9bench.inference.hf.batching``           its --batch_size auto: the rows of batched generate the free memory holds
``k9bench.inference.hf.settings``           its flags (HFSettings)
``k9bench.inference.vllm``                ``--backend vllm``: vLLM in-process, fed our frames, in checkpointed chunks
``k9bench.inference.vllm.backend``          the engine (vllm.LLM), imported only where vLLM is installed
``k9bench.inference.vllm.prompts``          a chunk's prompts: one array per video, its uuid, the chunk size
``k9bench.inference.vllm.engine_log``       the engine's own reason when it dies, from its log lines
``k9bench.inference.vllm.settings``         its flags (importable without vLLM)
``k9bench.inference.openai_compat``       ``--backend openai``: an OpenAI-compatible server
``k9bench.inference.openai_compat.backend`` the backend (concurrency, retries)
``k9bench.inference.openai_compat.request`` the requests it sends, the errors a call ends in
``k9bench.inference.openai_compat.video_transport`` how a video travels to a server (video, video_url, frames)
``k9bench.inference.openai_compat.server_info`` what a server says about itself, into the record
``k9bench.inference.openai_compat.settings`` its flags (OpenAISettings, --api_model, --video_fps)
``k9bench.tiny_model``                    tiny random-weight checkpoints for tests, the demo, benchmarks:
``k9bench.tiny_model.__main__``             python -m k9bench.tiny_model
``k9bench.tiny_model.base``                 the shared tokenizer, special tokens, chat templates
``k9bench.tiny_model.qwen_vl``              Qwen3-VL and Qwen2.5-VL
``k9bench.tiny_model.families``             InternVL, Qwen2.5-Omni and Qwen3-Omni thinkers
``k9bench.scoring``                       the scoring stages behind evaluate_results.py:
``k9bench.scoring.settings``                settings of the scoring stage (evaluate_results.py)
``k9bench.scoring.embedding``                the embedding model: loading, encoding, cosine tables
``k9bench.scoring.rule``                    the fine rule, the record checks, reading a file for scoring
``k9bench.scoring.calculate``               calculate (raw -> sim)
``k9bench.scoring.evaluate``                evaluate (sim -> eval): verdicts, accuracies, statistics
``k9bench.scoring.stages``                  the parser, the config, CalculateStage and EvaluateStage
``k9bench.judge``                         LLM-as-judge, the reference's way by default:
``k9bench.judge.settings``                  settings, flags, the configuration
``k9bench.judge.parse``                     a reply into five scores
``k9bench.judge.tasks``                     one task per answered record
``k9bench.judge.score``                     one request, its entry or skip; the summary
``k9bench.judge.cache``                     a request's key by content; the store of paid replies
``k9bench.judge.run``                       the resumable request loop and the final files
``k9bench.judge.stage``                     JudgeStage (the Stage contract)
``k9bench.report``                        leaderboards, run settings, plots (evaluate_results.py --mode report):
``k9bench.report.__main__``                 python -m k9bench.report: the eval files of a frame-budget sweep
``k9bench.report.model``                    scores, a run's settings, its standing against the paper
``k9bench.report.load``                     reading eval and judge files; common questions
``k9bench.report.markdown``                 the report's text and tables
``k9bench.report.paired``                   --baseline: paired bootstrap over videos, exact McNemar
``k9bench.report.plots``                    the figures
``k9bench.report.stage``                    ReportStage (the Stage contract), its flags
``k9bench.view``                          the static results page (docs/view.md): report_<tag>/index.html:
``k9bench.view.__main__``                   python -m k9bench.view RUN_OR_FILE... --output_dir DIR
``k9bench.view.data``                       the page's data: every answer, agreement, common-question accuracy
``k9bench.view.thumbs``                     thumbnails of the frames the model saw, through the frame cache
``k9bench.view.page``                       the self-contained HTML (inline data, script and style)
``k9bench.view.browser``                    headless system Chromium via Selenium (tests, bench, screenshots)
``k9bench.pipeline``                      the launcher in Python (python -m k9bench.pipeline; run_eval.sh execs it):
``k9bench.pipeline.__main__``               python -m k9bench.pipeline
``k9bench.pipeline.env``                    environment variables read once, checked, frozen
``k9bench.pipeline.flags``                  the launcher's own flags (--dry_run, --help)
``k9bench.pipeline.scripts``                the stages' own parsers, to check every *_ARGS first
``k9bench.pipeline.registry``               the stage registry, the one place the launcher knows its stages
``k9bench.pipeline.plan``                   which stages run and why (--dry_run)
``k9bench.pipeline.stages``                 one step per stage (each runs as its entry's Stage object)
``k9bench.pipeline.preflight``              every stage checked before the first one runs
``k9bench.pipeline.run``                    check everything, take the run's lock, run what must run
``k9bench.pipeline.prepare``                the demo's preparation
``k9bench.pipeline.report_lines``           the configuration block printed first
``k9bench.pipeline.slurm``                  array shards and the merge job, requeue, GPUs, logs
========================================  ================================================================================================
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
