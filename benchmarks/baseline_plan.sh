#!/usr/bin/env bash
# The baseline table's plan (results/README.md), items 1 to 5 in order, one model job at a time, from
# the worktree pinned at the plan's commit; every run resumes where its file ends, so running this again
# goes on where it stopped (a finished run is skipped before its model loads).
#
#   git worktree add --detach ../wt-runs 062262b     # once; copy results/*-qwen2.5-coder-1.5b/ into it
#   source .venv/bin/activate && cd ../wt-runs && bash ../main/benchmarks/baseline_plan.sh
#
# SeaKR's delta D comes from item 1's file: the paper's 5.3 condition where it is met, else our rule
# (analysis.threshold_table, as for SmolLM2). D2, the second SeaKR run, comes from the first run's own
# eigen scores (no answer read): a HotpotQA reasoning step scores lower than an NQ direct answer, so an
# NQ quantile says little about how often a HotpotQA step retrieves; D2 keeps half as many questions from
# retrieving at their first step as D does, a point between D and retrieving at every step. Item 4 stops
# after the three verifier runs: choose M_V from their Z_CM signals (`python eval.py signals
# results/verifier10-$M/*.jsonl`), then run the rest with VERIFIER set.
set -euo pipefail
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
M=qwen2.5-coder-1.5b
R=data/raw                     # the question files: make data
CACHE=${CACHE:-/work/call-cache}
K=(--dtype float32 --linear onednn --cache "$CACHE")
H=$R/hotpotqa/hotpot_dev_distractor_v1_100.json
[ -f seakr.py ] || { echo "error: run from the pinned worktree" >&2; exit 1; }
[ -d "$R" ] || { echo "error: no $R here: run make data first (or: python ../main/questions.py fetch --dest $R)" >&2; exit 1; }
python -c "import torch, transformers" 2>/dev/null \
    || { echo "error: no torch here: activate the project's environment first (source ../main/.venv/bin/activate)" >&2; exit 1; }

# 1. SeaKR's signal and threshold: direct answers with U on NQ-open dev 0-199
python seakr.py --calibrate --model $M --data $R/nq/NQ-open.dev.jsonl --limit 200 "${K[@]}" \
    --output results/nq200-$M/seakr-calibrate.jsonl

