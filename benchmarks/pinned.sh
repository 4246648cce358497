# What the pinned plans share (second_pin_plan.sh and third_pin_plan.sh source it, PIN set to their commit):
# the table's settings, the checks made before any model loads, and plan(). Run from a worktree at PIN.
set -euo pipefail
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
MAIN=${MAIN:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}   # the main checkout, whose tools postdate the pin
M=qwen2.5-coder-1.5b
R=data/raw
CACHE=${CACHE:-../call-cache}
H=$R/hotpotqa/hotpot_dev_distractor_v1_100.json
W=$R/2wikimultihopqa/2wikimultihopqa_dev_200.jsonl
O=results/2wikimultihopqa50-$M
F=results/ctrla-features-$M.pt
[ "$(git rev-parse --short=7 HEAD 2>/dev/null)" = "$PIN" ] \
    || { echo "error: run from a worktree pinned at $PIN (git worktree add --detach ../WORKTREE $PIN)" >&2; exit 1; }
[ -f "$H" ] && [ -f "$W" ] \
    || { echo "error: no question files under $R: run make data here first (or DATA_FROM=DIR make data)" >&2; exit 1; }
python -c "import torch, transformers" 2>/dev/null \
    || { echo "error: no torch here: activate the project's environment first (source ../main/.venv/bin/activate)" >&2; exit 1; }
# each run_all call ends with the directory's table, which checks every run file against the pinned commits:
# the pinned checkout's list predates its own pin, so it reads main's
cp "$MAIN/results/provenance.json" results/provenance.json
plan() {   # DATA OUT RUNS... [-- EXTRA...]: one run_all call of the pinned checkout, the table's fixed settings
    local data=$1 out=$2; shift 2
    python benchmarks/run_all.py --data "$data" --limit 50 --model $M --out "$out" --cache "$CACHE" "$@"
}
