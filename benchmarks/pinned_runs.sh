#!/usr/bin/env bash
# The baseline table's background runs, set up and carried on from main's committed run files, on this
# machine or a new one; then their growing files brought back into main. Run from anywhere:
#
#   bash benchmarks/pinned_runs.sh start [DATA_DIR]   # worktrees, question files, run files in; the plans, detached
#   bash benchmarks/pinned_runs.sh collect            # the worktrees' run files back into main (whole lines only)
#   bash benchmarks/pinned_runs.sh copy               # only start's copying of main's run files in
#   bash benchmarks/pinned_runs.sh promote FOLDER RUN...   # finished third-pin runs into the first pin's place
#
# start: makes the two pinned worktrees beside main if they are missing (../wt-runs2 at e860858,
# ../wt-runs3 at cd147d0), fetches the question files into each (from DATA_DIR when given, checked by
# sha256 either way), copies main's run files in where they are longer than the worktree's, and starts
# second_pin_plan.sh then third_pin_plan.sh in the background (setsid, one model job at a time; log
# ../logs/pinned-runs.log, its process group in ../logs/pinned-runs.pgid for kill -STOP/-CONT -PGID).
# A run the third pin makes again grows in main under hotpotqa50-$M-cd147d0/ (and the like), beside the
# first pin's file the tables still read; start puts that file in the worktree in the first pin's place,
# so the pinned plan resumes it (and never sees the first pin's forced answers beside it).
# collect: copies back each run file that grew in a worktree: second-pin files and third-pin runs of
# their own (2WikiMultihopQA's) to their folder in main, third-pin files that replace a first-pin run to
# the -cd147d0 folder; never a shorter file over a longer one, and checks that the committed rows are
# the first rows of the file that replaces them. `make results` and the progress rows follow by hand.
# promote: once the third pin's RUNs of FOLDER hold the same questions as the first pin's files, in the same
# order, the first pin's (with their forced answers and provenance notes) move to FOLDER-062262b/, the
# history `make results` rebuilds, and the third pin's from FOLDER-cd147d0/ into FOLDER/; nothing moves
# unless every RUN is ready, and the RUNs name every run of their methods that FOLDER holds from the first
# pin and the third pin makes again (so that no table mixes the pins within a method). start and
# collect know a run made at the third pin by its settings (the pinned method file's sha256), wherever it is.
set -euo pipefail
MAIN=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=$(dirname "$MAIN")
M=qwen2.5-coder-1.5b
W2=$WORK/wt-runs2 W3=$WORK/wt-runs3
REDONE=(hotpotqa50-$M:ctrla hotpotqa50-$M:ctrla-never hotpotqa50-$M:ctrla-always
        hotpotqa50-monitor-$M:ctrla-monitor-only hotpotqa50-$M:seakr-no-sa-retrieval)  # folder:run the third pin makes again

redone() {   # FOLDER RUN: whether the third pin makes this first-pin run again
    local x
    for x in "${REDONE[@]}"; do [ "$x" = "$1:$2" ] && return 0; done
    return 1
}

worktree() {   # DIR COMMIT DATA_DIR
    [ -d "$1" ] || git -C "$MAIN" worktree add --detach "$1" "$2"
    (cd "$1" && "$MAIN/.venv/bin/python" questions.py fetch ${3:+--from "$3"} | tail -1)
}

rows() { if [ -e "$1" ]; then wc -l < "$1"; else echo 0; fi; }

method_of() { if [[ "$1" == ctrla* ]]; then echo ctrla.py; else echo seakr.py; fi; }   # RUN: its method file

third_pin() {   # SETTINGS RUN: whether the run's settings file names the third pin's method file (its sha256)
    local method
    method=$(method_of "$2")
    [ -e "$1" ] && [ -e "$W3/$method" ] && grep -q "sha256 $(sha256sum "$W3/$method" | cut -c1-16)" "$1"
}

