"""`save_model_dir`: a save stages in a directory of its own, and the next save clears what a crashed one left."""

from __future__ import annotations

from tests.sample_records import one_token_tokenizer
from tests.single_process import SingleProcess
from webrl.training import is_built, save_model_dir


def _tiny_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=8, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=1)
    return LlamaForCausalLM(config)


def test_a_save_clears_the_staging_left_by_a_crashed_one(tmp_path):
    target = tmp_path / "phase_001" / "actor"
    crashed = tmp_path / "phase_001" / ".actor.tmp-abc123"
    crashed.mkdir(parents=True)
    (crashed / "model.safetensors").write_bytes(b"half a model")
    other = tmp_path / "phase_001" / ".critic.tmp-def456"  # another target's staging is not this save's to clear
    other.mkdir()
    save_model_dir(SingleProcess(), _tiny_model(), one_token_tokenizer(), target, {"phase": 1})
    assert is_built(target) and (target / "config.json").is_file()
    assert sorted(path.name for path in target.parent.iterdir()) == [".critic.tmp-def456", "actor"]
