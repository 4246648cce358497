#!/usr/bin/env bash
# The baseline table's runs at the second pinned commit, e860858 (results/README.md), in order, one model
# job at a time, from a worktree at that commit; every run resumes where its file ends and a finished run
# is skipped before its model loads, so running this again goes on where it stopped.
#
#   git worktree add --detach ../wt-runs2 e860858       # once; then `make data` there (or DATA_FROM=...)
#   cp results/2wikimultihopqa50-qwen2.5-coder-1.5b/* ../wt-runs2/results/2wikimultihopqa50-qwen2.5-coder-1.5b/
#   source .venv/bin/activate && cd ../wt-runs2 && bash ../main/benchmarks/second_pin_plan.sh
#   (or, for both pins' plans at once, with runs under way or on a new machine: bash benchmarks/pinned_runs.sh
#   start, which copies no file of main's over a longer one in a worktree)
#
# Order: 2WikiMultihopQA's CoT and IRCoT, then SeaKR at 2Wiki's second delta. The runs planned after
# those (CtrlA, never and always on HotpotQA and 2Wiki, the monitor run, the "- S.A. Retrieval" ablation)
# moved to the third pin, which fixes what this commit would have run them with (third_pin_plan.sh).
PIN=e860858
source "$(dirname "$0")/pinned.sh"

# 2WikiMultihopQA: the papers' baselines, then SeaKR at its second delta, by the rule HotpotQA's -0.99 came
# from (analysis.py second-delta over the delta 0.41 run, which the first pin made and the table re-reads)
plan "$W" $O --runs cot ircot -- --dtype float32 --linear onednn
n=$(wc -l < $O/seakr-delta0.41.jsonl 2>/dev/null || echo 0)
[ "$n" -eq 50 ] || { echo "error: $O/seakr-delta0.41.jsonl has $n of 50 rows: copy main's in" >&2; exit 1; }
D2=$(python "$MAIN/analysis.py" second-delta $O/seakr-delta0.41.jsonl --delta 0.41 \
     | sed -nE 's/^second delta ([-0-9.]+):.*/\1/p')
echo "SeaKR's second delta on 2WikiMultihopQA: $D2"
plan "$W" $O --runs "seakr-delta$D2" --deltas="$D2" -- --dtype float32 --linear onednn

echo "the second pin's runs are done; the rest are the third pin's (benchmarks/third_pin_plan.sh)"
