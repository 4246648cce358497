"""How far a method's questions run from this CPU's limit for their matrix products.

    python benchmarks/bench_limit.py --method seakr|ctrla|rowen [--model ALIAS] [--limit N] [--linear auto|plain|onednn]
                                     [--dtype auto|float32|bfloat16]
    python benchmarks/bench_limit.py --products [--model ALIAS] [--dtypes float32 bfloat16]
    python benchmarks/bench_limit.py --steps [--model ALIAS]

Runs the method's own main() on its first N demo questions (seakr: hotpotqa, ctrla: popqa, rowen:
truthfulqa; arguments after `--` go to the method), with every forward pass of a model (a "step") and
every linear layer inside it timed by hooks, from the first question on (model loading and CtrlA's
feature extraction are not counted). Then, in the same process:

- the same products timed alone: each (weight shape, rows) the run multiplied, through the run's own
  linear modules, one pass over all modules of that shape (cold weights, as in a step), times the
  number of such products in the run;
- the machine's rates, each kernel (plain: nn.Linear's, MKL for float32; onednn: models.OneDNNLinear)
  on copies of one decoder layer's weights filling at least 256 MB: the GEMM rate at the decode shape
  (--rows), the prefill shape (--prefill) and a large one (--large); the weight-streaming rate (one row
  through every copy, and a plain sum over them);
- the limit of each step: the larger of its FLOPs at the best GEMM rate (any kernel, prefill or large
  rows) and its weight bytes at the best streaming rate. The limit counts the linear layers only
  (attention and the KV cache are left out), so it is a bound no implementation of these products
  beats here, not a target.

Prints the CPU, the steps by live rows (a histogram: decoding steps by rows, prefills together), the
totals, and one JSON line last with at least seconds, limit_seconds, ratio_to_limit, linear_share
(linear layers' time over the questions' time) and cpu. Run it with --linear plain and --linear
onednn for a before and after. --products instead times each linear shape of the model alone (from
its config, no weights loaded): plain against onednn, interleaved, at 1, 2, --rows and --prefill rows,
in each of --dtypes (--openblas: numpy's OpenBLAS beside them, float32). --steps instead loads the model
twice, plain and onednn, and times whole forward passes in turn: a --prefill-token prefill and one
decoding step of 1, 2 and --rows rows on its cache.
Set OMP_NUM_THREADS to choose the threads.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import common  # noqa: E402
import models  # noqa: E402

DEMO = {"seakr": "hotpotqa", "ctrla": "popqa", "rowen": "truthfulqa"}   # each method's demo set
RATE_BYTES = 2 ** 28     # weights behind each rate: far more than any cache, so they stream from memory


def product_flops(rows: int, n_in: int, n_out: int) -> int:
    """Multiply-adds of rows x n_in times n_in x n_out, counted as 2 FLOPs each."""
    return 2 * rows * n_in * n_out


def step_limit(flops: float, weight_bytes: float, gemm_rate: float, stream_rate: float) -> float:
    """Seconds a step needs at least: its FLOPs at the best GEMM rate, or its weights read once at
    the streaming rate, whichever takes longer (FLOP/s, bytes/s)."""
    return max(flops / gemm_rate, weight_bytes / stream_rate)


def rows_histogram(steps: list[dict], gemm_rate: float, stream_rate: float) -> dict[str, dict]:
    """Steps grouped by live rows: decoding steps (one new token a row) under their row count, every
    prefill (several tokens in a row) under "prefill"; each group's step count, tokens, seconds in the
    model and in its linear layers, FLOPs, weight bytes and limit seconds. Decoding groups come first,
    by rows."""
    groups = defaultdict(lambda: dict(steps=0, tokens=0, seconds=0.0, linear_seconds=0.0, flops=0,
                                      weight_bytes=0, limit_seconds=0.0))
    for s in steps:
        g = groups["prefill" if s["tokens"] > s["rows"] else str(s["rows"])]
        g["steps"] += 1
        for k in ("tokens", "seconds", "linear_seconds", "flops", "weight_bytes"):
            g[k] += s[k]
        g["limit_seconds"] += step_limit(s["flops"], s["weight_bytes"], gemm_rate, stream_rate)
    return dict(sorted(groups.items(), key=lambda kv: (kv[0] == "prefill", int(kv[0]) if kv[0] != "prefill" else 0)))


# ----------------------------------------------------------------------------------------------
# Recording the run: hooks on every model loaded and on each of its linear layers

def linear_modules(model) -> list:
    """The model's linear layers: nn.Linear, models.OneDNNLinear, int8 dynamic ones (anything with
    in_features and out_features)."""
    return [m for m in model.modules() if hasattr(m, "in_features") and hasattr(m, "out_features")]


def weight_bytes(module) -> int:
    """Bytes of a linear layer's weights and bias as a step reads them."""
    w = module.weight() if callable(module.weight) else module.weight      # int8: a method
    size = 1 if w.dtype in (torch.qint8, torch.quint8, torch.int8) else torch.finfo(w.dtype).bits // 8
    bias = module.bias() if callable(getattr(module, "bias", None)) else getattr(module, "bias", None)
    return module.in_features * module.out_features * size + (0 if bias is None else bias.numel() * bias.element_size())


