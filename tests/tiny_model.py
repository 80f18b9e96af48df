"""A tiny random GPT-2 and a BPE tokenizer trained on a build's prompts, so no test downloads a model."""

from __future__ import annotations

from pathlib import Path

from dataset_fixture import task_rows

from themisto.vocabulary import TASK_CONFIGS


def make_tiny_model(data_dir: Path, model_dir: Path) -> Path:
    """Save a randomly initialised GPT-2 (2 layers, width 64) and its tokenizer into ``model_dir``."""
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    texts = [row["prompt"] + row["target"] for config in TASK_CONFIGS for row in task_rows(data_dir, config, "full")]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=400, min_frequency=1, special_tokens=["<|endoftext|>"])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|endoftext|>", bos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=1024, n_embd=64, n_layer=2, n_head=2,
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    GPT2LMHeadModel(config).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    return model_dir