copy_in() {   # FOLDER WORKTREE: main's runs of FOLDER into the worktree where main's file is longer
    # (a worktree's checkout holds the run files as committed at its pin, shorter than main's)
    local folder=$1 wt=$2 f run
    mkdir -p "$wt/results/$folder"
    for f in "$MAIN/results/$folder"/*.jsonl; do
        run=$(basename "$f" .jsonl)
        [ -e "$MAIN/results/$folder/$run.settings.json" ] || continue      # a side file: with its run
        if [ "$wt" = "$W3" ] && redone "$folder" "$run"; then              # the third pin's own, below,
            third_pin "$MAIN/results/$folder/$run.settings.json" "$run" || continue   # unless promoted
            third_pin "$wt/results/$folder/$run.settings.json" "$run" || rm -f "$wt/results/$folder/$run".*
        fi
        if [ "$(rows "$f")" -gt "$(rows "$wt/results/$folder/$run.jsonl")" ]; then
            cp "$MAIN/results/$folder/$run".* "$wt/results/$folder/"
        fi
    done
    [ "$wt" = "$W3" ] && [ -d "$MAIN/results/$folder-cd147d0" ] || return 0
    for f in "$MAIN/results/$folder-cd147d0"/*.jsonl; do
        run=$(basename "$f" .jsonl)
        if [ -e "$wt/results/$folder/$run.settings.json" ] && ! third_pin "$wt/results/$folder/$run.settings.json" "$run"; then
            rm -f "$wt/results/$folder/$run".*                   # the first pin's, from the checkout
        fi
        if [ "$(rows "$f")" -gt "$(rows "$wt/results/$folder/$run.jsonl")" ]; then
            cp "$f" "$MAIN/results/$folder-cd147d0/$run.settings.json" "$wt/results/$folder/"
        fi
    done
}

bring_back() {   # FILE DEST_DIR: FILE's whole lines into DEST_DIR, never shorter than what is there;
    # status 1 where it copied nothing (DEST_DIR's file is longer)
    local src=$1 dest=$2/$(basename "$1") n old
    n=$(wc -l < "$src")
    if [ -e "$dest" ]; then
        old=$(wc -l < "$dest")
        [ "$n" -ge "$old" ] || return 1                          # the worktree's older copy
        if [[ "$dest" == *.jsonl ]] && ! head -n "$old" "$src" | cmp -s - "$dest"; then
            echo "error: $src does not begin with the $old rows of $dest" >&2; exit 1
        fi
    fi
    mkdir -p "$2"
    head -n "$n" "$src" > "$dest.tmp" && mv "$dest.tmp" "$dest"
    echo "$dest: $n rows"
}

collect() {   # every run file a plan wrote, from each worktree to its place in main
    local wt folder f run base
    for wt in "$W2" "$W3"; do
        [ -d "$wt/results" ] || continue
        for f in "$wt"/results/*-"$M"/*.jsonl; do
            [ -e "$f" ] || continue
            folder=$(basename "$(dirname "$f")"); base=$(basename "$f"); run=${base%.jsonl}; run=${run%.forced}
            # the second pin makes 2WikiMultihopQA's runs only; its checkout's other files are the first pin's
            [ "$wt" = "$W2" ] && [ "$folder" != "2wikimultihopqa50-$M" ] && continue
            [ -e "$wt/results/$folder/$run.settings.json" ] || continue     # a table's file, or not a run
            if [ "$wt" = "$W3" ] && redone "$folder" "$run"; then
                # the first pin's copy from the checkout, not yet set aside by the plan: not the pin's
                third_pin "$wt/results/$folder/$run.settings.json" "$run" || continue
                local dest=$MAIN/results/$folder-cd147d0                         # growing beside the first pin's,
                third_pin "$MAIN/results/$folder/$run.settings.json" "$run" && dest=$MAIN/results/$folder   # or promoted
                if bring_back "$f" "$dest"; then cp "$wt/results/$folder/$run.settings.json" "$dest/"; fi
            elif ! cmp -s "$f" "$MAIN/results/$folder/$base"; then
                if bring_back "$f" "$MAIN/results/$folder"; then
                    cp "$wt/results/$folder/$run.settings.json" "$MAIN/results/$folder/"
                fi
            fi
        done
    done
}

promote() {   # FOLDER RUN...: the third pin's finished RUNs of FOLDER in the first pin's place (see the top)
    local folder=$1 run f; shift
    local old=$MAIN/results/$folder new=$MAIN/results/$folder-cd147d0 hist=$MAIN/results/$folder-062262b
    set -- $(printf '%s\n' "$@" | awk '!seen[$0]++')                 # each RUN once
    for run in "$@"; do
        redone "$folder" "$run" || { echo "error: $folder:$run is no run the third pin makes again" >&2; exit 1; }
        [ ! -e "$hist/$run.jsonl" ] || { echo "error: $hist/$run.jsonl exists: $folder:$run was promoted" >&2; exit 1; }
        [ -e "$old/$run.jsonl" ] && [ -e "$new/$run.jsonl" ] \
            || { echo "error: $folder:$run needs both $old/$run.jsonl and $new/$run.jsonl" >&2; exit 1; }
        third_pin "$new/$run.settings.json" "$run" \
            || { echo "error: $new/$run.settings.json does not name the third pin's method file" >&2; exit 1; }
        "$MAIN/.venv/bin/python" - "$old/$run.jsonl" "$new/$run.jsonl" <<'PY' || exit 1
import json, sys
first, third = ([json.loads(line)["id"] for line in open(p, encoding="utf-8")] for p in sys.argv[1:])
if first != third:
    sys.exit(f"error: {sys.argv[2]} holds {len(third)} questions, {sys.argv[1]} {len(first)} (or another order): "
             "not finished; nothing moved")
PY
    done
    local x other methods                # a method's runs move together, so that no table mixes the pins within it
    methods=$(for run in "$@"; do method_of "$run"; done)
    for x in "${REDONE[@]}"; do
        other=${x#*:}
        [ "${x%%:*}" = "$folder" ] && [ -e "$old/$other.jsonl" ] && [ ! -e "$hist/$other.jsonl" ] \
            && grep -qx -- "$(method_of "$other")" <<< "$methods" || continue
        printf '%s\n' "$@" | grep -qx -- "$other" \
            || { echo "error: name $folder:$other too: the table would read $(method_of "$other")'s runs from both pins; nothing moved" >&2; exit 1; }
    done
    mkdir -p "$hist"
    for run in "$@"; do
        for f in "$old/$run".*; do mv "$f" "$hist/"; done
        for f in "$new/$run".*; do mv "$f" "$old/"; done
        echo "$folder:$run: the first pin's files in $hist, the third pin's in $old"
    done
    rmdir "$new" 2>/dev/null || true
    "$MAIN/.venv/bin/python" - "$MAIN/results/provenance.json" "$folder" "$@" <<'PY'
import json, sys
path, folder, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
pins = json.load(open(path, encoding="utf-8"))
for run in runs:      # a moved side file's note moves with it
    for name in (f"{run}.jsonl", f"{run}.forced.jsonl"):
        if f"{folder}/{name}" in pins["notes"]:
            pins["notes"][f"{folder}-062262b/{name}"] = pins["notes"].pop(f"{folder}/{name}")
open(path, "w", encoding="utf-8").write(json.dumps(pins, indent=1, ensure_ascii=False) + "\n")
PY
    echo "next: make results (both folders' tables), then the README's and results/README.md's figures"
}

copy() {
    copy_in "2wikimultihopqa50-$M" "$W2"
    local folder
    for folder in hotpotqa50-$M hotpotqa50-monitor-$M 2wikimultihopqa50-$M; do copy_in "$folder" "$W3"; done
}

case "${1:-}" in
    start)
        worktree "$W2" e860858 "${2:-}"
        worktree "$W3" cd147d0 "${2:-}"
        copy
        mkdir -p "$WORK/logs"
        cd "$WORK"
        setsid bash -c "source '$MAIN/.venv/bin/activate'
            cd '$W2' && bash '$MAIN/benchmarks/second_pin_plan.sh' &&
            cp -n '$W2'/results/2wikimultihopqa50-$M/*.jsonl '$W2'/results/2wikimultihopqa50-$M/*.settings.json \
                '$W3'/results/2wikimultihopqa50-$M/ &&
            cd '$W3' && bash '$MAIN/benchmarks/third_pin_plan.sh'" > "$WORK/logs/pinned-runs.log" 2>&1 < /dev/null &
        echo $! > "$WORK/logs/pinned-runs.pgid"
        echo "started: log $WORK/logs/pinned-runs.log, process group $(cat "$WORK/logs/pinned-runs.pgid")" ;;
    collect) collect ;;
    copy) copy ;;
    promote) [ $# -ge 3 ] || { echo "usage: bash benchmarks/pinned_runs.sh promote FOLDER RUN..." >&2; exit 2; }
        shift; promote "$@" ;;
    *) echo "usage: bash benchmarks/pinned_runs.sh start [DATA_DIR] | collect | copy | promote FOLDER RUN..." >&2; exit 2 ;;
esac
