"""torch.compile against the eager paths on a decoding step: what fusing the small operators would gain.

    OMP_NUM_THREADS=2 python benchmarks/compile_step.py [--model smollm2-135m] [--context 300] [--steps 32] [--dtype bfloat16]

A method's one-row decoding steps spend tens of milliseconds outside the linear layers (norms, rotary
embeddings, attention over the cache, dozens of small operators: bench_limit.py --products). inductor
(torch.compile) fuses those into generated C++ kernels, with a static KV cache of fixed shapes. This times
one greedy step at a `--context`-token cache, one row, float32 (or --dtype bfloat16), in one process,
the three paths' rounds interleaved so that a drift of the machine falls on all three: eager with
nn.Linear (--linear plain), eager with OneDNNLinear (--linear onednn) and the compiled plain model. It prints each path's median
ms per step and the compile time, and checks that the compiled step's logits match eager's. --json FILE
writes the figures. The methods do not compile: their calls vary in rows and prompt lengths (a compile
per shape) and read states through hooks (see benchmarks/README.md for the figures that decided it).
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import DynamicCache, StaticCache

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import common  # noqa: E402
import models  # noqa: E402


@torch.inference_mode()
def decode(model, forward, prompt: torch.Tensor, steps: int, static: bool) -> tuple[list[float], torch.Tensor]:
    """(seconds of each greedy step after the prompt's prefill, the last step's logits [1, vocab])."""
    n = prompt.shape[1]
    cache = (StaticCache(config=model.config, max_cache_len=n + steps) if static
             else DynamicCache(config=model.config))
    out = forward(input_ids=prompt, past_key_values=cache, use_cache=True, cache_position=torch.arange(n),
                  logits_to_keep=1)
    times = []
    for i in range(steps):
        start = time.perf_counter()
        out = forward(input_ids=out.logits[:, -1:].argmax(-1), past_key_values=cache, use_cache=True,
                      cache_position=torch.tensor([n + i]), logits_to_keep=1)
        times.append(time.perf_counter() - start)
    return times, out.logits[:, -1].float()


def compare(plain, prompt: torch.Tensor, steps: int, rounds: int, warm: int = 4) -> dict:
    """Each path's step times (the first `warm` steps of each round left out), the compile time, and the
    largest difference of the compiled path's last logits from eager's."""
    onednn = copy.deepcopy(plain)
    models.use_onednn_linear(onednn)
    start = time.perf_counter()
    compiled = torch.compile(plain.forward, dynamic=False)
    _, logits = decode(plain, compiled, prompt, steps, static=True)
    compile_s = time.perf_counter() - start
    _, eager_logits = decode(plain, plain.forward, prompt, steps, static=False)
    paths = {"eager plain": (plain, plain.forward, False), "eager onednn": (onednn, onednn.forward, False),
             "compiled plain": (plain, compiled, True)}
    times = {name: [] for name in paths}
    for _ in range(rounds):
        for name, (model, forward, static) in paths.items():
            times[name] += decode(model, forward, prompt, steps, static)[0][warm:]
    return {"compile_s": round(compile_s, 1), "max_logit_diff": float((logits - eager_logits).abs().max()),
            "ms_per_step": {name: round(1000 * statistics.median(t), 1) for name, t in times.items()},
            "min_ms_per_step": {name: round(1000 * min(t), 1) for name, t in times.items()},
            "steps_timed": len(times["eager plain"])}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--context", type=int, default=300, help="prompt tokens in the cache before the timed steps")
    p.add_argument("--steps", type=int, default=32, help="greedy steps a round, each path")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--json", help="write the figures to this file")
    args = p.parse_args(argv)
    model, _ = common.load_model(args.model, args.dtype, "cpu", linear="plain")
    prompt = torch.randint(100, 5000, (1, args.context), generator=torch.Generator().manual_seed(0))
    got = {"model": args.model, "cpu": common.cpu_name(), "threads": torch.get_num_threads(), "context": args.context,
           "dtype": args.dtype,
           **compare(model, prompt, args.steps, args.rounds)}
    best = min(v for k, v in got["ms_per_step"].items() if k.startswith("eager"))
    got["compiled_speedup_over_best_eager"] = round(best / got["ms_per_step"]["compiled plain"], 2)
    print(json.dumps(got, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(got) + "\n")


if __name__ == "__main__":
    main()
