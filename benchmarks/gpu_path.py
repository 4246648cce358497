"""The paper-scale path on a GPU with no weights to download: a model of Qwen2.5-7B's shapes with random weights.

    python benchmarks/gpu_path.py --out DIR [--shape qwen2.5-7b] [--dtypes bfloat16,float32]
                                  [--steps sampling,seakr,ctrla,rowen] [--budget 420] [--tokenizer DIR]

What it shows: that each method runs unchanged on CUDA at 7B scale (memory, devices, precisions: the
hooks, the shared-prompt sampler, SeaKR's slogdet, CtrlA's PCA, Rowen's two models), and how long each
step takes there. What it cannot show: accuracy. The weights are random (seeded), so every answer is
noise and almost every call runs to its token limit (a stop string or EOS is drawn by chance only):
the seconds are those of the longest calls each method makes, not of a real model's shorter ones.

Steps, each a fresh process under what is left of --budget (the step that runs out of it is stopped
and reported as such, the steps after it as not run):
- build: the random model, saved in bfloat16 with the tokenizer beside it (Qwen's; by default the
  embedded Qwen2.5-Coder-1.5B's, whose vocabulary the Qwen2.5 models share);
- sampling: benchmarks/bench_sampling.py on it in each --dtypes precision (k = 20 samples of a
  1,000-token prompt: ours against generate, the reference loop, one greedy generation and, on a GPU,
  ours with a prompt copy per row instead of the shared one);
- seakr / ctrla / rowen: the method's first demo question (`--limit 1`), `--device cuda`, every method
  in the first --dtypes precision, then every method in the next (Rowen's verifier is the same random
  model: load_model loads it once).

Writes DIR/gpu_path.json (every step: command, seconds, exit status, the run row's figures or the
benchmark's JSON) and DIR/gpu_path.log (every step's output). --shape tiny runs the same steps on a
two-layer model on the CPU (a check of this script, minutes on 2 cores).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch
import transformers

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import common  # noqa: E402

# Qwen2.5-7B(-Instruct)'s config.json; the 1.5B is the embedded Qwen2.5-Coder-1.5B's converted config.
SHAPES = {
    "qwen2.5-7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                       num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
    "qwen2.5-coder-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                               num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=False),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=False),
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
STEPS = ("sampling", "seakr", "ctrla", "rowen")
DATASET = {"seakr": "hotpotqa", "ctrla": "hotpotqa", "rowen": "truthfulqa"}


def build(shape: str, tokenizer: Path, out: Path, device: str) -> dict:
    """A Qwen2 model of `shape` with seeded random weights, saved in bfloat16 at `out` with the tokenizer."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
    cfg = Qwen2Config(**SHAPES[shape], max_position_embeddings=32768, rms_norm_eps=1e-6,
                      rope_parameters={"rope_theta": 1000000.0, "rope_type": "default"},
                      bos_token_id=151643, eos_token_id=151645, pad_token_id=151643)
    torch.manual_seed(0)
    start = time.perf_counter()
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)         # built in bfloat16: no float32 copy of 7B weights
    try:
        with torch.device(device):
            model = Qwen2ForCausalLM(cfg)
    finally:
        torch.set_default_dtype(default)
    n = sum(p.numel() for p in model.parameters())
    model.save_pretrained(out)
    del model
    for name in TOKENIZER_FILES:
        if (tokenizer / name).exists():
            shutil.copy(tokenizer / name, out / name)
    AutoTokenizer.from_pretrained(out)          # the copied files load
    return {"parameters": n, "seconds": round(time.perf_counter() - start, 1)}


