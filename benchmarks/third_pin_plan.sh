#!/usr/bin/env bash
# The baseline table's runs at the third pinned commit, cd147d0 (results/README.md), after the second pin's
# (second_pin_plan.sh), in order, one model job at a time, from a worktree at that commit; every run
# resumes where its file ends and a finished run is skipped before its model loads, so running this again
# goes on where it stopped. The commit holds what was fixed after the second pin and before these runs
# began: CtrlA's chain that stopped at "the answer is:" and a line break with an empty answer, the
# "- S.A. Retrieval" ablation's step that found nothing new (docs/seakr.md detail 18), retrieval's
# analyzers checked against real Lucene (on these 50-question pools they differ on one HotpotQA passage).
#
#   git worktree add --detach ../wt-runs3 cd147d0       # once; then `make data` there (or DATA_FROM=...)
#   for d in hotpotqa50 hotpotqa50-monitor 2wikimultihopqa50; do
#       mkdir -p ../wt-runs3/results/$d-qwen2.5-coder-1.5b && cp -r results/$d-qwen2.5-coder-1.5b/. ../wt-runs3/results/$d-qwen2.5-coder-1.5b/; done
#   source .venv/bin/activate && cd ../wt-runs3 && bash ../main/benchmarks/third_pin_plan.sh
#   (or, for both pins' plans at once, with runs under way or on a new machine: bash benchmarks/pinned_runs.sh
#   start, which copies no file of main's over a longer one in a worktree, puts the
#   growing copies in main's -cd147d0 folders in place)
#
# Order: HotpotQA's CtrlA, never and always again with the monitor run over the new never run's chains
# (the README's headline rows); 2Wiki's CtrlA, never and always; the ablation on 2Wiki, then on HotpotQA
# again (the dearest runs: about 7 h each). Copy each run file back into main as it grows. CtrlA forces the
# answer of a chain that names none in its loop at this commit, so no force_answers step.
PIN=cd147d0
source "$(dirname "$0")/pinned.sh"

set_aside() {   # CODE DIR RUN...: a run file made by another CODE (the first pin's: its settings name another
    # sha256) moves with its settings and forced answers to DIR-062262b, where it stays as the README's history
    local file=$1 dir=$2 code; shift 2
    code=$(sha256sum "$file" | cut -c1-16)
    for run in "$@"; do
        if [ -f "$dir/$run.settings.json" ] && ! grep -q "sha256 $code" "$dir/$run.settings.json"; then
            mkdir -p "$dir-062262b"
            for f in "$dir/$run.jsonl" "$dir/$run.settings.json" "$dir/$run.forced.jsonl" "$dir/$run.log"; do
                if [ -f "$f" ]; then mv "$f" "$dir-062262b/"; fi
            done
            echo "moved the first pin's $dir/$run to $dir-062262b/"
        fi
    done
}

# HotpotQA's CtrlA rows again, without the first pin's lost line breaks, and the monitor run over the
# new never run's chains (the call cache serves them)
set_aside ctrla.py results/hotpotqa50-$M ctrla ctrla-never ctrla-always
plan "$H" results/hotpotqa50-$M --runs ctrla ctrla-never ctrla-always -- --dtype float32 --linear onednn --directions $F
set_aside ctrla.py results/hotpotqa50-monitor-$M ctrla-monitor-only
plan "$H" results/hotpotqa50-monitor-$M --runs ctrla-monitor-only -- --dtype float32 --linear onednn --directions $F

# 2WikiMultihopQA: CtrlA, never, always
plan "$W" $O --runs ctrla ctrla-never ctrla-always -- --dtype float32 --linear onednn --directions $F

# "- S.A. Retrieval": 2WikiMultihopQA's, then HotpotQA's again (the first pin's, which dropped a final step
# whose search found nothing new, set aside)
plan "$W" $O --runs seakr-no-sa-retrieval -- --dtype float32 --linear onednn
set_aside seakr.py results/hotpotqa50-$M seakr-no-sa-retrieval
plan "$H" results/hotpotqa50-$M --runs seakr-no-sa-retrieval -- --dtype float32 --linear onednn
echo "the third pin's runs are done"
