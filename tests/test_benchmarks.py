"""The benchmarks' default inputs are where a clone beside ../shared has them."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not (ROOT.parent / "shared" / "data").is_dir(), reason="no ../shared beside the clone")
def test_oracle_context_reads_the_shared_hotpotqa_file_by_default():
    assert load("oracle_context").HOTPOT.is_file()
