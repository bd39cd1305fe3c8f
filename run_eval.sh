#!/usr/bin/env bash
# K9-Bench evaluation launcher: download -> inference -> similarity -> verdicts -> [judge] -> report,
# as one SLURM job or under plain bash. This file only finds Python; the launcher is
# `python -m k9bench.pipeline` (docs/launcher.md). Settings are environment variables:
#
#   sbatch run_eval.sh                                           # 10 questions, one GPU
#   MAX_SAMPLES=-1 sbatch run_eval.sh                            # all 4,744 questions
#   MAX_SAMPLES=-1 sbatch --array=0-7 run_eval.sh                # 8 inference shards + a merge job
#   bash run_eval.sh                                             # the same, without SLURM
#   DEMO=1 bash run_eval.sh                                      # CPU demo: tiny random-weight model
#   bash run_eval.sh --dry_run                                   # the plan: what would run, and why
#   bash run_eval.sh --help                                      # every variable and its default now
#
# Override the header with sbatch options (-p PARTITION -A ACCOUNT --gpus=TYPE:N --time=HH:MM:SS).
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
fail() {
    printf '[run_eval %s] ERROR: %s\n' "$(date '+%H:%M:%S')" "$1"
    exit 2
}
# The repository: K9BENCH_DIR, else the submission folder under SLURM ($0 is then a spool copy), else here.
if [[ -n "${K9BENCH_DIR:-}" ]]; then
    REPO_DIR=$K9BENCH_DIR
elif [[ -n "${SLURM_JOB_ID:-}" && -n "${SLURM_SUBMIT_DIR:-}" ]]; then
    REPO_DIR=$SLURM_SUBMIT_DIR
else
    REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fi
[[ -f "$REPO_DIR/eval_video_llm.py" ]] ||
    fail "cannot find the k9bench scripts in '$REPO_DIR'; submit from the repository root or set K9BENCH_DIR"
# The interpreter: PYTHON, else VENV's bin/python (a virtualenv or conda prefix), else the active python3.
if [[ -n "${VENV:-}" ]]; then
    [[ -x "$VENV/bin/python" ]] || fail "VENV=$VENV has no bin/python"
    PYTHON=${PYTHON:-$VENV/bin/python}
    export PATH="$VENV/bin:$PATH"
fi
PYTHON=${PYTHON:-python3}
command -v "$PYTHON" >/dev/null 2>&1 || fail "Python interpreter '$PYTHON' not found (set PYTHON or VENV)"
export K9BENCH_DIR=$REPO_DIR K9BENCH_SCRIPT=${BASH_SOURCE[0]} PYTHONPATH="$REPO_DIR${PYTHONPATH:+:$PYTHONPATH}"
# exec: Python becomes the batch shell, so SLURM's USR1 and TERM reach the launcher itself.
exec "$PYTHON" -m k9bench.pipeline "$@"
