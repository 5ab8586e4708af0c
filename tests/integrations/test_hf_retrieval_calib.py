"""Retrieval calibration prompts: exact length, the fact where the depth says, the rows that
predict the answer (experiments/tests/test_needles.py checks the wording is unlike the
needle study's)."""

from __future__ import annotations

import pytest
import torch

from aah.integrations.hf.search.retrieval_calib import retrieval_prompts

T = 200


def blocks(n: int = 2) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randint(0, 256, (1, T), generator=gen) for _ in range(n)]


def test_prompts_hide_the_fact_at_its_depth_and_the_rows_predict_the_answer() -> None:
    source = blocks()
    prompts = retrieval_prompts(source, None, 5, seed=3)
    assert [p.depth for p in prompts] == [0.0, 0.25, 0.5, 0.75, 1.0]
    for i, p in enumerate(prompts):
        ids = p.ids.view(-1).tolist()
        assert p.ids.shape == (1, T)
        text = bytes(ids).decode("latin-1")
        answer = bytes(ids[p.rows[0] + 1 : p.rows[-1] + 2]).decode()
        assert p.rows == list(range(p.rows[0], T - 1))  # the last rows, each predicting one
        assert text.endswith(answer) and answer.strip()  # ...answer token, ending the prompt
        if i % 2 == 0:
            assert "access code is" + answer in text and answer.strip().isdigit()
        else:
            assert "has a pet" + answer in text
        # The whole prompt, rebuilt from the documented recipe: the block's first tokens with
        # the fact at round(depth * haystack length), then the question, then the answer.
        if i % 2 == 0:
            fact = f" The access code is{answer}. Write it down."
            question = " What is the access code? The access code is"
        else:
            person = text.split(" What pet does ")[1].split(" have?")[0]
            fact = f" Note that {person} has a pet{answer}."
            question = f" What pet does {person} have? {person} has a pet"
        hay_len = T - len(fact) - len(question) - len(answer)
        off = round(p.depth * hay_len)
        hay = source[i % 2].view(-1).tolist()[:hay_len]
        want = hay[:off] + list(fact.encode()) + hay[off:] + list((question + answer).encode())
        assert ids == want
    assert retrieval_prompts(source, None, 5, seed=3)[0].ids.equal(prompts[0].ids)  # seeded
    assert not retrieval_prompts(source, None, 5, seed=4)[0].ids.equal(prompts[0].ids)


def test_depth_zero_puts_the_fact_first_and_one_puts_it_right_before_the_question() -> None:
    first, last = retrieval_prompts(blocks(1), None, 2)
    assert bytes(first.ids.view(-1).tolist()).decode("latin-1").startswith(" The access code")
    text = bytes(last.ids.view(-1).tolist()).decode("latin-1")
    assert "has a pet" in text and text.index(" Note that") < text.index(" What pet")
    assert text.index(" What pet") - text.index(" Note that") < 60  # nothing between them


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="no calibration blocks"):
        retrieval_prompts([], None, 4)
    with pytest.raises(ValueError, match="n must be >= 1"):
        retrieval_prompts(blocks(), None, 0)
    with pytest.raises(ValueError, match="differ in length"):
        retrieval_prompts([torch.zeros(1, 200, dtype=torch.long),
                           torch.zeros(1, 300, dtype=torch.long)], None, 2)  # fmt: skip
    with pytest.raises(ValueError, match="too short"):
        retrieval_prompts([torch.zeros(1, 40, dtype=torch.long)], None, 1)
