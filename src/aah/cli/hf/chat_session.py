"""The turn loop of `aah chat` (`chat_cmd` has the command and its rules): read a line, add its
turn's ids to the history, generate the reply over the cache that holds the history already,
report, until the input ends or the context is full.

The history is every id the model read or wrote, in order; the cache holds all but the reply's
last token, which `generate` never feeds back. The next turn's `generate` is handed the whole
history and the new turn's ids, and feeds the part the cache does not hold: that last token
and the turn.
"""

from __future__ import annotations

from typing import Any, TextIO

from aah.cli.hf.stream import Generated, generate
from aah.integrations.hf.run.conversation import Conversation

EXIT = "/exit"
MB = 2**20


class ChatSession:
    """One conversation over one per-head cache: a rolling one (no end), or one sized for
    `context` positions."""

    def __init__(
        self, model: Any, tokenizer: Any, cache: Any, context: int, limits: Any,
        system: str | None,
    ) -> None:  # fmt: skip
        self.model, self.tokenizer, self.cache = model, tokenizer, cache
        self.context, self.limits = context, limits
        self.rolling = bool(getattr(cache, "rolling", False))
        self.conversation = Conversation(tokenizer, system)
        self.history: list[int] = []
        eos = model.generation_config.eos_token_id
        self.stops = set(eos if isinstance(eos, list) else [] if eos is None else [eos])

    def run(
        self, stdin: TextIO, out: TextIO, err: TextIO, new: int, options: dict[str, Any]
    ) -> int:
        """Answer each line of `stdin` until it ends, a line is `/exit`, or the context is full
        (a message on `err`, status 0)."""
        interactive = stdin.isatty()
        turn = 0
        while True:
            if interactive:
                err.write("> ")
                err.flush()
            line = stdin.readline()
            if not line or line.strip() == EXIT:
                return 0
            text = line.rstrip("\r\n")
            if not text.strip():
                continue
            ids = self.history + self.conversation.user_turn(text)
            held = self.cache.get_seq_length()
            # new tokens that fit: the last is never fed; a rolling cache never fills
            room = new if self.rolling else self.context - len(ids) + 1
            if room < 1:
                err.write(self._full(len(ids) - held, held) + "\n")
                return 0
            turn += 1
            made = generate(self.model, self.tokenizer, ids, self.cache, min(new, room),
                            options, out, skip_prompt=True)  # fmt: skip
            out.write("\n")
            out.flush()
            self._record(ids, made.new_ids)
            err.write(self.status(turn, made) + "\n")
            err.flush()

    def _record(self, ids: list[int], reply: list[int]) -> None:
        """The reply joins the history and the conversation (its stop token's text, if it
        ended on one, is the start of the template's end of turn)."""
        self.history = ids + reply
        stopped = bool(reply) and reply[-1] in self.stops
        words = reply[:-1] if stopped else reply
        text = self.tokenizer.decode(words, skip_special_tokens=True)
        ended_with = self.tokenizer.decode(reply[-1:]) if stopped else None
        self.conversation.reply(text, ended_with)

    def status(self, turn: int, made: Generated) -> str:
        """One line: the reply's tokens and speed, the KV bytes held against DynamicCache's at
        the same positions, the positions used of the context."""
        from aah.attention.kv_bytes import full_kv_bytes

        seen, held = self.cache.get_seq_length(), self.cache.nbytes()
        full = full_kv_bytes(self.limits.kv, seen)
        rate = made.tokens_per_s
        speed = f"{rate:.1f} tok/s" if rate is not None else "- tok/s"
        if self.rolling:
            window = max(max(row) for row in self.cache.windows)
            sinks = max(max(row) for row in self.cache.sinks)
            where = f"{seen} tokens seen, rolling (windows up to {window} + {sinks} sinks)"
        else:
            ended = "; the context is full" if len(self.history) > self.context else ""
            where = f"{seen} of {self.context} positions{ended}"
        return (
            f"[turn {turn}] {len(made.new_ids)} tokens at {speed} (turn's {made.fed} tokens "
            f"prefilled in {made.prefill_s:.2f} s) | KV {held / MB:.3f} MB held after {seen} "
            f"positions, DynamicCache would hold {full / MB:.3f} MB (KV share {held / full:.3f})"
            f" | {where}"
        )

    def _full(self, needed: int, held: int) -> str:
        return (
            f"aah chat: this turn needs {needed} more positions and the conversation holds "
            f"{held} of its {self.context} (--context): the chat ends here; start a new one "
            "(a larger --context, up to the model's positions, holds more)"
        )
