"""float32 against bfloat16 on this machine: the matrix products of a model, and optionally a generation.

    python benchmarks/bench_dtype.py [--model qwen2.5-coder-1.5b] [--prompt 400] [--rows 21] [--int8] [--generate]

The linear layers are most of a method's time (78% of a greedy call under torch.profiler), so this times
the products of one decoder layer of the model's shapes (read from its config, no weights loaded) in
both precisions, one after the other in this process: prefill (`--prompt` tokens x hidden size) and
SeaKR's decoding step (`--rows` rows: 1 greedy + 20 samples). --generate also loads the model in each
precision and times one greedy answer. Prints the CPU, the flags --dtype auto looks at, what it would
choose, TFLOP/s per shape and precision, and bfloat16's speed-up (> 1: bfloat16 faster). --int8 adds
the int8 linear layers of --dtype int8 (models.quantize_int8: int8 weights per channel, activations
quantised per call; CPU only; it costs the model its closed-book knowledge, see there). Set
OMP_NUM_THREADS to choose the threads.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import common  # noqa: E402
import models  # noqa: E402


def layer_shapes(cfg) -> list[tuple[str, int, int]]:
    """(name, in, out) of one decoder layer's linear maps: q, k+v, o, gate+up, down."""
    h, inter = cfg.hidden_size, cfg.intermediate_size
    head = getattr(cfg, "head_dim", None) or h // cfg.num_attention_heads
    kv = cfg.num_key_value_heads * head
    return [("q", h, cfg.num_attention_heads * head), ("kv", h, 2 * kv), ("o", cfg.num_attention_heads * head, h),
            ("gate_up", h, 2 * inter), ("down", inter, h)]


def time_products(shapes, tokens: int, dtype, device: str, min_s: float = 1.0) -> float:
    """TFLOP/s of x @ W for every shape of one layer, repeated for at least min_s seconds."""
    torch.manual_seed(0)
    mats = [(torch.randn(tokens, i, dtype=dtype, device=device), torch.randn(i, o, dtype=dtype, device=device))
            for _, i, o in shapes]
    flops = sum(2 * tokens * i * o for _, i, o in shapes)
    for x, w in mats:   # warm-up (oneDNN picks its kernels on the first call)
        x @ w
    n, start = 0, time.perf_counter()
    while True:
        for x, w in mats:
            x @ w
        n += 1
        if device == "cuda":
            torch.cuda.synchronize()
        if (elapsed := time.perf_counter() - start) >= min_s:
            return n * flops / elapsed / 1e12


def time_int8(shapes, tokens: int, min_s: float = 1.0) -> float:
    """TFLOP/s of the linear layers --dtype int8 makes (models.quantize_int8) for the same shapes."""
    torch.manual_seed(0)
    layers = [torch.nn.Sequential(torch.nn.Linear(i, o, bias=False)) for _, i, o in shapes]
    for lin in layers:
        models.quantize_int8(lin)
    xs = [torch.randn(tokens, i) for _, i, _ in shapes]
    flops = sum(2 * tokens * i * o for _, i, o in shapes)
    with torch.no_grad():
        for lin, x in zip(layers, xs):
            lin(x)
        n, start = 0, time.perf_counter()
        while True:
            for lin, x in zip(layers, xs):
                lin(x)
            n += 1
            if (elapsed := time.perf_counter() - start) >= min_s:
                return n * flops / elapsed / 1e12


def time_generation(model_name: str, dtype: str, device: str) -> dict:
    question = "Which city is the capital of the country where the Eiffel Tower stands? Answer with a few words."
    t = time.perf_counter()
    model, tok = common.load_model(model_name, dtype, device)
    load = time.perf_counter() - t
    prompt = common.chat_prompt(tok, question)
    common.greedy(model, tok, prompt, max_new_tokens=4)          # warm-up
    t = time.perf_counter()
    out = common.greedy(model, tok, prompt, max_new_tokens=32)
    return {"load_s": round(load, 1), "generate_s": round(time.perf_counter() - t, 2), "text": out.text[:80]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=common.DEFAULT_MODEL, help="alias, HF id or directory (its shapes)")
    p.add_argument("--prompt", type=int, default=400, help="prefill tokens")
    p.add_argument("--rows", type=int, default=21, help="rows of a decoding step (SeaKR: 1 + 20 samples)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seconds", type=float, default=1.0, help="time per shape and precision")
    p.add_argument("--int8", action="store_true", help="also time torch.ao dynamic int8 linear layers")
    p.add_argument("--generate", action="store_true", help="also load the model in each precision and decode")
    a = p.parse_args()
    from transformers import AutoConfig
    path = common.model_path(a.model)
    cfg = AutoConfig.from_pretrained(path)
    shapes = layer_shapes(cfg)
    flags = models.cpu_flags() if a.device == "cpu" else ""
    auto, why = models.resolve_dtype("auto", a.device)
    seen = [f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")
            if f in flags.split()]
    print(f"CPU: {models.cpu_name()}; flags: {' '.join(seen) or 'none of avx2/avx512/amx'}; "
          f"threads: {torch.get_num_threads()} (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})")
    print(f"--dtype auto would choose {auto} ({why})")
    print(f"model {a.model}: hidden {cfg.hidden_size}, intermediate {cfg.intermediate_size}, "
          f"{cfg.num_hidden_layers} layers")
    fig = {"cpu": models.cpu_name(), "auto": auto, "model": a.model}
    print(f"{'shape':22} {'float32':>9} {'bfloat16':>9} {'bf16/fp32':>10}"
          + (f" {'int8':>9} {'int8/fp32':>10}" if a.int8 else "") + "   (TFLOP/s)")
    for name, tokens in (("prefill", a.prompt), ("decode", a.rows)):
        fp32 = time_products(shapes, tokens, torch.float32, a.device, a.seconds)
        bf16 = time_products(shapes, tokens, torch.bfloat16, a.device, a.seconds)
        fig[name] = {"tokens": tokens, "float32_tflops": round(fp32, 4), "bfloat16_tflops": round(bf16, 4),
                     "bf16_speedup": round(bf16 / fp32, 2)}
        line = f"{name + f' ({tokens} rows)':22} {fp32:9.4f} {bf16:9.4f} {bf16 / fp32:9.2f}x"
        if a.int8:
            i8 = time_int8(shapes, tokens, a.seconds)
            fig[name].update(int8_tflops=round(i8, 4), int8_speedup=round(i8 / fp32, 2))
            line += f" {i8:9.4f} {i8 / fp32:9.2f}x"
        print(line)
    if a.generate:
        for dt in ("float32", "bfloat16"):
            fig[f"generate_{dt}"] = g = time_generation(a.model, dt, a.device)
            print(f"generate {dt}: load {g['load_s']} s, 32 tokens {g['generate_s']} s")
        fig["generate_bf16_speedup"] = round(fig["generate_float32"]["generate_s"]
                                             / fig["generate_bfloat16"]["generate_s"], 2)
        print(f"generation: bfloat16 {fig['generate_bf16_speedup']}x float32's speed")
    print(json.dumps(fig))


if __name__ == "__main__":
    main()
