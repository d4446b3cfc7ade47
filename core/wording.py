"""Small wording rules shared by the window and the command line."""

from __future__ import annotations


def plural(count: int, noun: str, plural_noun: str | None = None) -> str:
    """``plural(1, "token")`` -> ``"1 token"``; ``plural(3, "pass", "passes")`` -> ``"3 passes"``."""
    word = noun if count == 1 else (plural_noun or noun + "s")
    return f"{count:,} {word}"
