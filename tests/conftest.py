"""Shared fixtures: a tiny random LLaMA and a character-level tokenizer, both built offline."""
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
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      initializer_range=0.2, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = LlamaForCausalLM(cfg).eval()
    import common
    common.use_grouped_attention(model)      # as load_model does
    return model


@pytest.fixture(scope="session")
def tiny():
    tok = make_tokenizer()
    return make_model(len(tok)), tok