# the table builder of this checkout (the pinned one predates it) writes the calibration into figures.json
python "$(dirname "$0")/run_all.py" --out results/nq200-$M --table-only > /dev/null
D=$(python -c 'import json, sys; t = json.load(open(sys.argv[1]))["calibration"]
print("%g" % (t["gap"] if t["paper"] is None else t["paper"]))' results/nq200-$M/figures.json)
echo "SeaKR delta: $D"

# 2. HotpotQA, first 50 dev questions, BM25 over their own contexts: SeaKR at D, CoT, IRCoT, the
#    "- S.A. Retrieval" ablation, then SeaKR at D2 (the pinned run_all asks for --taus beside --deltas)
python benchmarks/run_all.py --data "$H" --limit 50 --model $M --out results/hotpotqa50-$M \
    --deltas "$D" --taus --runs "seakr-delta$D" cot ircot seakr-no-sa-retrieval \
    --cache "$CACHE" -- --dtype float32 --linear onednn
# the second delta from the first run's first-step eigen scores (analysis.py second-delta, main's: the rule
# the second pin's runs follow too)
D2=$(python "$(dirname "$0")/../analysis.py" second-delta results/hotpotqa50-$M/seakr-delta$D.jsonl --delta "$D" \
     | sed -nE 's/^second delta ([-0-9.]+):.*/\1/p')
echo "SeaKR second delta: $D2"
python benchmarks/run_all.py --data "$H" --limit 50 --model $M --out results/hotpotqa50-$M \
    --deltas "$D2" --taus --runs "seakr-delta$D2" --cache "$CACHE" -- --dtype float32 --linear onednn

# 3. CtrlA on the same 50 (tau calibrated from the features), then its monitor on PopQA's first 100.
#    The features (a direction, mean and sign per layer) go to a file in results/, committed with the runs:
#    every CtrlA row reads the same ones, and a new machine skips the half hour that computes them
F=results/ctrla-features-$M.pt
python benchmarks/run_all.py --data "$H" --limit 50 --model $M --out results/hotpotqa50-$M \
    --runs ctrla ctrla-never ctrla-always --cache "$CACHE" -- --dtype float32 --linear onednn --directions $F
# the chains of those runs that name no answer get DRAGIN's forced answer (" So the answer is" + 20 tokens),
# computed by main's ctrla.py (the pinned one predates it) into a side file beside each run file, which the
# table reads with it (resumes; a run whose chains are all done loads no model)
for run in ctrla ctrla-never ctrla-always; do
    python "$(dirname "$0")/force_answers.py" results/hotpotqa50-$M/$run.jsonl --model $M "${K[@]}"
done
python benchmarks/run_all.py --data $R/ctrla/popqa_longtail.jsonl --limit 100 --model $M \
    --out results/popqa100-$M --runs ctrla-monitor-only --cache "$CACHE" -- --dtype float32 --linear onednn \
    --directions $F

# 4. Rowen: which verifier gives Z_CM a signal, on TruthfulQA's first 10
for V in smollm2-135m qwen2.5-coder-0.5b gemma3-270m; do
    python rowen.py --data $R/rowen/TruthfulQA.json --limit 10 --model $M --verifier $V --mode hybrid \
        --never-retrieve "${K[@]}" --output results/verifier10-$M/rowen-v-$V.jsonl
done
python eval.py signals results/verifier10-$M/*.jsonl
if [ -z "${VERIFIER:-}" ]; then
    echo "choose the verifier from the signals above, then run again with VERIFIER=<alias>"
    exit 0
fi
for data in TruthfulQA.json sampled_strategyqa.json; do
    name=$( [ $data = TruthfulQA.json ] && echo truthfulqa50 || echo strategyqa50 )
    python rowen.py --data $R/rowen/$data --limit 50 --model $M --verifier "$VERIFIER" --mode hybrid \
        --never-retrieve "${K[@]}" --output results/$name-$M/rowen-hybrid-never.jsonl
done
# StrategyQA carries no passages and no Wikipedia is at hand: the repair searches BM25 over the 50
# questions' own facts (each question's `target` without its leading "Yes."/"No."), pooled: the analogue
# of HotpotQA's distractor contexts, easier than the paper's web search (said beside every number)
mkdir -p outputs
python - $R/rowen/sampled_strategyqa.json outputs/strategyqa50-facts.jsonl <<'PY'
import json, re, sys
rows = json.load(open(sys.argv[1]))[:50]
with open(sys.argv[2], "w") as f:
    for i, r in enumerate(rows):
        text = re.sub(r"^\s*(yes|no)\b[.,]?\s*", "", r["target"], flags=re.I)
        f.write(json.dumps({"id": f"strategyqa-fact-{i}", "title": "", "text": text}) + "\n")
PY
python benchmarks/run_all.py --data $R/rowen/sampled_strategyqa.json --limit 50 --model $M \
    --verifier "$VERIFIER" --corpus outputs/strategyqa50-facts.jsonl --out results/strategyqa50-$M \
    --runs rowen-hybrid-always --cache "$CACHE" -- --dtype float32 --linear onednn
echo "plan items 1-4 done"

# 3, on multi-hop: CtrlA's monitor over HotpotQA's 50 chains (never retrieves, records the monitor on every
# segment): the chain's trigger and lowest score against its answer being wrong. The CtrlA runs of item 3
# record no monitor where they never retrieve, and their first segment is a preamble (README: Results)
python benchmarks/run_all.py --data "$H" --limit 50 --model $M --out results/hotpotqa50-monitor-$M \
    --runs ctrla-monitor-only --cache "$CACHE" -- --dtype float32 --linear onednn --directions $F
# its chains' forced answers (the never run's chains, so the call cache serves them), which the table's
# signal reads as each chain's answer (a whole chain holds the gold answer more often than it gives it)
python "$(dirname "$0")/force_answers.py" results/hotpotqa50-monitor-$M/ctrla-monitor-only.jsonl \
    --model $M "${K[@]}"

# 5. 2WikiMultihopQA, first 50 dev questions, BM25 over their own paragraphs pooled (446 passages): items 2
#    and 3 again, the "- S.A. Retrieval" ablation last (the dearest run: about 7 h of HotpotQA's)
W=$R/2wikimultihopqa/2wikimultihopqa_dev_200.jsonl
O=results/2wikimultihopqa50-$M
python benchmarks/run_all.py --data "$W" --limit 50 --model $M --out $O --deltas "$D" --taus \
    --runs "seakr-delta$D" cot ircot --cache "$CACHE" -- --dtype float32 --linear onednn
W2=$(second_delta $O/seakr-delta$D.jsonl "$D")
echo "SeaKR second delta on 2WikiMultihopQA: $W2"
python benchmarks/run_all.py --data "$W" --limit 50 --model $M --out $O --deltas "$W2" --taus \
    --runs "seakr-delta$W2" --cache "$CACHE" -- --dtype float32 --linear onednn
python benchmarks/run_all.py --data "$W" --limit 50 --model $M --out $O \
    --runs ctrla ctrla-never ctrla-always --cache "$CACHE" -- --dtype float32 --linear onednn --directions $F
for run in ctrla ctrla-never ctrla-always; do
    python "$(dirname "$0")/force_answers.py" $O/$run.jsonl --model $M "${K[@]}"
done
python benchmarks/run_all.py --data "$W" --limit 50 --model $M --out $O --deltas "$D" --taus \
    --runs seakr-no-sa-retrieval --cache "$CACHE" -- --dtype float32 --linear onednn
echo "plan item 5 done"
