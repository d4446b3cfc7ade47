"""The dependency rule: ``core`` never imports Qt; ``ui`` never imports torch or transformers. And
inside core, read from the source: no import circle, kernels import nothing above them, the seam's
plain types import none of their users, no class over 350 lines and no function over 60 (the
sizes ``tests/test_sizes_ui.py`` checks in ui/)."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO_ROOT
from tests.import_graph import first_cycle, import_graph, modules_under, outside_imports
from tests.test_sizes_ui import oversized


# Modules that need an optional package, which the application imports only where it is installed.
OPTIONAL = {
    "framewise.core.kernels.decode_step": "triton",
    "framewise.core.kernels.add_layer_norm": "triton",
    "framewise.core.kernels.vision_attention": "triton",
    "framewise.core.kernels.fp8_gemv": "triton",
    "framewise.core.kernels.gated_rms_norm": "triton",
    "framewise.core.kernels.scaled_rms_norm": "triton",
    "framewise.core.kernels.fp8_row_quant": "triton",
    "framewise.core.kernels.gemv_loads": "triton",
    "framewise.core.kernels.dependent_launch": "triton",
}


def modules_of(package: str) -> list[str]:
    modules = sorted(
        f"framewise.{package}.{path.relative_to(REPO_ROOT / package).with_suffix('').as_posix().replace('/', '.')}"
        for path in (REPO_ROOT / package).rglob("*.py")
        if path.stem not in ("__main__", "__init__")
    )
    modules = [name for name in modules if name not in OPTIONAL or importlib.util.find_spec(OPTIONAL[name])]
    assert len(modules) > 3, f"found no modules in {package}/"
    return modules


def imported_after(modules: list[str]) -> set[str]:
    """Top-level packages in ``sys.modules`` of a fresh interpreter after importing ``modules``."""
    code = "import sys\n" + "".join(f"import {name}\n" for name in modules) + "print(' '.join(sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=180,
        env={"QT_QPA_PLATFORM": "offscreen", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    return {_layer(name) for name in result.stdout.split()}


def _layer(module: str) -> str:
    """``framewise.core.backends.local.engine`` -> ``framewise.core``; ``torch.nn`` -> ``torch``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "framewise" and len(parts) > 1 else parts[0]


def test_ui_does_not_import_torch_or_transformers() -> None:
    loaded = imported_after(modules_of("ui"))
    assert "PySide6" in loaded  # the check itself works
    assert not loaded & {"torch", "transformers"}
    assert not loaded & {"core", "ui", "app"}, "import the layers as framewise.core / framewise.ui / framewise.app"


def test_core_does_not_import_qt_or_the_other_layers() -> None:
    loaded = imported_after(modules_of("core"))
    assert "torch" in loaded
    assert not loaded & {"PySide6", "shiboken6", "framewise.ui", "framewise.app"}
    assert not loaded & {"core", "ui", "app"}, "import the layers as framewise.core / framewise.ui / framewise.app"


# ---------------------------------------------------------------- the rooms of core, read from the source

CORE = REPO_ROOT / "core"
CORE_MODULES = modules_under(CORE, REPO_ROOT)
KNOWN = set(CORE_MODULES)


def test_no_import_circle_among_core_modules() -> None:
    graph = import_graph(CORE_MODULES)
    assert len(graph) > 50 and any(graph.values()), "the graph was read"
    cycle = first_cycle(graph)
    assert cycle is None, "core modules import each other in a circle: " + " -> ".join(cycle or ())


def test_the_circle_check_finds_a_circle() -> None:
    assert first_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert first_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_graph_reads_every_kind_of_import(tmp_path) -> None:
    package = tmp_path / "core" / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from framewise.core.pkg import low\n")
    (package / "low.py").write_text("import os\n")
    (package / "high.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import low\n"
        "def later():\n    import framewise.core.pkg\n"
    )
    modules = modules_under(tmp_path / "core", tmp_path)
    graph = import_graph(modules)
    assert graph["framewise.core.pkg.high"] == {"framewise.core.pkg.low", "framewise.core.pkg"}
    assert graph["framewise.core.pkg"] == {"framewise.core.pkg.low"} and graph["framewise.core.pkg.low"] == set()


def test_kernels_import_nothing_of_the_rooms_above_them() -> None:
    """A kernel is chosen by its callers (families, decoding, encoding, quantization, backends)
    and never reaches back to them."""
    kernels = {name: path for name, path in CORE_MODULES.items() if name.startswith("framewise.core.kernels")}
    assert len(kernels) > 5
    allowed = ("framewise.core.kernels", "framewise.core.errors")
    assert outside_imports(kernels, allowed, KNOWN) == {}


