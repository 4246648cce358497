"""torch's CPU attention kernel on 16-bit states against float32 ones, at a decoding step's shapes.

    OMP_NUM_THREADS=2 python benchmarks/bench_attention.py [--repeats 50] [--json FILE]
    OMP_NUM_THREADS=2 python benchmarks/bench_attention.py --model qwen2.5-coder-0.5b [--rows 9] [--context 400]

One query per row (a decoding step), Qwen2.5-Coder-0.5B's heads (14 query heads over 2 key/value heads,
64 dimensions), rows and cache lengths as the methods' steps have them (Rowen's batches of perturbed
questions under a padding mask, SeaKR's 21 rows, CtrlA's one row), and a prefill for comparison. Each
shape is timed three ways, their rounds interleaved so that a drift of the machine falls on all three:
float32 states, bfloat16 states through torch's kernel, and bfloat16 states attended in float32 and cast
back (what speed._sdpa_grouped does for a 16-bit decoding step on a CPU without AMX). Prints each way's
median ms per call and the largest difference of the two bfloat16 ways from float32's output.

--model instead times the model's whole decoding steps in bfloat16 (oneDNN's linear): --rows prompts of
up to --context random tokens, left-padded (Rowen's batches), one token a row a step on their cache, with
a step's attention in float32 as the fast path has it without AMX and with torch's bfloat16 kernel
(speed.HALF emptied; as the fast path has it with AMX), and the float32 model's step beside them: the
median ms of 32 steps, 3 rounds in turn.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import common  # noqa: E402
import models  # noqa: E402
import speed  # noqa: E402

SHAPES = [  # (rows, queries, keys, padding mask)
    (1, 1, 600, False),      # CtrlA: one row, no mask
    (9, 1, 400, True),       # Rowen: a batch of perturbed questions
    (9, 1, 1000, True),
    (21, 1, 800, True),      # a SeaKR step's 21 rows, each with its own keys
    (1, 600, 600, False),    # a prefill, causal: 16-bit as it was
]


def attend(q, k, v, mask, causal, up: bool):
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if up:
        return sdpa(q.float(), k.float(), v.float(), attn_mask=mask, is_causal=causal, enable_gqa=True).to(q.dtype)
    return sdpa(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=True)


def model_steps(alias: str, rows: int, context: int) -> dict:
    """Median ms a decoding step (rows x one token on a left-padded prompt cache, the shapes fixed whatever
    the tokens): bfloat16 with float32 attention, bfloat16 throughout, float32."""
    from transformers import DynamicCache
    torch.manual_seed(0)
    ids = torch.randint(100, 20000, (rows, context))
    mask = torch.ones(rows, context, dtype=torch.long)
    for i in range(rows):
        mask[i, :7 * i] = 0                                                # row i left-padded by 7 i
    loaded = {dt: common.load_model(alias, dt, "cpu", "onednn")[0] for dt in ("bfloat16", "float32")}
    cast = models.attends_in_float32("")                                   # speed.HALF on a CPU without AMX
    ways = {"bfloat16, float32 attention": ("bfloat16", cast), "bfloat16": ("bfloat16", ()),
            "float32": ("float32", cast)}
    times = {w: [] for w in ways}
    half = speed.HALF
    try:
        with torch.inference_mode():
            for _ in range(3):
                for w, (dt, kinds) in ways.items():
                    model, speed.HALF = loaded[dt], kinds
                    past, m = DynamicCache(config=model.config), mask
                    out = model(input_ids=ids, attention_mask=m, past_key_values=past, use_cache=True)
                    for step in range(33):
                        token = out.logits[:, -1].argmax(-1, keepdim=True)
                        m = torch.cat([m, torch.ones(rows, 1, dtype=torch.long)], 1)
                        start = time.perf_counter()
                        out = model(input_ids=token, attention_mask=m, past_key_values=out.past_key_values,
                                    use_cache=True)
                        if step:                                           # the first step warms
                            times[w].append(1000 * (time.perf_counter() - start))
    finally:
        speed.HALF = half
    return {w: round(statistics.median(t), 1) for w, t in times.items()}


def emit(figures: dict, path: str | None) -> None:
    """The figures as the JSON line printed last, and into path too where one is given."""
    line = json.dumps({"cpu": models.cpu_name(), "threads": torch.get_num_threads(), **figures})
    print(line)
    if path:
        Path(path).write_text(line + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=50, help="timed calls per way and shape (medians)")
    p.add_argument("--json", help="write the figures to this file too")
    p.add_argument("--model", help="time whole decoding steps of this model instead")
    p.add_argument("--rows", type=int, default=9, help="--model: prompts decoded together")
    p.add_argument("--context", type=int, default=400, help="--model: the longest prompt's tokens")
    a = p.parse_args()
    torch.manual_seed(0)
    print(f"CPU: {models.cpu_name()}; threads: {torch.get_num_threads()}")
    if a.model:
        ms = model_steps(a.model, a.rows, a.context)
        print(f"{a.model}, {a.rows} rows of up to {a.context} tokens, ms a decoding step: "
              + ", ".join(f"{w} {m}" for w, m in ms.items()))
        emit({"model": a.model, "rows": a.rows, "context": a.context, "ms_a_step": ms}, a.json)
        return
    out = []
    for rows, n_q, n_k, padded in SHAPES:
        q, k, v = torch.randn(rows, 14, n_q, 64), torch.randn(rows, 2, n_k, 64), torch.randn(rows, 2, n_k, 64)
        mask = None
        if padded:
            mask = torch.ones(rows, 1, n_q, n_k, dtype=torch.bool).tril(n_k - n_q)
            for i in range(rows):
                mask[i, ..., :i] = False                                           # row i left-padded by i
        causal = mask is None and n_q > 1
        half = [t.bfloat16() for t in (q, k, v)]
        ways = {"float32": ((q, k, v), False), "bfloat16": (half, False), "bfloat16 in float32": (half, True)}
        times = {w: [] for w in ways}
        with torch.inference_mode():
            for w, (t, up) in ways.items():
                attend(*t, mask, causal, up)                                       # warm
            for _ in range(a.repeats):
                for w, (t, up) in ways.items():
                    start = time.perf_counter()
                    attend(*t, mask, causal, up)
                    times[w].append(1000 * (time.perf_counter() - start))
            ref = attend(q, k, v, mask, causal, False)
            diff = {w: (attend(*ways[w][0], mask, causal, ways[w][1]).float() - ref).abs().max().item()
                    for w in ("bfloat16", "bfloat16 in float32")}
        row = {"rows": rows, "queries": n_q, "keys": n_k, "padded": padded,
               "ms": {w: round(statistics.median(t), 3) for w, t in times.items()},
               "max_diff_from_float32": {w: float(f"{d:.3g}") for w, d in diff.items()}}
        out.append(row)
        print(f"{rows:3d} rows x {n_q:3d} queries x {n_k:4d} keys{' (padded)' if padded else ''}: "
              + ", ".join(f"{w} {m} ms" for w, m in row["ms"].items())
              + f"; off float32's output by {diff['bfloat16']:.2g} (bfloat16), {diff['bfloat16 in float32']:.2g}")
    emit({"shapes": out}, a.json)


if __name__ == "__main__":
    main()
