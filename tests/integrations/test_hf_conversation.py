"""The ids each chat turn adds (`hf.run.conversation`) and the prompts `aah generate` runs
(`hf.run.chat_template`, `cli.hf.prompt`), against the template's text written out by hand."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from hf_tokenized import CHAT_TEMPLATE, chat_text, tiny_tokenizer

from aah.cli.hf.prompt import PromptEncoder
from aah.integrations.hf.run.chat_template import shared_prefix, user_turn_ids
from aah.integrations.hf.run.conversation import Conversation


@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    tok = tiny_tokenizer()
    tok.chat_template = CHAT_TEMPLATE
    return tok


def ids(tokenizer, text: str) -> list[int]:  # type: ignore[no-untyped-def]
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_each_turn_adds_the_template_text_after_the_history(tokenizer) -> None:
    chat = Conversation(tokenizer, system="be brief")
    chat.check_template()
    first = chat.user_turn("hello")
    assert first == ids(tokenizer, chat_text(("system", "be brief"), ("user", "hello")))
    chat.reply("hi!", ended_with="</s>")  # stopped on the template's end of turn
    assert chat.user_turn("more") == ids(tokenizer, "\n" + chat_text(("user", "more")))
    chat.reply("cut sho", ended_with=None)  # stopped at the token limit: the turn is closed
    assert chat.user_turn("again") == ids(tokenizer, "</s>\n" + chat_text(("user", "again")))


def test_a_template_that_rewrites_earlier_turns_is_refused(tokenizer) -> None:
    tokenizer = tokenizer.__class__(tokenizer_object=tokenizer.backend_tokenizer)
    # the count of user turns first: a reply leaves it, the next user turn rewrites it
    count = "{{ messages | selectattr('role', 'equalto', 'user') | list | length }}"
    tokenizer.chat_template = count + CHAT_TEMPLATE
    with pytest.raises(ValueError, match="rewrites earlier turns"):
        Conversation(tokenizer).check_template()
    tokenizer.chat_template = "{{ messages | length }}" + CHAT_TEMPLATE  # a reply rewrites it
    with pytest.raises(ValueError, match="does not write a reply after the assistant header"):
        Conversation(tokenizer).check_template()


def test_a_template_error_names_the_turns(tokenizer) -> None:
    tokenizer = tokenizer.__class__(tokenizer_object=tokenizer.backend_tokenizer)
    tokenizer.chat_template = (
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system turn') }}"
        "{% endif %}" + CHAT_TEMPLATE
    )
    with pytest.raises(ValueError, match="refuses the turns system/user: no system turn"):
        user_turn_ids(tokenizer, "hi", system="be brief")


@pytest.mark.parametrize("questions", [["what is f?", "what does f return?"], ["why?"]])
def test_questions_run_their_whole_sequences_after_the_documents_ids(tokenizer, questions):
    document = "def f(x):\n    return x * 2\n\n"
    prompts = PromptEncoder(tokenizer, None, templated=True).prompts(document, questions)
    for question, run in zip(questions, prompts.runs, strict=True):
        # the document's trailing blank lines become the one blank line before the question
        assert run == ids(tokenizer, chat_text(("user", document.rstrip() + "\n\n" + question)))
        assert run[: prompts.shared] == prompts.runs[0][: prompts.shared]
    # the shared part is the document's turn (up to a token merged with what follows), even
    # for a single question, and never a question's own tokens
    before = ids(tokenizer, "<|user|>\n" + document.rstrip() + "\n\n")  # up to the question
    assert len(before) - 3 <= prompts.shared <= len(before)


def test_shared_prefix() -> None:
    assert shared_prefix([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert shared_prefix([[1, 2], [1, 2]]) == 2
    assert shared_prefix([[5], [6]]) == 0
    assert shared_prefix([]) == 0
