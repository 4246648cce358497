"""Seconds per question of each method on its demo set, with and without the speed-ups.

    python benchmarks/bench_methods.py [--methods seakr ctrla rowen ctrla:hotpotqa] [--limit 3] [--before DIR]

Each method runs on its demo set (seakr: hotpotqa, ctrla: popqa, rowen: truthfulqa) or on the one
named after a colon. For each, the same command runs twice per repeat, one after the other in this one process
tree: as shipped, and with --plain (every model call through common.reference, the plain decoding loop:
no prefix KV cache, no batching, no shared prompt cache). --before DIR adds a third run of an older checkout of
this project (e.g. `git worktree add /tmp/before <commit>`) with the same arguments, to compare with
the code before a change. --dtype bfloat16 adds a run of the shipped code in that precision: its
outputs differ, so the figures add each variant's scores (EM/F1/acc or BLEU/ROUGE-L) beside the
speed. --models runs the shipped code once per model instead (MODEL or MODEL:DTYPE, dtype auto
unless given), side by side, with each run's scores and the precision --dtype auto chose, e.g.
`--methods seakr --models smollm2-135m:float32 qwen2.5-coder-1.5b`; each model is also loaded alone
in a fresh process first, for its load time (converted already: run `make setup` first). Seconds per question are the median over the questions of the per-question
times each run records (model loading excluded); each run's peak resident memory is the kernel's
figure for that process. The outputs are compared question by question: the predictions, and the
whole per-question trace.

Prints a table and one JSON line. Each run is a fresh process; set OMP_NUM_THREADS to choose threads.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import common  # noqa: E402
import eval as eval_metrics  # noqa: E402
import models  # noqa: E402
DEMO = {"seakr": "hotpotqa", "ctrla": "popqa", "rowen": "truthfulqa"}   # each method's demo set


def run(method: str, code: Path, dataset: str, limit: int, out: Path, extra: list[str],
        said: dict | None = None) -> list[dict]:
    cmd = [sys.executable, str(code / f"{method}.py"), "--dataset", dataset, "--limit", str(limit),
           "--output", str(out)] + extra
    done, peak = run_measured(cmd, code)
    if said is not None:   # the precision load_model chose for --dtype auto, as it printed it
        said.update(peak_gb=peak, dtype=next((line.removeprefix("--dtype auto: ") for line in done.stderr.splitlines()
                                              if line.startswith("--dtype auto: ")), None))
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


class RunFailed(SystemExit):
    """A run exited with an error: the benchmark stops, except with --models, where that model is
    left out of that method's figures and the others go on."""


def run_measured(cmd: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    """Run a command; (its result, its peak resident memory in GB) from the kernel's accounting of
    that one child (os.wait4), so runs one after the other do not see each other's peaks."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err, text=True)
        # subtle: reaped here, not by Popen.wait, which would keep the child's resource usage from us
        _, status, usage = os.wait4(proc.pid, 0)
        code = proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if code != 0:
        raise RunFailed(f"error: {' '.join(map(str, cmd))} failed:\n{stderr[-2000:]}")
    return subprocess.CompletedProcess(cmd, code, stdout, stderr), round(usage.ru_maxrss / 2**20, 2)


def load_figures(model: str, dtype: str) -> dict:
    """Seconds for load_model to return (converted already: `make setup`), in a fresh process, the
    imports timed apart. No memory figure: the safetensors weights are memory-mapped, so a process
    that only loads has read almost none of them (0.49 GB peak for the 0.5B and the 1.5B model alike,
    most of it torch); each method run's peak is the memory figure."""
    code = ("import json, time; t = time.perf_counter(); import common; t1 = time.perf_counter(); "
            f"common.load_model({model!r}, {dtype!r}, 'cpu'); "
            "print(json.dumps({'import_s': round(t1 - t, 1), 'load_s': round(time.perf_counter() - t1, 1)}))")
    done, _ = run_measured([sys.executable, "-c", code], ROOT)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"load {model}:{dtype}: {out}", file=sys.stderr, flush=True)
    return out


