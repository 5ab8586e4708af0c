"""Every policy implements the `Policy` protocol, by name, without patching its base."""

import ast
import inspect

import pytest

from aah.controller import (
    POLICIES,
    ControllerConfig,
    Policy,
    adaptive,
    base,
    budget,
    make_policy,
    policies,
)


@pytest.mark.parametrize("name", [p for p in POLICIES if p != "static"])
def test_every_policy_is_a_policy(name, replay_source):
    source = replay_source(2, 4, 64) if name.startswith("replay") else None
    cfg = ControllerConfig(policy=name, replay_from=source)
    pol = make_policy(cfg, n_layer=2, n_head=4, n_kv_head=2, seq_len=64)
    assert isinstance(pol, Policy)
    assert pol.name == name and pol.record(0)["policy"] == name


def test_the_protocol_rejects_a_partial_policy():
    class NoState:
        name = "x"

        def initial_plan(self):
            return [[1]]

    assert not isinstance(NoState(), Policy)


def base_attributes() -> set[str]:
    init = ast.parse(inspect.getsource(base.BasePolicy.__init__).strip().replace("\n    ", "\n"))
    return {
        node.attr
        for node in ast.walk(init)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
    }


def test_no_policy_overwrites_its_base_after_init():
    """A subclass passes name and plan to `BasePolicy.__init__` instead of setting them after."""
    owned = base_attributes()
    assert {"name", "_initial", "_plan"} <= owned
    for module in (policies, budget, adaptive):
        tree = ast.parse(inspect.getsource(module))
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            init = next((f for f in cls.body if getattr(f, "name", "") == "__init__"), None)
            if init is None:
                continue
            written = {
                t.attr
                for stmt in init.body
                for node in ast.walk(stmt)
                if isinstance(node, ast.Assign)
                for t in node.targets
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                and t.value.id == "self"
            }  # fmt: skip
            assert not written & owned, f"{cls.name}.__init__ sets {sorted(written & owned)}"
