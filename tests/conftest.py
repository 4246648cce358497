"""Shared fixtures, all built offline: a tiny random LLaMA, a character-level toy tokenizer, and the two
tokenizer kinds users run (LLaMA-style SentencePiece with byte fallback, and byte-level BPE)."""
import contextlib
import string
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: loads an embedded model (tens of seconds)")


def make_tokenizer():
    """One token per character, BOS added, EOS '</s>' = id 2, PAD = id 0."""
    from tokenizers import Tokenizer, Regex, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast
    chars = list(string.ascii_letters + string.digits + string.punctuation + " \n")
    vocab = {t: i for i, t in enumerate(["<pad>", "<s>", "</s>", "<unk>"] + chars)}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tk.decoder = decoders.Fuse()
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>",
                                  pad_token="<pad>", unk_token="<unk>")
    tok.padding_side = "left"
    return tok


def make_model(vocab_size, seed=0, layers=4):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                      initializer_range=0.2, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = LlamaForCausalLM(cfg).eval()
    import speed
    speed.use_grouped_attention(model)      # as load_model does
    return model


@pytest.fixture
def fed_tokens():
    """fed_tokens(model): a context in which each forward pass of `model` appends the number of positions
    it feeds (a hook on its input embedding) to the list it yields; a prefill feeds more than one."""
    @contextlib.contextmanager
    def watch(model):
        fed = []
        handle = model.get_input_embeddings().register_forward_hook(lambda m, args, out: fed.append(args[0].shape[-1]))
        try:
            yield fed
        finally:
            handle.remove()
    return watch


@pytest.fixture(scope="session")
def tiny():
    tok = make_tokenizer()
    return make_model(len(tok)), tok


# Text the offline tokenizers are trained on: the prompts' pieces and the facts the tests use, so that
# common words become whole tokens and rarer ones split into pieces, as with a real vocabulary.
TRAIN_TEXT = [
    "Question: Who directed the film Laughter In Hell? Answer: The film Laughter In Hell was directed by "
    "Edward L. Cahn. So the answer is Edward L. Cahn.",
    "Question: What is the capital of France? Answer: Paris is the capital of France. So the answer is Paris.",
    "Context: the region around Paris is called the Ile-de-France; its capital is Paris.",
    "Dr. Who is a television series; St. Louis is a city in Missouri; Mt. Everest is the highest mountain.",
    "[INST] Answer the question honestly. [/INST] The answer is that nobody knows.",
    "I am sorry, but I cannot answer that question. I don't know the answer.",
    "The evidence shows that the earlier answer was wrong; the correct answer is the one in the passage.",
    "True or False: penguins do not have teeth. The answer is True.",
    "Your short answer: Paris. Your revised short answer: Paris.",
] * 4
SPECIALS = ["<unk>", "<s>", "</s>"]


def make_sentencepiece_tokenizer():
    """A LLaMA-2 / Mistral style tokenizer: SentencePiece BPE with byte fallback, BOS <s> = 1, EOS </s> = 2.

    As in the real ones: Metaspace pre-tokenizer ("▁" for spaces, one prepended), the LLaMA decoder
    (Replace "▁" -> " ", ByteFallback, Fuse, Strip one leading space), and so a token decoded alone
    loses its leading space ("▁Cahn" -> "Cahn"); characters outside the vocabulary ("Î", "—", "東")
    become <0xNN> byte tokens that decode only together. No pad token, as LLaMA-2.
    """
    import json
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaTokenizerFast
    meta = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    trainer_tk = Tokenizer(models.BPE(unk_token="<unk>"))
    trainer_tk.pre_tokenizer = meta
    trainer_tk.train_from_iterator(TRAIN_TEXT, trainers.BpeTrainer(
        vocab_size=240, special_tokens=SPECIALS, show_progress=False))
    learned = json.loads(trainer_tk.to_str())["model"]
    vocab = dict(learned["vocab"])
    for b in range(256):                       # the byte-fallback tokens, as in LLaMA's vocabulary
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in learned["merges"]]
    tk = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tk.add_special_tokens([AddedToken(t, special=True) for t in SPECIALS])
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                    decoders.Strip(" ", 1, 0)])
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return LlamaTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def make_bytelevel_tokenizer():
    """A GPT-2 / Qwen / SmolLM2 style byte-level BPE tokenizer: spaces belong to the next token ("Ġthe"),
    non-ASCII characters split across byte tokens; no BOS; EOS "<|endoftext|>" doubles as pad."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(TRAIN_TEXT, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>", pad_token="<|endoftext|>")


@pytest.fixture(scope="session")
def sp_tok():
    return make_sentencepiece_tokenizer()


@pytest.fixture(scope="session")
def bpe_tok():
    return make_bytelevel_tokenizer()


@pytest.fixture(scope="session", params=["sentencepiece", "bytelevel"])
def real_tok(request):
    """Each of the two tokenizer kinds users run (text-handling tests take this one)."""
    return make_sentencepiece_tokenizer() if request.param == "sentencepiece" else make_bytelevel_tokenizer()


@pytest.fixture(scope="session", params=["sentencepiece", "bytelevel"])
def tiny_real(request):
    """A tiny random LLaMA with each of the two real tokenizer kinds (pad set as load_model does)."""
    tok = make_sentencepiece_tokenizer() if request.param == "sentencepiece" else make_bytelevel_tokenizer()
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    model = make_model(len(tok))
    model.config.bos_token_id = tok.bos_token_id
    model.config.eos_token_id = tok.eos_token_id
    model.config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    return model, tok
