"""k = 20 samples of one long prompt: our one-prefill sampler against transformers' generate.

    python benchmarks/bench_sampling.py [--model smollm2-135m] [--tokens 1000] [--k 20] [--new 24] [--repeats 3]
                                        [--device auto] [--dtype auto]

Times, side by side in one process and alternating within each repeat (the median is reported):
- generate: model.generate(do_sample=True, num_return_sequences=k), which copies the prompt k times
  and prefills every copy;
- ours: common.sample (one prefill, the prompt's KV cache shared by the k rows);
- reference: common.reference, the plain loop that --plain runs (one prefill copied to k rows of
  transformers' own cache); it draws the same samples as ours in float32 (checked: same_as_reference;
  in bfloat16 on a GPU batched and single-row products round differently, and so do the samples);
- greedy: one greedy generation of the same prompt and length (common.greedy);
- copied (on a GPU): ours with one copy of the prompt's KV cache per row (speed.SHARE_PROMPT off), the
  layout the shared copy replaces; on an H100 it was faster in bfloat16 and slower in float32
  (benchmarks/README.md), so the choice is measured here wherever a GPU is at hand.
Sampling settings are SeaKR's (temperature 1.0, top-k 50, top-p 0.9). The prompt is SeaKR's few-shot
examples cut to --tokens tokens; no stop strings, so every row runs the full length unless it draws EOS
(the tokens generated are printed). No prefix cache: each timing starts from an empty cache.
Peak resident memory of our sampler alone is measured in a fresh child process (on a GPU: its peak
allocated GPU memory, in this process).
Prints a table and one JSON line; targets (issue 6): speedup_vs_generate >= 5, cost_vs_greedy <= 2.5.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch  # noqa: E402

import common  # noqa: E402
import seakr  # noqa: E402
import speed  # noqa: E402


def long_prompt(tok, n_tokens: int) -> str:
    """SeaKR's few-shot examples (HotpotQA, then 2WikiMultihopQA, ...) cut to n_tokens tokens."""
    text = "\n\n".join(seakr.load_exemplars(kind) for kind in ("hotpotqa", "2wikimultihopqa", "iirc"))
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if len(ids) < n_tokens:
        raise SystemExit(f"error: the exemplars hold only {len(ids)} tokens; ask for fewer with --tokens")
    return tok.decode(ids[:n_tokens])


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def run_ours(model, tok, prompt, a):
    speed.forget_prefix()
    return common.sample(model, tok, prompt, a.k, temperature=1.0, top_k=50, top_p=0.9,
                         max_new_tokens=a.new, seed=0)


def run_reference(model, tok, prompt, a):
    return common.reference(model, tok, prompt, a.k, with_greedy=False, temperature=1.0, top_k=50, top_p=0.9,
                            max_new_tokens=a.new, seed=0)


