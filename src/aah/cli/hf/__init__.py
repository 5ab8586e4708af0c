"""The commands on Hugging Face models: `aah plan search|apply`, `aah generate MODEL`, `aah chat`.

- `plan_args` (the arguments of `aah plan search|apply`), `plan_checks` (checks before any model
  loads), `plan_run` (the search or apply itself).
- `checks` (checks against the model's files before the weights load), `session` (loading a
  planned model), `prompt` (the ids a prompt or question becomes), `stream` (one streamed
  `generate` call), `generate` (`aah generate MODEL`).
- `chat_cmd` (`aah chat`) and `chat_session` (its turn loop).

`aah.cli.plan_cmd` and `aah.cli.generate_cmd` dispatch here when the target is a model.
"""