def test_the_seam_imports_nothing_of_its_users() -> None:
    seam = {"framewise.core.seam": CORE_MODULES["framewise.core.seam"]}
    assert outside_imports(seam, ("framewise.core.errors", "framewise.core.wording"), KNOWN) == {}


def test_the_room_rules_find_what_they_forbid() -> None:
    """The check itself works: the engine reaches most rooms of core."""
    engine = {name: CORE_MODULES[name] for name in ("framewise.core.backends.local.engine",)}
    assert "framewise.core.decoding" in outside_imports(engine, ("framewise.core.kernels",), KNOWN)[
        "framewise.core.backends.local.engine"
    ]


# ---------------------------------------------------------------- weight formats live in quantization/

# Where a weight format's name may stand in core: the formats themselves, the kernels named by
# what they compute, and the dtype choices of the settings (``DTYPES``, ``KV_CACHE_DTYPES``),
# nowhere else.
FORMAT_NAME = "fp8"
FORMAT_ROOMS = ("quantization", "kernels")
SETTINGS_CHOICES = ("settings.py", ("DTYPES", "KV_CACHE_DTYPES"))


def format_names(core: Path, word: str = FORMAT_NAME) -> dict[str, list[str]]:
    """Where ``word`` (any case) appears in ``core`` outside the format rooms, by file: in a file or
    folder name, an identifier, or a string (docstrings and f-strings included; comments are
    not read); in the settings file, outside the assignment of its dtype choices."""
    found: dict[str, list[str]] = {}
    for path in sorted(core.rglob("*.py")):
        relative = path.relative_to(core)
        if relative.parts[0] in FORMAT_ROOMS:
            continue
        allowed = (
            {line for name in SETTINGS_CHOICES[1] for line in _assignment_lines(path, name)}
            if relative.as_posix() == SETTINGS_CHOICES[0] else set()
        )
        hits = [f"file {relative.as_posix()}"] if word in relative.as_posix().lower() else []
        hits += [f"line {line}: {text}" for line, text in _names_and_strings(path, word) if line not in allowed]
        if hits:
            found[relative.as_posix()] = hits
    return found


def _names_and_strings(path: Path, word: str) -> Iterator[tuple[int, str]]:
    """Each line of ``path`` where ``word`` (any case) stands in an identifier or a string token,
    with the line's text."""
    kinds = {tokenize.NAME, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    with path.open("rb") as source:
        tokens = [token for token in tokenize.tokenize(source.readline) if token.type in kinds]
    for token in tokens:
        first_line = token.start[0]
        for offset, text in enumerate(token.string.splitlines()):
            if word in text.lower():
                yield first_line + offset, text.strip()


def _assignment_lines(path: Path, name: str) -> set[int]:
    """The lines of the module-level assignment to ``name`` in ``path``."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(target, ast.Name) and target.id == name for target in node.targets):
            return set(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return set()


def test_a_weight_format_is_named_only_in_its_rooms() -> None:
    """A weight format is one module in core/quantization/ and a registry line: the loader, the
    families, the decoder layers and the engine hold the format object the registry chose, never
    its name."""
    assert format_names(CORE) == {}


def test_the_format_rule_finds_what_it_forbids(tmp_path: Path) -> None:
    core = tmp_path / "core"
    for folder in ("quantization", "kernels", "decoding", "families/some_fp8_family"):
        (core / folder).mkdir(parents=True)
    (core / "quantization" / "fp8.py").write_text('FP8 = "fp8"\n')
    (core / "kernels" / "fp8_gemv.py").write_text("def fp8_gemv(): ...\n")
    (core / "settings.py").write_text('DTYPES = (\n    "auto",\n    "fp8",\n)\nOTHER = "Fp8"\n')
    (core / "decoding" / "layers.py").write_text(
        '"""Layers."""\n# fp8 in a comment is not read\nfrom x import is_FP8\nmessage = f"choose {x} or fp8"\n'
    )
    (core / "families" / "some_fp8_family" / "__init__.py").write_text("")
    assert format_names(core) == {
        "decoding/layers.py": ["line 3: is_FP8", 'line 4: f"choose {x} or fp8"'],
        "families/some_fp8_family/__init__.py": ["file families/some_fp8_family/__init__.py"],
        "settings.py": ['line 5: "Fp8"'],
    }


def test_no_class_or_function_in_core_is_too_long() -> None:
    assert len(CORE_MODULES) > 50, "the core sources were found"
    assert oversized(CORE) == []