def peak_rss_gb() -> float:
    """This process's peak resident memory. Linux's VmHWM starts afresh at exec; ru_maxrss would
    also count the parent's pages at the fork that started this child."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 2**20
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20   # KB on Linux


def peak_memory_child(a) -> float:
    """Peak RSS (GB) of a fresh process that loads the model and runs our sampler once."""
    cmd = [sys.executable, __file__, "--model", a.model, "--tokens", str(a.tokens), "--k", str(a.k),
           "--new", str(a.new), "--device", a.device, "--dtype", a.dtype, "--peak-only"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=common.DEFAULT_MODEL)
    p.add_argument("--tokens", type=int, default=1000, help="prompt length in tokens")
    p.add_argument("--k", type=int, default=20, help="samples")
    p.add_argument("--new", type=int, default=24, help="new tokens per sample")
    p.add_argument("--repeats", type=int, default=3, help="runs of each; the median is reported")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--dtype", default="auto", choices=common.DTYPES)
    p.add_argument("--peak-only", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    model, tok = common.load_model(a.model, a.dtype, a.device)
    cuda = model.device.type == "cuda"
    prompt = long_prompt(tok, a.tokens)
    if a.peak_only:
        run_ours(model, tok, prompt, a)
        print(peak_rss_gb())
        return
    ids = torch.tensor([common.encode(tok, prompt)], device=model.device)
    n_prompt = ids.shape[1]

    def hf_generate():
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0,
                                 top_k=50, top_p=0.9, max_new_tokens=a.new, num_return_sequences=a.k,
                                 pad_token_id=tok.pad_token_id)
        return [int((row[n_prompt:] != tok.pad_token_id).sum()) for row in out]

    def greedy():
        speed.forget_prefix()
        return [len(common.greedy(model, tok, prompt, max_new_tokens=a.new).token_ids)]

    def ours():
        return [len(g.token_ids) for g in run_ours(model, tok, prompt, a)]

    def reference():
        return [len(g.token_ids) for g in run_reference(model, tok, prompt, a)]

    def copied():
        speed.SHARE_PROMPT = False
        try:
            return ours()
        finally:
            speed.SHARE_PROMPT = True

    runs = {"generate": hf_generate, "ours": ours, "reference": reference, "greedy": greedy}
    if cuda:
        runs["copied"] = copied
    times = {name: [] for name in runs}
    tokens = {}
    torch.manual_seed(0)
    greedy()                                   # warm-up (first-call allocations)
    for _ in range(a.repeats):
        for name, fn in runs.items():
            t, n = timed(fn)
            times[name].append(t)
            tokens[name] = n
    med = {name: statistics.median(ts) for name, ts in times.items()}
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        run_ours(model, tok, prompt, a)                 # it forgets the prefix cache itself
        peak = torch.cuda.max_memory_allocated() / 2**30
    else:
        peak = peak_memory_child(a)
    figures = {"model": a.model, "device": str(model.device), "dtype": str(model.dtype).removeprefix("torch."),
               "machine": torch.cuda.get_device_name() if cuda else common.cpu_name(),
               "prompt_tokens": n_prompt, "k": a.k, "new_tokens": a.new,
               "threads": torch.get_num_threads(), "repeats": a.repeats,
               "generate_s": round(med["generate"], 3), "ours_s": round(med["ours"], 3),
               "greedy_s": round(med["greedy"], 3),
               "reference_s": round(med["reference"], 3),
               "speedup_vs_generate": round(med["generate"] / med["ours"], 2),
               "speedup_vs_reference": round(med["reference"] / med["ours"], 2),
               "same_as_reference": [g.token_ids for g in run_ours(model, tok, prompt, a)]
               == [g.token_ids for g in run_reference(model, tok, prompt, a)],
               "cost_vs_greedy": round(med["ours"] / med["greedy"], 2),
               ("peak_gpu_gb_ours" if cuda else "peak_rss_gb_ours"): round(peak, 2)}
    if "copied" in med:
        figures["copied_s"] = round(med["copied"], 3)
    print(f"prompt {n_prompt} tokens, k = {a.k}, {a.new} new tokens, {torch.get_num_threads()} threads, "
          f"median of {a.repeats}")
    print(f"{'':28} {'seconds':>8} {'tokens generated':>17}")
    for name, label in (("generate", f"generate(num_return_sequences={a.k})"), ("ours", "common.sample"),
                        ("reference", "common.reference (--plain)"), ("greedy", "common.greedy (one row)"),
                        ("copied", "common.sample, prompt per row")):
        if name in med:
            print(f"{label:28} {med[name]:8.2f} {sum(tokens[name]):17d}")
    print(f"speedup vs generate {figures['speedup_vs_generate']:.2f}x (target >= 5), "
          f"vs the reference {figures['speedup_vs_reference']:.2f}x (same samples: {figures['same_as_reference']}), "
          f"cost vs one greedy generation {figures['cost_vs_greedy']:.2f}x (target <= 2.5), "
          f"peak {'GPU memory' if cuda else 'RSS'} of the sampler alone {peak:.2f} GB")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
