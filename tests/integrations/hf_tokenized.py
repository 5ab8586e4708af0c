"""A tiny Llama saved with its own tokenizer (a byte-level BPE trained here on a few lines), as
a user's transformers folder is: the CLI and `load_model` tests read it like a real model.

Its BPE merges make its ids differ from the UTF-8 bytes a model without a tokenizer reads, so
a test that gets the same plan or text with and without `tokenizer=` shows that the model's
own tokenizer was used.
"""

from __future__ import annotations

from pathlib import Path

from hf_models import VOCAB, tiny_model

TEXT = (
    "def f(x):\n    return x * 2  # doubles\n"
    "the quick brown fox jumps over the lazy dog.\n"
    "class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n"
) * 12
TOKENIZER_VOCAB = 290  # the 256 byte symbols, two specials and a few merges; < VOCAB


def tiny_tokenizer():  # type: ignore[no-untyped-def]
    """A transformers fast tokenizer: byte-level BPE with <s> (BOS) and </s> (EOS)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator([TEXT], trainer=trainer)
    assert bpe.get_vocab_size() <= VOCAB
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>")


def save_tokenized_llama(folder: Path, seed: int = 0, **overrides: object):  # type: ignore[no-untyped-def]
    """A tiny Llama and its tokenizer saved in `folder`; (model, tokenizer) as saved."""
    tokenizer = tiny_tokenizer()
    model = tiny_model("llama", seed=seed, **overrides)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer


#: a ChatML-like template over the tiny tokenizer: its EOS "</s>" ends each turn
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def chat_text(*turns: tuple[str, str], reply_header: bool = True) -> str:
    """What CHAT_TEMPLATE renders, written out by hand: (role, content) turns, then the header
    of the assistant's reply."""
    text = "".join(f"<|{role}|>\n{content}</s>\n" for role, content in turns)
    return text + ("<|assistant|>\n" if reply_header else "")


def save_chat_llama(folder: Path, seed: int = 0, **overrides: object):  # type: ignore[no-untyped-def]
    """`save_tokenized_llama` whose tokenizer carries CHAT_TEMPLATE (a chat model's folder)."""
    model, tokenizer = save_tokenized_llama(folder, seed=seed, **overrides)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    return model, tokenizer


def greedy_reply(model, ids: list[int], new: int, eos: int) -> list[int]:  # type: ignore[no-untyped-def]
    """The greedy reply of `model` to `ids`, up to `new` tokens or `eos`, the whole sequence
    recomputed at every step (no cache): the reference the commands' cached replies meet."""
    import torch

    seq = torch.tensor([ids])
    with torch.no_grad():
        for _ in range(new):
            step = model(seq).logits[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, step], dim=1)
            if int(step) == eos:
                break
    return seq[0, len(ids) :].tolist()
