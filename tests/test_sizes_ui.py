"""Sizes a reader can hold in mind, read from ui/'s source: no class over 350 lines, no function over
60, and main_window.py (layout, menus and wiring) under 450. Each rule also runs on a small made-up
tree, where it must find what it forbids."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO_ROOT

MAX_CLASS_LINES = 350
MAX_FUNCTION_LINES = 60
MAX_MAIN_WINDOW_LINES = 449
UI = REPO_ROOT / "ui"


def oversized(root: Path) -> list[str]:
    """Every class over :data:`MAX_CLASS_LINES` and function over :data:`MAX_FUNCTION_LINES` lines
    (decorators and docstrings included) under ``root``, as ``path:line name (n lines)``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                limit = MAX_CLASS_LINES
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                limit = MAX_FUNCTION_LINES
            else:
                continue
            first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
            lines = node.end_lineno - first + 1
            if lines > limit:
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_class_or_function_in_ui_is_too_long() -> None:
    assert len(list(UI.rglob("*.py"))) > 10, "the ui sources were found"
    assert oversized(UI) == []


def test_the_main_window_module_holds_layout_menus_and_wiring_only() -> None:
    lines = len((UI / "main_window.py").read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MAIN_WINDOW_LINES, f"main_window.py has {lines} lines; move a part of the window into a module of its own"


def test_the_size_check_finds_a_long_class_and_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{index} = {index}" for index in range(MAX_FUNCTION_LINES))
    (tmp_path / "long_function.py").write_text(f"def long():\n{body}\n", encoding="utf-8")
    (tmp_path / "short_function.py").write_text(f"def short():\n{body[: body.rindex(chr(10))]}\n", encoding="utf-8")
    methods = "\n".join(f"    def m{index}(self):\n        return {index}\n" for index in range(MAX_CLASS_LINES // 3 + 2))
    (tmp_path / "long_class.py").write_text(f"class Long:\n{methods}", encoding="utf-8")
    assert [entry.split(" ")[1] for entry in oversized(tmp_path)] == ["Long", "long"]