def run_row(path: Path) -> dict:
    """The figures of a run's first row that say what ran and how long it took."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not rows:
        return {}
    keep = ("id", "seconds", "retrievals", "model_calls", "calls", "retrieved", "device", "cpu", "prediction")
    row = {k: rows[0][k] for k in keep if k in rows[0]}
    if isinstance(row.get("prediction"), str):
        row["prediction"] = row["prediction"][:120]
    return row


def step(name: str, cmd: list[str], log, deadline: float, env: dict) -> dict:
    """Run one step as a fresh process until `deadline`; its output goes to the log."""
    left = deadline - time.monotonic()
    rec = {"step": name, "command": " ".join(cmd)}
    if left < 10:
        return {**rec, "status": "not run: budget spent"}
    log.write(f"\n===== {name}: {' '.join(cmd)}\n")
    log.flush()
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=left, env=env)
        rec["status"] = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
    except subprocess.TimeoutExpired:
        rec["status"] = f"stopped at the budget ({left:.0f} s)"
    rec["seconds"] = round(time.monotonic() - start, 1)
    log.flush()
    return rec


def last_json(log_path: Path, marker: str) -> dict:
    """The last JSON object line of the step whose output starts at `marker` (a benchmark's figures)."""
    text = log_path.read_text(encoding="utf-8", errors="replace")
    at = text.rfind(marker)
    if at < 0:
        return {}
    end = text.find("\n===== ", at + len(marker))
    for line in reversed(text[at:None if end < 0 else end].splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return {}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="folder for gpu_path.json and gpu_path.log")
    p.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-7b")
    p.add_argument("--dtypes", default="bfloat16,float32", help="precisions of the method steps, in order")
    p.add_argument("--steps", default=",".join(STEPS), help=f"some of {', '.join(STEPS)}")
    p.add_argument("--budget", type=float, default=420, help="seconds for all steps together, the build included")
    p.add_argument("--tokenizer", help="a folder with Qwen's tokenizer files (default: the embedded "
                                       "qwen2.5-coder-1.5b's, converted once)")
    p.add_argument("--work", default="/tmp/gpu-path", help="where the model and the run files go")
    a = p.parse_args()
    deadline = time.monotonic() + a.budget
    steps = [s for s in a.steps.split(",") if s]
    if unknown := set(steps) - set(STEPS):
        raise SystemExit(f"error: --steps {','.join(sorted(unknown))}: use some of {', '.join(STEPS)}")
    device = "cpu" if a.shape == "tiny" else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device here; --shape tiny checks this script on the CPU")
    out, work = Path(a.out), Path(a.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    tokenizer = Path(a.tokenizer) if a.tokenizer else Path(common.model_path("qwen2.5-coder-1.5b"))
    summary = {"shape": a.shape, "device": torch.cuda.get_device_name() if device == "cuda" else common.cpu_name(),
               "torch": torch.__version__, "transformers": transformers.__version__,
               "python": platform.python_version(), "steps": []}
    save = lambda: (out / "gpu_path.json").write_text(json.dumps(summary, indent=1) + "\n")  # noqa: E731
    model_dir = work / f"random-{a.shape}"
    summary["build"] = build(a.shape, tokenizer, model_dir, device)
    save()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log_path = out / "gpu_path.log"
    dtypes = [d for d in a.dtypes.split(",") if d]
    with open(log_path, "a", encoding="utf-8") as log:
        for dtype in dtypes if "sampling" in steps else ():
            rec = step(f"sampling {dtype}", [sys.executable, "benchmarks/bench_sampling.py", "--model", str(model_dir),
                                             "--device", device, "--dtype", dtype, "--repeats", "3"], log, deadline, env)
            rec["figures"] = last_json(log_path, f"===== sampling {dtype}:")
            summary["steps"].append(rec)
            save()
        for dtype in dtypes:                      # every method in the first precision before the next
            for name in (s for s in steps if s != "sampling"):
                run = work / f"{name}-{dtype}.jsonl"
                run.unlink(missing_ok=True)           # a step that fails early reports no older row
                cmd = [sys.executable, f"{name}.py", "--model", str(model_dir), "--dataset", DATASET[name],
                       "--limit", "1", "--device", device, "--dtype", dtype, "--output", str(run), "--overwrite"]
                if name == "rowen":
                    cmd += ["--verifier", str(model_dir)]
                if name == "ctrla" and a.shape == "tiny":     # the defaults need 24 layers or more
                    cmd += ["--steer-layers", "1:2", "--monitor-layers", "1:2"]
                rec = step(f"{name} {dtype}", cmd, log, deadline, env)
                if run.exists():
                    rec["row"] = run_row(run)
                summary["steps"].append(rec)
                save()
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