def shape_key(module) -> tuple:
    return type(module).__name__, module.in_features, module.out_features, weight_bytes(module)


class Recorder:
    """Times every step (a forward pass of a model) and every linear layer inside it while `on`.

    Each step: rows (the batch), tokens (rows x new tokens), seconds, linear_seconds, flops and
    weight_bytes of its linear products. `calls` counts the products by (shape_key, rows) for the
    replay alone; `groups` holds each shape's modules."""

    def __init__(self):
        self.on, self.steps, self.calls, self.groups = False, [], Counter(), defaultdict(list)
        self._step, self._t, self._models = None, {}, set()

    def attach(self, model) -> None:
        if id(model) in self._models:
            return
        self._models.add(id(model))
        model.register_forward_pre_hook(self._step_start, with_kwargs=True)
        model.register_forward_hook(self._step_end)
        for m in linear_modules(model):
            self.groups[shape_key(m)].append(m)
            m.register_forward_pre_hook(self._linear_start)
            m.register_forward_hook(self._linear_end)

    def _step_start(self, model, args, kwargs):
        if not self.on:
            return
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs["inputs_embeds"][..., 0]
        self._step = dict(rows=ids.shape[0], tokens=ids.numel(), seconds=time.perf_counter(),
                          linear_seconds=0.0, flops=0, weight_bytes=0)

    def _step_end(self, model, args, out):
        if self.on and self._step is not None:
            self._step["seconds"] = time.perf_counter() - self._step["seconds"]
            self.steps.append(self._step)
            self._step = None

    def _linear_start(self, module, args):
        if self.on:
            self._t[id(module)] = time.perf_counter()

    def _linear_end(self, module, args, out):
        if not self.on or self._step is None:
            return
        spent = time.perf_counter() - self._t.pop(id(module))
        rows = args[0].numel() // module.in_features
        key = shape_key(module)
        self.calls[key, rows] += 1
        s = self._step
        s["linear_seconds"] += spent
        s["flops"] += product_flops(rows, module.in_features, module.out_features)
        s["weight_bytes"] += key[3]


def run_method(method: str, argv: list[str], recorder: Recorder) -> tuple[list[dict], list[float]]:
    """The method's main(argv), recording from its first question on: (output rows, seconds per question)."""
    module = importlib.import_module(method)
    real_run, seconds = common.run, []

    def timed(solve):
        def solve_timed(rec):
            recorder.on = True
            start = time.perf_counter()
            try:
                return solve(rec)
            finally:
                seconds.append(time.perf_counter() - start)
                recorder.on = False
        return solve_timed

    def run(args, name, solve, records=None):
        for model in common.loaded_models():     # every model the method loaded (Rowen: two)
            recorder.attach(model)
        return real_run(args, name, timed(solve), records)

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.jsonl"
        common.run = run
        try:
            module.main(argv + ["--output", str(out), "--overwrite"])
        finally:
            common.run = real_run
        rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return rows, seconds


