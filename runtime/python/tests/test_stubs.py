"""The typed stubs (`_mcpolicy.pyi`) name what the extension module has:
every class and function of the module is in the stubs, and every member
the stubs give a class exists on it."""

import ast
from pathlib import Path

import mcpolicy
from mcpolicy import _mcpolicy

STUBS = Path(mcpolicy.__file__).with_name("_mcpolicy.pyi")


def stubbed() -> dict[str, set[str]]:
    tree = ast.parse(STUBS.read_text())
    names: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = {
                item.name if isinstance(item, ast.FunctionDef) else item.target.id  # type: ignore[union-attr]
                for item in node.body
                if isinstance(item, ast.FunctionDef) or (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name))
            }
        elif isinstance(node, ast.FunctionDef):
            names[node.name] = set()
    return names


def test_the_stubs_ship_with_py_typed() -> None:
    assert STUBS.is_file()
    assert STUBS.with_name("py.typed").is_file()


def test_every_public_name_of_the_module_is_stubbed() -> None:
    public = {name for name in dir(_mcpolicy) if not name.startswith("_")}
    assert public == set(stubbed()), public ^ set(stubbed())


def test_every_stubbed_member_exists() -> None:
    missing = []
    for name, members in stubbed().items():
        owner = getattr(_mcpolicy, name)
        for member in members - {"__init__"}:
            if name == "Error":
                continue  # set on each instance when it is raised
            if not hasattr(owner, member):
                missing.append(f"{name}.{member}")
    assert missing == []


def test_every_public_member_of_a_class_is_stubbed() -> None:
    unstubbed = []
    for name, members in stubbed().items():
        owner = getattr(_mcpolicy, name)
        if not isinstance(owner, type) or name == "Error":
            continue
        for member in dir(owner):
            if not member.startswith("_") and member not in members:
                unstubbed.append(f"{name}.{member}")
    assert unstubbed == []
