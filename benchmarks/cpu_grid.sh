#!/usr/bin/env bash
# The precision x kernel grid of "Precision and kernel by CPU kind" (benchmarks/README.md) on this CPU:
# bench_limit.py on each method's demo question(s), per model, --linear plain|onednn x --dtype float32|bfloat16,
# one run after the other (never two at once: each would slow the other), each JSON line into
# OUTDIR/METHOD-MODEL-LINEAR-DTYPE.json beside its full log (.log). A file already there is skipped, so
# the grid resumes where it stopped. bfloat16 runs only where the CPU has AVX512-BF16 or AMX; elsewhere
# it is emulated (CtrlA 0.41x on an AVX2-only EPYC).
#
#     OMP_NUM_THREADS=2 bash benchmarks/cpu_grid.sh results/cpu-xeon-amx [MODEL ...]
set -eu
out=${1:?usage: bash benchmarks/cpu_grid.sh OUTDIR [MODEL ...]}
shift
models=${*:-qwen2.5-coder-0.5b qwen2.5-coder-1.5b}
py=${PY:-python}
dtypes=float32
if grep -qwE 'avx512_bf16|amx_bf16' "${CPUINFO:-/proc/cpuinfo}"; then dtypes="float32 bfloat16"; fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
for model in $models; do
  for method in seakr ctrla rowen; do
    limit=1
    if [ "$method" = ctrla ]; then limit=16; fi   # CtrlA's PopQA answers are short: 16 questions
    for dtype in $dtypes; do
      for linear in plain onednn; do
        f="$out/$method-$model-$linear-$dtype.json"
        if [ -s "$f" ]; then continue; fi
        echo "$(date -u +%FT%TZ) $f" >&2
        $py benchmarks/bench_limit.py --method "$method" --model "$model" --limit "$limit" --linear "$linear" \
          --dtype "$dtype" > "$f.log" 2>&1
        tail -n 1 "$f.log" > "$f.tmp" && mv "$f.tmp" "$f"
      done
    done
  done
done