@torch.inference_mode()
def time_alone(recorder: Recorder) -> float:
    """Seconds the run's linear products take alone: for each (shape, rows), one pass through every
    module of that shape (after one warm-up call: oneDNN builds a kernel per new shape, as in the run),
    its time per module times the number of such products in the run."""
    recorder.on = False
    total = 0.0
    for (key, rows), count in sorted(recorder.calls.items(), key=lambda kv: kv[0][1]):
        mods = recorder.groups[key]
        x = torch.randn(rows, key[1], dtype=input_dtype(mods[0]))
        mods[0](x)
        start = time.perf_counter()
        for m in mods:
            m(x)
        total += count * (time.perf_counter() - start) / len(mods)
    return total


def input_dtype(module):
    """What a linear layer takes: its weights' precision (float32 for int8 dynamic layers)."""
    w = getattr(module, "weight", None)
    return torch.float32 if w is None or callable(w) else w.dtype


# ----------------------------------------------------------------------------------------------
# The machine's rates

def layer_shapes(cfg) -> list[tuple[str, int, int]]:
    """(name, in, out) of one decoder layer's linear layers, then lm_head, from a model's config."""
    h, inter = cfg.hidden_size, cfg.intermediate_size
    head = getattr(cfg, "head_dim", None) or h // cfg.num_attention_heads
    q, kv = cfg.num_attention_heads * head, cfg.num_key_value_heads * head
    return [("q", h, q), ("k", h, kv), ("v", h, kv), ("o", q, h), ("gate", h, inter), ("up", h, inter),
            ("down", inter, h), ("lm_head", h, cfg.vocab_size)]


def kernels_for(dtype: torch.dtype) -> list[str]:
    """The kernels that run this precision here: plain always, onednn where torch has it."""
    name = str(dtype).removeprefix("torch.")
    try:
        models.resolve_linear("onednn", "cpu", name)
        return ["plain", "onednn"]
    except common.InputError:
        return ["plain"]


