"""The model-family rule: outside ``core/families/qwen3_vl/`` nothing in core, ui or app names a
Qwen3-VL class, prompt token, config field or constant; the registry alone names the package.

And what a family package may hold and reach: no Triton (kernels live in ``core/kernels/``); another
family's modules only where it reuses them and says so in its ``REUSES`` tuple, one way (as
transformers' modular files reuse a sibling's); family limits always passed in, never defaulted;
the vLLM backend names the family it talks to in one module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.import_graph import imported_names, modules_under

FAMILIES = REPO_ROOT / "core" / "families"
FAMILY_PACKAGE = FAMILIES / "qwen3_vl"
REGISTRY = FAMILIES / "__init__.py"

FORBIDDEN = {
    "a Qwen-VL class": r"\bQwen[0-9.]*_?VL[A-Za-z]+",
    "a Qwen chat or vision token": r"<\|(vision_start|vision_end|vision_pad|video_pad|image_pad|im_start|im_end)\|>",
    "a Qwen3-VL config field or model attribute": (
        r"\b(spatial_merge_size|temporal_patch_size|num_position_embeddings|deepstack_visual_indexes|out_hidden_size"
        r"|vision_config|text_config|mm_token_type_ids|video_grid_thw|image_grid_thw|pixel_values_videos"
        r"|get_rope_index|visual\.blocks|language_model\.layers)\b"
    ),
    "a Qwen3-VL constant": (
        r"\b(PATCH_PIXELS|PIXELS_PER_VIDEO_TOKEN|MAX_CLIP_PIXELS|VIDEO_TOKEN|IMAGE_TOKEN|TEXT_TOKEN|VIDEO_PAD"
        r"|IMAGE_PAD|VISION_START|VISION_END)\b|\b2x2\b|\b24576\b"
    ),
    "the Qwen3-VL package (only the registry imports it)": r"families\.qwen3_vl\b",
}


def checked_files() -> list:
    files = [
        path
        for layer in ("core", "ui", "app")
        for path in sorted((REPO_ROOT / layer).rglob("*.py"))
        if not in_a_family_package(path) and path != REGISTRY
    ]
    assert len(files) > 20, "found too few files to check"
    return files


def in_a_family_package(path) -> bool:
    """Whether ``path`` lies in one family's package (a folder under core/families/), not beside them."""
    return FAMILIES in path.parents and path.parent != FAMILIES


def hits(text: str, pattern: str) -> list[str]:
    return [f"line {text.count(chr(10), 0, match.start()) + 1}: {match.group()}" for match in re.finditer(pattern, text)]


@pytest.mark.parametrize("what", FORBIDDEN)
def test_nothing_outside_the_family_names_qwen3_vl(what: str) -> None:
    found = {
        str(path.relative_to(REPO_ROOT)): found
        for path in checked_files()
        if (found := hits(path.read_text(encoding="utf-8"), FORBIDDEN[what]))
    }
    assert not found, f"{what} outside the family packages: {found}"


@pytest.mark.parametrize("what", FORBIDDEN)
def test_each_pattern_finds_what_it_forbids_in_the_family_package(what: str) -> None:
    """The check itself works: every pattern has a hit where Qwen3-VL is allowed to be named."""
    allowed = [FAMILY_PACKAGE / name for name in ("prompt.py", "family.py", "language.py", "geometry.py", "limits.py")]
    texts = "\n".join(path.read_text(encoding="utf-8") for path in [*allowed, REGISTRY])
    assert hits(texts, FORBIDDEN[what])


# ---------------------------------------------------------------- what a family package holds and reuses

FAMILIES = REPO_ROOT / "core" / "families"


def triton_imports(folder: Path, root: Path) -> list[str]:
    """The modules under ``folder`` that import Triton."""
    modules = modules_under(folder, root)
    return sorted(
        name for name, path in modules.items()
        if any(imported == "triton" or imported.startswith("triton.") for imported in imported_names(path, name, set()))
    )


