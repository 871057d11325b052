"""The settings part of an oracle spec string: ``"tables=5,bits=15"`` -> ``{"tables": 5, "bits": 15}``.

Shared by :mod:`hypann.oracles.registry` and the oracles that parse their own
spec syntax (faiss), which the registry loads: keeping the parser here keeps
the registry and those oracles free of an import cycle.
"""

from __future__ import annotations


def parse_value(text: str):
    """Parse one spec value: int, float, bool, None or string.

    Only the literals ``true`` / ``false`` (any case) become booleans; other
    words (``yes``, ``no``, ``on``) stay strings, which boolean settings
    refuse, and ``1`` / ``0`` stay integers.
    """
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "none":
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text.strip()


def parse_kwargs(args: str, *, where: str) -> dict:
    """``"a=1,b=x"`` -> ``{"a": 1, "b": "x"}``; raises ValueError naming the bad item."""
    out = {}
    if not args:
        return out
    for item in args.split(","):
        if "=" not in item:
            raise ValueError(f"bad setting {item!r} in {where}: expected key=value")
        key, value = item.split("=", 1)
        key = key.strip()
        if not key.isidentifier():
            raise ValueError(f"bad setting name {key!r} in {where}")
        out[key] = parse_value(value)
    return out
