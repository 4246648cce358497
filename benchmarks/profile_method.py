"""Where a method's question spends its time, operator by operator (torch's profiler).

    OMP_NUM_THREADS=2 python benchmarks/profile_method.py --method seakr|ctrla|rowen [--model ALIAS]
                      [--limit N] [--linear auto|plain|onednn] [--dtype auto|float32|bfloat16] [--top 25] [--json FILE]

Runs the method's own main() on its first N demo questions as bench_limit.py does (model loading and
CtrlA's feature extraction left out) under torch.profiler, and prints the operators by their own CPU time
(time inside an operator, less the operators it called), grouped into the linear layers' products,
attention, sampling over the vocabulary and the rest (GROUPS), beside the questions' wall time: what the
operators do not cover is Python and the framework's dispatch between them. bench_limit.py says how far the products are from the
machine's limit; this says what the rest of the time is made of. The profiler slows dispatch by a few
microseconds an operator, so the wall time here is longer than bench_limit's; compare shares, not seconds.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_limit  # noqa: E402
import models  # noqa: E402

# Operators by what they serve. The linear layers' products: nn.Linear's (addmm, mm) and oneDNN's
# (matmul, which only dispatches, goes to the rest). Attention: torch's kernel, and speed._attend_shared_prompt's batched
# products and softmax (no linear layer multiplies batches; a draw's softmax over its top-k is counted here
# too, tens of microseconds a step). Sampling: over the vocabulary, each step's log-probabilities, greedy
# pick and top-k candidates.
GROUPS = {"linear": ("aten::addmm", "aten::mm", "aten::linear", "mkldnn", "onednn"),
          "attention": ("scaled_dot_product", "flash_attention", "aten::bmm", "aten::_softmax"),
          "sampling": ("aten::_log_softmax", "aten::topk", "aten::argmax", "aten::multinomial")}


def group_of(name: str) -> str:
    """Which group an operator's name falls in: linear, attention, sampling, or rest."""
    for group, keys in GROUPS.items():
        if any(k in name for k in keys):
            return group
    return "rest"


class Profiled:
    """Stands in for bench_limit's Recorder: switched on for each question, it profiles the question. Every
    FLUSH forward passes of a model it folds the events gathered so far into its totals and starts afresh
    (a whole question's events at once outgrew 16 GB on the 0.5B's SeaKR question); the folding is left
    out of the wall time."""

    FLUSH = 32

    def __init__(self):
        self.events: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])   # name -> [self seconds, calls]
        self._prof = None
        self._steps = 0
        self._hooked = set()
        self.wall = 0.0

    def attach(self, model) -> None:
        if id(model) not in self._hooked:
            self._hooked.add(id(model))
            model.register_forward_hook(self._step_end)

    def _step_end(self, module, args, out) -> None:
        self._steps += 1
        if self._prof is not None and self._steps % self.FLUSH == 0:
            self._fold()
            self._begin()

    def _begin(self) -> None:
        self._prof = profile(activities=[ProfilerActivity.CPU])
        self._prof.__enter__()
        self._start = time.perf_counter()

    def _fold(self) -> None:
        self.wall += time.perf_counter() - self._start
        self._prof.__exit__(None, None, None)
        for e in self._prof.key_averages():
            self.events[e.key][0] += e.self_cpu_time_total / 1e6
            self.events[e.key][1] += e.count
        self._prof = None

    @property
    def on(self) -> bool:
        return self._prof is not None

    @on.setter
    def on(self, value: bool) -> None:
        if value and self._prof is None:
            self._begin()
        elif not value and self._prof is not None:
            self._fold()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--method", required=True, choices=sorted(bench_limit.DEMO))
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--limit", type=int, default=1)
    p.add_argument("--linear", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--top", type=int, default=25, help="operators to print")
    p.add_argument("--json", help="write the figures to this file too")
    a, rest = p.parse_known_args()
    argv = ["--model", a.model, "--limit", str(a.limit), "--dtype", a.dtype, "--device", "cpu",
            "--linear", a.linear, *[x for x in rest if x != "--"]]
    dtype = models.resolve_dtype(a.dtype, "cpu")[0]                     # what auto resolves to, recorded
    linear = models.resolve_linear(a.linear, "cpu", dtype)[0]
    prof = Profiled()
    rows, _ = bench_limit.run_method(a.method, argv, prof)
    ops = sorted(prof.events.items(), key=lambda kv: -kv[1][0])
    groups = defaultdict(float)
    for name, (sec, _) in ops:
        groups[group_of(name)] += sec
    covered = sum(groups.values())
    print(f"CPU: {models.cpu_name()}; threads: {torch.get_num_threads()}; {a.method} on {a.model}, "
          f"{a.limit} question(s), {dtype}, {linear} linear")
    print(f"wall {prof.wall:.2f} s (profiled); operators' own time {covered:.2f} s: "
          + ", ".join(f"{g} {s:.2f} s" for g, s in sorted(groups.items(), key=lambda kv: -kv[1]))
          + f"; not in any operator {prof.wall - covered:.2f} s")
    print(f"{'operator':48s} {'group':9s} {'seconds':>8s} {'calls':>8s} {'us/call':>8s}")
    for name, (sec, n) in ops[:a.top]:
        print(f"{name[:48]:48s} {group_of(name):9s} {sec:8.3f} {n:8d} {1e6 * sec / max(n, 1):8.1f}")
    figures = {"cpu": models.cpu_name(), "threads": torch.get_num_threads(), "method": a.method,
               "model": a.model, "questions": a.limit, "linear": linear, "dtype": dtype,
               "wall_seconds": round(prof.wall, 2), "groups_seconds": {g: round(s, 3) for g, s in groups.items()},
               "outside_operators_seconds": round(prof.wall - covered, 2),
               "predictions": {r["id"]: r["prediction"] for r in rows},   # as bench_limit records them
               "operators": [{"name": n, "seconds": round(s, 4), "calls": c} for n, (s, c) in ops[:a.top]]}
    line = json.dumps(figures)
    print(line)
    if a.json:
        Path(a.json).write_text(line + "\n")


if __name__ == "__main__":
    main()
