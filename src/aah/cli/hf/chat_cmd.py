"""`aah chat MODEL --plan plan.json`: a conversation on stdin/stdout with a chat model, its
per-head KV cache kept across turns, so a turn feeds only its own tokens, never the history.

- Input: one user turn per line of stdin (piped or typed; `> ` is prompted on stderr when
  stdin is a terminal). Blank lines are skipped; end of input or a line `/exit` ends the chat.
- Output: each reply streams to stdout, followed by a newline, so stdout is the assistant's
  side of the conversation; after each reply one status line goes to stderr: the reply's
  tokens and decoding speed, the KV bytes the per-head cache holds against what DynamicCache
  would hold after the same positions, and the positions used of the context.
- The turns are the tokenizer's chat template (`hf.run.conversation`): --system sets a system
  turn; a model without a template is refused before it loads.
- Rolling: where every head of the plan holds a bounded window (sinks included, within the
  model's positions), the cache rolls (`PerHeadCache(rolling=True)`): the conversation goes on
  past the context and the model's positions, each head keeping its sinks and its window, the
  sinks given the positions StreamingLLM assigns within the cache; the KV bytes stop growing
  once every window is full. The status line then says the tokens seen and the windows.
- Context (a plan that cannot roll, or --no-roll): the cache is sized once for --context
  positions (default: the model's), the conversation's hard limit (a full-window head reserves
  that many slots from the start). A reply stops early when the context fills; a turn that no
  longer fits ends the chat with a message on stderr and exit status 0.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from aah.cli import flags

EPILOG = """\
input:   one user turn per line of stdin (piped or typed); blank lines are skipped; end of
         input or a line /exit ends the chat
output:  each reply on stdout; after it one status line on stderr: the reply's tokens/s, the
         KV MB the per-head cache holds against what DynamicCache would hold, positions used
rolling: where every head of the plan has a bounded window, the cache rolls and the chat goes
         on past the context and the model's positions, its KV bytes constant once the
         windows are full (--no-roll: a fixed context, as for a plan that cannot roll)
context: without rolling, --context N positions (default the model's), reserved once; a
         reply stops where the context ends, and a turn that no longer fits ends the chat
         with a message (exit 0)

  printf 'What is the capital of France?\\nAnd of Germany?\\n' | \\
      aah chat MODEL --plan plan.json --temperature 0
"""


def add_chat_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "target", metavar="MODEL",
        help="a Hugging Face chat model: a transformers folder, a GGUF file or a hub name "
        "(needs aah-attention[hf]); its tokenizer must carry a chat template",
    )  # fmt: skip
    p.add_argument("--plan", metavar="FILE",
                   help="a plan file (aah plan search, aah plan heal): its windows, sinks and "
                   "any healed parameters; or --kv-fraction")  # fmt: skip
    flags.add_default_plan(p)
    p.add_argument("--system", metavar="TEXT", help="a system turn before the first user turn")
    p.add_argument("--max-new-tokens", type=int, default=256, metavar="N",
                   help="tokens per reply at most (default 256)")  # fmt: skip
    p.add_argument(
        "--context", type=int, default=None, metavar="N",
        help="without rolling: positions the whole conversation may use (default: the "
        "model's); the cache is sized for it once, and a turn that no longer fits ends the chat",
    )  # fmt: skip
    p.add_argument("--no-roll", action="store_true",
                   help="keep a fixed context even where the plan could roll")  # fmt: skip
    flags.add_sampling(p)
    flags.add_device(p)
    flags.add_threads(p)


def run_chat(
    args: argparse.Namespace,
    out: TextIO | None = None,
    err: TextIO | None = None,
    stdin: TextIO | None = None,
) -> int:
    """Read turns from `stdin`, stream replies to `out`, status lines to `err` (module
    docstring). Bad arguments raise ValueError before the model loads where its files allow."""
    from aah.cli.generate_cmd import is_run_dir
    from aah.cli.hf.session import load_planned, planned, preflight, with_tokenizer
    from aah.cli.hf.stream import sampling_options

    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    stdin = sys.stdin if stdin is None else stdin
    flags.check_threads(args.threads)
    if is_run_dir(args.target):
        raise ValueError(
            f"{args.target!r} is a run directory; `aah chat` needs a Hugging Face chat model "
            "(its tokenizer's chat template), `aah generate RUN_DIR` continues a run's text"
        )
    if args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    flags.check_default_plan(args.plan, args.kv_fraction, args.plan_length)
    options = sampling_options(args)
    pre = preflight(args)
    chat_context(args.context, pre.positions(), args.max_new_tokens)
    pre = with_tokenizer(pre, args.target)
    if pre.known:
        _check_template(pre.tokenizer, args)

    from aah.integrations.hf import apply

    model, tokenizer, exact = load_planned(args, pre)
    context = chat_context(args.context, exact.max_positions, args.max_new_tokens)
    _check_template(tokenizer, args)
    apply(model, planned(args, pre, model, tokenizer))
    cache = chat_cache(model, context, args.no_roll, err)
    if args.seed is not None:
        import torch

        torch.manual_seed(args.seed)
    from aah.cli.hf.chat_session import ChatSession

    session = ChatSession(model, tokenizer, cache, context, exact, args.system)
    return session.run(stdin, out, err, args.max_new_tokens, options)


def chat_cache(model: Any, context: int, no_roll: bool, err: TextIO) -> Any:
    """A rolling per-head cache where the plan allows it and --no-roll is not given, else one
    sized for `context` positions (the reason rolling was refused goes to `err`)."""
    from aah.integrations.hf import per_head_cache

    if not no_roll:
        try:
            return per_head_cache(model, rolling=True)
        except ValueError as why:
            err.write(f"aah chat: no rolling ({why}); the conversation ends at {context} "
                      "positions\n")  # fmt: skip
    return per_head_cache(model, max_cache_len=context)


def chat_context(asked: int | None, positions: int | None, new: int) -> int:
    """The positions the conversation may use: --context (>= 2, within the model's), else
    the model's; room for a turn besides one reply. ValueError naming the fix."""
    if asked is None and positions is None:
        raise ValueError("the model states no position limit: give --context N")
    if asked is not None and asked < 2:
        raise ValueError(f"--context must be >= 2 (a turn and a reply), got {asked}")
    if asked is not None and positions is not None and asked > positions:
        raise ValueError(
            f"--context {asked} is beyond the model's {positions} positions: give --context "
            f"{positions} or less"
        )
    context = int(asked if asked is not None else positions)  # type: ignore[arg-type]
    if new >= context:
        raise ValueError(
            f"--max-new-tokens {new} leaves no room for a turn in the {context} positions of "
            f"the context: give --max-new-tokens {context - 1} or less"
        )
    return context


def _check_template(tokenizer: Any | None, args: argparse.Namespace) -> None:
    from aah.integrations.hf.run.chat_template import has_chat_template
    from aah.integrations.hf.run.conversation import Conversation

    if not has_chat_template(tokenizer):
        raise ValueError(
            f"model {args.target!r} has no chat template (its tokenizer carries none): "
            "`aah chat` needs one; `aah generate MODEL --raw` continues text"
        )
    Conversation(tokenizer, args.system).check_template()