class OpenBLASLinear(torch.nn.Module):
    """--products --openblas only: a float32 linear layer computed by numpy's matmul, which runs the
    OpenBLAS that numpy's wheels ship (sgemv for one row, sgemm for more), on the dense weight.
    Measured beside the kernels the methods can choose; not one of them (benchmarks/README.md)."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight.detach()
        self._t = self.weight.numpy().T

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(x.numpy() @ self._t)


KERNELS = {"plain": lambda lin: lin, "onednn": models.OneDNNLinear, "openblas": OpenBLASLinear}


def make_layers(shapes: list[tuple[int, int]], dtype, kernel: str, min_bytes: int = RATE_BYTES) -> list:
    """Linear layers of these shapes (random weights), repeated until they hold min_bytes of weights."""
    torch.manual_seed(0)
    layers, size = [], 0
    while size < min_bytes or not layers:
        for n_in, n_out in shapes:
            lin = torch.nn.Linear(n_in, n_out, bias=False, dtype=dtype)
            layers.append(KERNELS[kernel](lin))
            size += n_in * n_out * lin.weight.element_size()
    return layers


@torch.inference_mode()
def time_pass(layers: list, rows: int, dtype) -> float:
    """Seconds for one pass of `rows` rows through every layer (the first layer once before: warm-up)."""
    x = torch.randn(rows, layers[0].in_features, dtype=dtype)
    xs = {n: torch.randn(rows, n, dtype=dtype) for n in {m.in_features for m in layers}}
    layers[0](x)
    start = time.perf_counter()
    for m in layers:
        m(xs[m.in_features])
    return time.perf_counter() - start


def machine_rates(shapes: list[tuple[int, int]], dtype, rows: dict[str, int], repeats: int = 3) -> dict:
    """GEMM rates (FLOP/s) of each kernel at each named row count and the streaming rates (bytes/s):
    one row through every layer per kernel, and a plain sum over the dense weights. Kernels are
    timed pass by pass in turn (medians of `repeats`), so a busy machine slows both alike."""
    kernels = kernels_for(dtype)
    sets = {k: make_layers(shapes, dtype, k) for k in kernels}
    layers = sets["plain"]
    flops_per_row = sum(product_flops(1, m.in_features, m.out_features) for m in layers)
    size = sum(m.weight.numel() * m.weight.element_size() for m in layers)
    gemm = {k: {} for k in kernels}
    stream = {}
    for name, n in rows.items():
        times = defaultdict(list)
        for _ in range(repeats):
            for k in kernels:
                times[k].append(time_pass(sets[k], n, dtype))
        for k in kernels:
            gemm[k][name] = flops_per_row * n / statistics.median(times[k])
            if n == 1:
                stream[k] = size / statistics.median(times[k])
    weights = [m.weight for m in layers]
    sums = []
    for _ in range(repeats):
        start = time.perf_counter()
        for w in weights:
            w.sum()
        sums.append(time.perf_counter() - start)
    stream["read"] = size / statistics.median(sums)
    return {"gemm": gemm, "stream": stream, "weights_bytes": size}


# ----------------------------------------------------------------------------------------------
# --products: each linear shape alone, plain against onednn

def products_table(cfg, dtypes: list[str], rows_list: list[int], prefill: int, repeats: int,
                   openblas: bool = False) -> list[dict]:
    """Milliseconds and GFLOP/s of each linear shape of the model per kernel, at each row count and at
    the prefill (not lm_head: it sees one row per sequence, logits_to_keep=1), kernels in turn; with
    `openblas`, numpy's OpenBLAS too, in float32 (OpenBLASLinear)."""
    out = []
    for dt in dtypes:
        dtype = getattr(torch, dt)
        kernels = kernels_for(dtype) + (["openblas"] if openblas and dt == "float32" else [])
        for name, n_in, n_out in layer_shapes(cfg):
            sets = {k: make_layers([(n_in, n_out)], dtype, k, min_bytes=RATE_BYTES // 2) for k in kernels}
            for n in rows_list + ([] if name == "lm_head" else [prefill]):
                times = defaultdict(list)
                for _ in range(repeats):
                    for k in kernels:
                        times[k].append(time_pass(sets[k], n, dtype) / len(sets[k]))
                row = {"dtype": dt, "shape": name, "in": n_in, "out": n_out, "rows": n}
                for k in kernels:
                    t = statistics.median(times[k])
                    row[k] = {"ms": round(t * 1e3, 3), "gflops": round(product_flops(n, n_in, n_out) / t / 1e9, 1)}
                if "openblas" in row and "onednn" in row:
                    row["openblas_over_onednn"] = round(row["onednn"]["ms"] / row["openblas"]["ms"], 2)
                if "onednn" in row:
                    row["onednn_speedup"] = round(row["plain"]["ms"] / row["onednn"]["ms"], 2)
                else:
                    row["onednn"] = "refused here: " + _why_not_onednn(dt)
                out.append(row)
                print(f"{dt:9} {name:8} {n_in:>6}x{n_out:<7} rows {n:>4}: " + "  ".join(
                    f"{k} {row[k]['ms']:8.2f} ms {row[k]['gflops']:6.1f} GF/s" for k in kernels)
                    + (f"  onednn {row['onednn_speedup']:.2f}x" if "onednn_speedup" in row else ""), flush=True)
    return out


def _why_not_onednn(dtype: str) -> str:
    try:
        models.resolve_linear("onednn", "cpu", dtype)
        return ""
    except common.InputError as e:
        return str(e)


# ----------------------------------------------------------------------------------------------
# --steps: whole-model steps, plain against onednn

@torch.inference_mode()
def steps_table(model_name: str, dtype: str, prefill: int, rows_list: list[int], repeats: int) -> dict:
    """Seconds of whole forward passes of the model loaded twice (plain and onednn linear layers), in
    turn, pair by pair: a prefill of `prefill` random tokens, and one decoding step of each row count
    on that prompt's cache (medians of `repeats`; the first pass of each model, which reads its
    weights from disk, is left out)."""
    import copy
    models = {k: common.load_model(model_name, dtype, "cpu", k)[0] for k in ("plain", "onednn")}
    torch.manual_seed(0)
    ids = torch.randint(100, 20000, (1, prefill))
    past, times = {}, defaultdict(list)

    def run_prefill(k):
        start = time.perf_counter()
        out = models[k](input_ids=ids, use_cache=True, logits_to_keep=1)
        return time.perf_counter() - start, out.past_key_values

    def run_step(k, rows):
        cache = copy.deepcopy(past[k])
        cache.batch_repeat_interleave(rows)
        x = torch.randint(100, 20000, (rows, 1))
        start = time.perf_counter()
        models[k](input_ids=x, past_key_values=cache, use_cache=True, logits_to_keep=1)
        return time.perf_counter() - start

    for k in models:
        run_prefill(k)
        _, past[k] = run_prefill(k)
    for _ in range(repeats):
        for k in models:
            times[k, "prefill"].append(run_prefill(k)[0])
        for rows in rows_list:
            for k in models:
                times[k, rows].append(run_step(k, rows))
    table = {}
    for what in ["prefill"] + rows_list:
        plain, fast = statistics.median(times["plain", what]), statistics.median(times["onednn", what])
        name = f"prefill {prefill}" if what == "prefill" else f"{what} rows"
        table[name] = {"plain_s": round(plain, 3), "onednn_s": round(fast, 3), "onednn_speedup": round(plain / fast, 2)}
        print(f"{name:12}: plain {plain:7.3f} s  onednn {fast:7.3f} s  {plain / fast:5.2f}x", flush=True)
    return table


# ----------------------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--method", choices=list(DEMO), help="the method to run on its demo set")
    p.add_argument("--model", default=common.DEFAULT_MODEL, help="alias, HF id or directory")
    p.add_argument("--limit", type=int, default=1, help="the first N demo questions")
    p.add_argument("--dtype", default="auto", choices=common.DTYPES, help="as a method's run resolves it")
    p.add_argument("--linear", default="auto", choices=common.LINEARS, help="kernel of the linear layers")
    p.add_argument("--rows", type=int, default=21, help="the decode shape's rows (SeaKR: 1 greedy + 20 samples)")
    p.add_argument("--prefill", type=int, default=600, help="the prefill shape's rows")
    p.add_argument("--large", type=int, default=1024, help="rows of the large shape (the best GEMM rate)")
    p.add_argument("--products", action="store_true", help="only the per-shape table, plain against onednn")
    p.add_argument("--steps", action="store_true", help="only whole-model steps, plain against onednn (the model "
                   "loaded twice)")
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], help="--products: precisions")
    p.add_argument("--openblas", action="store_true", help="--products: numpy's OpenBLAS as a third kernel "
                   "(float32; measured, not offered)")
    p.add_argument("--repeats", type=int, default=3, help="timed passes per rate (medians)")
    a, rest = p.parse_known_args()
    rest = [x for x in rest if x != "--"]
    cpu = models.cpu_name()
    print(f"CPU: {cpu}; threads: {torch.get_num_threads()} (OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', 'unset')}); load average {os.getloadavg()[0]:.2f}", flush=True)
    from transformers import AutoConfig
    cfg = AutoConfig.from_pretrained(common.model_path(a.model))
    if a.products:
        table = products_table(cfg, a.dtypes, [1, 2, a.rows], a.prefill, a.repeats, a.openblas)
        print(json.dumps({"cpu": cpu, "model": a.model, "products": table}))
        return
    dtype = models.resolve_dtype(a.dtype, "cpu")[0]
    if a.steps:
        table = steps_table(a.model, dtype, a.prefill, [1, 2, a.rows], a.repeats)
        print(json.dumps({"cpu": cpu, "model": a.model, "dtype": dtype, "steps": table,
                          "load_average": os.getloadavg()[0]}))
        return
    if not a.method:
        p.error("pass --method (or --products)")
    linear = models.resolve_linear(a.linear, "cpu", dtype)[0]
    argv = ["--model", a.model, "--limit", str(a.limit), "--dtype", a.dtype, "--device", "cpu",
            "--linear", a.linear] + rest
    print(f"{a.method} {' '.join(argv)}", flush=True)
    rec = Recorder()
    rows, per_question = run_method(a.method, argv, rec)
    seconds = sum(per_question)
    model_s = sum(s["seconds"] for s in rec.steps)
    linear_s = sum(s["linear_seconds"] for s in rec.steps)
    print(f"{len(rows)} question(s) in {seconds:.1f} s; timing the same products alone ...", flush=True)
    alone = time_alone(rec)
    print("measuring the machine's rates ...", flush=True)
    shapes = [(i, o) for name, i, o in layer_shapes(cfg) if name != "lm_head"]
    rates = machine_rates(shapes, getattr(torch, dtype), {"one row": 1, "decode": a.rows, "prefill": a.prefill,
                                                          "large": a.large}, a.repeats)
    best_gemm = max(r[n] for r in rates["gemm"].values() for n in ("prefill", "large"))
    best_stream = max(rates["stream"].values())
    hist = rows_histogram(rec.steps, best_gemm, best_stream)
    limit = sum(g["limit_seconds"] for g in hist.values())
    flops = sum(s["flops"] for s in rec.steps)
    wbytes = sum(s["weight_bytes"] for s in rec.steps)

    print(f"\n{a.method}, {a.model} ({dtype}, linear layers: {linear}), {len(rows)} question(s) of its demo set")
    print(f"{'rows':>8} {'steps':>6} {'tokens':>7} {'model s':>8} {'linear s':>9} {'GFLOP':>9} {'weight GB':>10}"
          f" {'limit s':>8} {'x limit':>8}")
    for name, g in hist.items():
        print(f"{name:>8} {g['steps']:6d} {g['tokens']:7d} {g['seconds']:8.1f} {g['linear_seconds']:9.1f} "
              f"{g['flops'] / 1e9:9.1f} {g['weight_bytes'] / 1e9:10.1f} {g['limit_seconds']:8.1f} "
              f"{g['seconds'] / max(g['limit_seconds'], 1e-9):8.2f}")
    print("GEMM GFLOP/s (rows: " + ", ".join(f"{n} {r}" for n, r in [("decode", a.rows), ("prefill", a.prefill),
                                                                     ("large", a.large)]) + "): " +
          "; ".join(f"{k} " + ", ".join(f"{n} {v / 1e9:.1f}" for n, v in r.items()) for k, r in rates["gemm"].items()))
    print("weight streaming GB/s: " + ", ".join(f"{k} {v / 1e9:.1f}" for k, v in rates["stream"].items())
          + f" (over {rates['weights_bytes'] / 1e6:.0f} MB)")
    print(f"limit: FLOPs at {best_gemm / 1e9:.1f} GFLOP/s or weights at {best_stream / 1e9:.1f} GB/s, per step: "
          f"{limit:.1f} s")
    print(f"questions {seconds:.1f} s = {seconds / limit:.2f}x the limit; inside the model {model_s:.1f} s "
          f"({model_s / seconds:.0%}); inside linear layers {linear_s:.1f} s ({linear_s / seconds:.0%}); "
          f"the same products alone {alone:.1f} s")
    for r in rows:
        print(f"  {r['id']}: {r['prediction']!r}")
    print(json.dumps({
        "seconds": round(seconds, 2), "limit_seconds": round(limit, 2), "ratio_to_limit": round(seconds / limit, 3),
        "linear_share": round(linear_s / seconds, 3), "cpu": cpu, "method": a.method, "model": a.model,
        "dtype": dtype, "linear": linear, "questions": len(rows), "model_seconds": round(model_s, 2),
        "linear_seconds": round(linear_s, 2), "linear_alone_seconds": round(alone, 2),
        "steps": len(rec.steps), "flops": flops, "weight_bytes": wbytes,
        "gemm_gflops": {k: {n: round(v / 1e9, 1) for n, v in r.items()} for k, r in rates["gemm"].items()},
        "stream_gbs": {k: round(v / 1e9, 1) for k, v in rates["stream"].items()},
        "best_gemm_gflops": round(best_gemm / 1e9, 1), "best_stream_gbs": round(best_stream / 1e9, 1),
        "rows_histogram": {n: {k: round(v, 2) if isinstance(v, float) else v for k, v in g.items()}
                           for n, g in hist.items()},
        "per_question_seconds": [round(s, 2) for s in per_question],
        "predictions": {r["id"]: r["prediction"] for r in rows}}))


if __name__ == "__main__":
    main()
