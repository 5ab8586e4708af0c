"""Each package imports only what docs/architecture.md's "Layers" table allows it."""

from __future__ import annotations

from test_import_graph import TOP, graph, package_of

LEAVES = {"choices", "validate", "atomic", "textfile", "runtime"}
# docs/architecture.md, "may import" (lazy imports count; reading aah.__version__ does not).
ALLOWED: dict[str, set[str]] = {
    **{leaf: set() for leaf in LEAVES},
    "records": {"atomic", "textfile"},
    "plan": {"atomic", "textfile", "validate"},
    "attention": {"choices"},
    "model": {"attention", "choices", "plan", "validate"},
    "data": {"atomic", "validate"},
    "controller": {"attention", "plan", "records", "textfile", "validate"},
    "eval": {"model", "data", "attention", "controller", "plan"},
    "training": {"model", "data", "controller", "eval", "plan", "records", "atomic", "validate"},
    "sweep": {"training", "controller", "records", "textfile", "validate", "choices"},
    "report": {"records", "sweep", "training", "controller", "data", "attention"},
    "posthoc": {
        "training",
        "eval",
        "model",
        "data",
        "controller",
        "attention",
        "report",
        "validate",
        "atomic",
        "plan",
    },
    "integrations": {"atomic", "attention", "choices", "controller", "model", "plan", "validate"},
    "hf": {"integrations", "plan"},
}
BELOW_CLI = set(TOP) - {"cli", "bench", "__main__"}


def test_every_package_has_a_row():
    assert set(TOP) - {"cli", "bench", "__main__"} == set(ALLOWED)


def test_packages_import_only_what_their_layer_allows():
    edges = graph(package_of)
    extra = {pkg: sorted(edges.get(pkg, set()) - allowed) for pkg, allowed in ALLOWED.items()}
    assert not any(extra.values()), {pkg: names for pkg, names in extra.items() if names}


def test_benchmarks_use_only_the_flag_vocabulary_of_the_cli():
    edges = graph(lambda m: m)
    used = {package_of(t) if t.split(".")[1] != "cli" else t for t in edges_from("bench", edges)}
    outside = used - BELOW_CLI - {"bench"}
    assert outside == {"aah.cli.flags"}, sorted(outside)


def edges_from(package: str, edges: dict[str, set[str]]) -> set[str]:
    """Every module the modules of `package` import."""
    return set().union(*(t for src, t in edges.items() if package_of(src) == package))


# Rooms inside a package, each with the rooms of the same package it may import.
ROOMS: dict[str, dict[str, set[str]]] = {
    # Running a plan inside transformers never needs the search; the search runs plans.
    "aah.integrations.hf": {"run": set(), "search": {"run"}},
}


def room_of(module: str, package: str) -> str | None:
    """The room of `package` that `module` lives in, or None when it lives outside them."""
    rest = module.removeprefix(package + ".")
    return rest.split(".")[0] if rest != module and "." in rest else None


def room_violations(package: str, rooms: dict[str, set[str]]) -> list[str]:
    edges = graph(lambda m: m)
    found = []
    for src, targets in edges.items():
        here = room_of(src, package)
        if here is None:
            continue
        for dst in targets:
            there = room_of(dst, package)
            if there is not None and there != here and there not in rooms[here]:
                found.append(f"{src} -> {dst}")
    return sorted(found)


def test_rooms_import_one_way():
    for package, rooms in ROOMS.items():
        present = {room_of(m, package) for m in graph(lambda m: m)} - {None}
        assert present == set(rooms), (package, present)
        assert room_violations(package, rooms) == [], package
        # The rule can fail: with the search side forbidden, the search's imports are found.
        assert room_violations(package, {**rooms, "search": set()})