def strip_times(value):
    """A row's trace without its timing fields (they differ from run to run by nature)."""
    if isinstance(value, dict):
        return {k: strip_times(v) for k, v in value.items() if k not in ("seconds",)}
    if isinstance(value, list):
        return [strip_times(v) for v in value]
    return value


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", nargs="+", default=list(DEMO), metavar="METHOD[:DATASET]",
                   help="seakr, ctrla, rowen, each optionally with a demo set: ctrla:hotpotqa")
    p.add_argument("--limit", type=int, default=3, help="questions of each demo set")
    p.add_argument("--repeats", type=int, default=1, help="runs of each variant (per-question times pooled)")
    p.add_argument("--before", type=Path, help="an older checkout of this project to time as well")
    p.add_argument("--no-plain", action="store_true", help="skip the --plain run (with --before or --dtype: a quick check)")
    p.add_argument("--dtype", choices=["bfloat16", "float16"],
                   help="add a run of the shipped code with this --dtype (its outputs differ: compared, not equal)")
    p.add_argument("--models", nargs="+", metavar="MODEL[:DTYPE]",
                   help="time the shipped code on each of these models instead (outputs differ: scores compared)")
    a = p.parse_args()
    variants = [("shipped", ROOT, [])] + ([] if a.no_plain else [("plain", ROOT, ["--plain"])])
    if a.models:
        if a.before or a.dtype:
            raise SystemExit("error: --models compares models; leave out --before and --dtype")
        a.no_plain = True
        variants = [(m, ROOT, ["--model", m.partition(":")[0], "--dtype", m.partition(":")[2] or "auto"])
                    for m in a.models]
    if a.dtype:
        variants.append((a.dtype, ROOT, ["--dtype", a.dtype]))
    if a.no_plain and not (a.before or a.dtype or a.models):
        raise SystemExit("error: --no-plain leaves nothing to compare with; add --before DIR or --dtype")
    if a.before:
        if not (a.before / "seakr.py").exists():
            raise SystemExit(f"error: {a.before} is not a checkout of this project")
        variants.append(("before", a.before.resolve(), []))
    runs = []
    for item in a.methods:
        method, _, dataset = item.partition(":")
        if method not in DEMO:
            raise SystemExit(f"error: unknown method '{method}' (seakr, ctrla, rowen)")
        runs.append((method, dataset or DEMO[method]))
    figures, lines = {}, []
    if a.models:   # each model's load, alone in a fresh process, before the method runs
        figures["load"] = {m: load_figures(m.partition(":")[0], m.partition(":")[2] or "auto") for m in a.models}
    with tempfile.TemporaryDirectory() as tmp:
        for method, dataset in runs:
            secs = {name: [] for name, _, _ in variants}
            rows, chose, peak = {}, {}, {}
            for r in range(a.repeats):
                for name, code, extra in variants:
                    out = Path(tmp) / f"{method}-{dataset}-{name}-{r}.jsonl"
                    said = {}
                    try:
                        got = run(method, code, dataset, a.limit, out, extra, said)
                    except RunFailed as e:
                        if not a.models:
                            raise
                        print(f"{e.code}\n(left out: {method} on {name})", file=sys.stderr, flush=True)
                        continue
                    # each run as it ends, so that a long benchmark shows (and keeps) its progress
                    print(f"{method} {dataset} {name}: {statistics.median(r['seconds'] for r in got):.1f} s per "
                          f"question (median of {len(got)}), peak {said['peak_gb']} GB", file=sys.stderr, flush=True)
                    chose[name] = said["dtype"]
                    peak[name] = max(peak.get(name, 0.0), said["peak_gb"])
                    secs[name] += [row["seconds"] for row in got]
                    rows.setdefault(name, got)
            med = {name: statistics.median(s) for name, s in secs.items() if s}
            if not rows:
                continue
            ref = rows[next(iter(rows))]
            same = {name: (sum(x["prediction"] == y["prediction"] for x, y in zip(ref, rows[name])),
                           sum(strip_times(x) == strip_times(y) for x, y in zip(ref, rows[name])))
                    for name in rows if name != variants[0][0] and not a.models}
            fig = {"dataset": dataset, "questions": len(ref),
                   **{f"{name}_s_per_q": round(v, 2) for name, v in med.items()},
                   **{f"{name}_peak_gb": v for name, v in peak.items()},
                   **({"speedup_vs_plain": round(med["plain"] / med["shipped"], 2)} if "plain" in med else {})}
            if "before" in med:
                fig["speedup_vs_before"] = round(med["before"] / med["shipped"], 2)
            if a.dtype:   # outputs differ, so how good they are is compared instead
                for name in (a.dtype, "shipped"):
                    quality = {k: v for k, v in eval_metrics.summarize(rows[name]).items()
                               if k in ("em", "f1", "acc", "bleu", "rouge_l", "closer_to_correct")}
                    fig.update({f"{k}_{name}": v for k, v in quality.items()})
                fig[f"speedup_{a.dtype}_vs_shipped"] = round(med["shipped"] / med[a.dtype], 2)
                if "before" in med:
                    fig[f"speedup_{a.dtype}_vs_before"] = round(med["before"] / med[a.dtype], 2)
            if a.models:   # other models answer differently: their scores and precisions instead
                for name in rows:
                    quality = {k: v for k, v in eval_metrics.summarize(rows[name]).items()
                               if k in ("em", "f1", "acc", "bleu", "rouge_l", "closer_to_correct", "retrieval_rate")}
                    fig.update({f"{k}_{name}": v for k, v in quality.items()}, **{f"dtype_{name}": chose[name]})
            for name, (np_, nt) in same.items():
                fig[f"same_predictions_{name}"] = f"{np_}/{len(ref)}"
                fig[f"same_traces_{name}"] = f"{nt}/{len(ref)}"
            figures[f"{method}:{dataset}"] = fig
            lines.append(f"{method:6} {dataset:11} " + " ".join(f"{med[n]:9.1f}" if n in med else f"{'failed':>9}" for n, _, _ in variants)
                         + (f" {fig['speedup_vs_plain']:8.2f}x" if "plain" in med else "")
                         + "  " + ", ".join(f"{n}: predictions {same[n][0]}/{len(ref)}, traces "
                                            f"{same[n][1]}/{len(ref)}" for n in same)
                         + "  ".join(f"{n}: {chose[n] or 'as given'}" for n in chose if a.models))
    print(f"CPU: {models.cpu_name()}")
    for m, f in figures.get("load", {}).items():
        print(f"load {m}: {f['load_s']} s (after {f['import_s']} s of imports; weights memory-mapped)")
    print(f"threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}; seconds per question "
          f"(median over {a.limit} questions x {a.repeats} repeats)")
    print(f"{'method':6} {'dataset':11} " + " ".join(f"{n:>9}" for n, _, _ in variants)
          + ("" if a.no_plain else f" {'vs plain':>9}")
          + ("  precision" if a.models else "  outputs equal to shipped"))
    print("\n".join(lines))
    print("peak memory of each run (GB): " + "; ".join(
        f"{k} " + ", ".join(
            f"{n.removesuffix('_peak_gb')} {v}" for n, v in f.items() if n.endswith("_peak_gb"))
        for k, f in figures.items() if k != "load"))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