def declared_reuses(family: Path) -> tuple[str, ...]:
    """The family packages ``family/__init__.py`` names in its ``REUSES`` tuple (none without one)."""
    tree = ast.parse((family / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign):
            target = node.target
        elif isinstance(node, ast.Assign):
            target = node.targets[0]
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "REUSES" and node.value is not None:
            return tuple(ast.literal_eval(node.value))
    return ()


def undeclared_reuse(families: Path, root: Path) -> dict[str, list[str]]:
    """Family package -> the other family packages it imports without naming them in ``REUSES``,
    and those that reuse each other (reuse runs one way)."""
    packages = sorted(path for path in families.iterdir() if (path / "__init__.py").is_file())
    names = {path.name for path in packages}
    known = set(modules_under(families, root))
    found: dict[str, list[str]] = {}
    for package in packages:
        reuses = set(declared_reuses(package))
        prefix = "framewise." + ".".join(families.relative_to(root).parts) + "."
        for name, path in modules_under(package, root).items():
            for imported in imported_names(path, name, known):
                other = imported.removeprefix(prefix).split(".")[0] if imported.startswith(prefix) else None
                if other in names and other != package.name and other not in reuses:
                    found.setdefault(package.name, []).append(f"{name} imports {imported}")
        for other in reuses:
            if other in names and package.name in declared_reuses(families / other):
                found.setdefault(package.name, []).append(f"{package.name} and {other} reuse each other")
    return found


def defaulted_limits(folder: Path) -> list[str]:
    """Functions under ``folder`` with a parameter annotated as family limits that has a default:
    limits are passed in, never defaulted (to a family or to None)."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            arguments = node.args
            positional = arguments.posonlyargs + arguments.args
            pairs = list(zip(positional[len(positional) - len(arguments.defaults):], arguments.defaults))
            pairs += [(arg, default) for arg, default in zip(arguments.kwonlyargs, arguments.kw_defaults) if default]
            found += [f"{path.name}: {node.name}({arg.arg}=...)" for arg, _ in pairs
                      if arg.annotation is not None and "FamilyLimits" in ast.unparse(arg.annotation)]
    return found


def test_no_triton_under_families() -> None:
    assert triton_imports(FAMILIES, REPO_ROOT) == [], "a kernel belongs in core/kernels/, named by what it computes"


def test_a_family_imports_another_only_where_it_declares_the_reuse() -> None:
    assert undeclared_reuse(FAMILIES, REPO_ROOT) == {}


def test_limits_are_never_defaulted() -> None:
    found = [hit for layer in ("core", "ui", "app") for hit in defaulted_limits(REPO_ROOT / layer)]
    assert found == [], "pass the limits the caller has (None where no family is known yet)"


def test_the_vllm_backend_names_its_family_in_one_place() -> None:
    naming = sorted(
        str(path.relative_to(REPO_ROOT)) for path in (REPO_ROOT / "core" / "backends").rglob("*.py")
        if "family_for(" in path.read_text(encoding="utf-8")
    )
    assert naming == ["core/backends/vllm/family.py"]


def test_the_family_rules_find_what_they_forbid(tmp_path: Path) -> None:
    families = tmp_path / "core" / "families"
    for name, init, module in [
        ("first", "", "import triton\nfrom framewise.core.families.second import tower\n"),
        ("second", "REUSES = ('first',)\n", "from framewise.core.families.first import layer\n"),
        ("third", "REUSES: tuple[str, ...] = ('first',)\n", "from framewise.core.families.first.layer import x\n"),
    ]:
        (families / name).mkdir(parents=True)
        (families / name / "__init__.py").write_text(init)
        (families / name / ("tower.py" if name == "second" else "layer.py")).write_text(module)
    (families / "first" / "__init__.py").write_text("REUSES = ('second',)\n")
    assert triton_imports(families, tmp_path) == ["framewise.core.families.first.layer"]
    found = undeclared_reuse(families, tmp_path)
    assert found["first"] == ["first and second reuse each other"] and "second" in found and "third" not in found
    (families / "first" / "__init__.py").write_text("")
    assert undeclared_reuse(families, tmp_path) == {
        "first": ["framewise.core.families.first.layer imports framewise.core.families.second.tower"]
    }
    (families / "first" / "defaults.py").write_text(
        "def f(limits: FamilyLimits | None = None): ...\ndef g(limits: FamilyLimits | None): ...\n"
        "def h(*, limits: 'FamilyLimits' = QWEN): ...\n"
    )
    assert defaulted_limits(families / "first") == ["defaults.py: f(limits=...)", "defaults.py: h(limits=...)"]
