"""What the installed vLLM accepts, read from its source without importing it.

Importing vLLM takes seconds (about 6 s on the 2-core machine), and ``horizon validate`` runs
where vLLM may not start, yet a profile's engine settings are refused by vLLM or
``ray.serve.llm`` only once Ray is up and the application builds or the engine starts. So the
commands that load a profile read the few facts they check from vLLM's own files with
``ast``. Each reader returns None when the installed vLLM cannot be read that way (none
installed, a layout this version does not have): nothing is checked then.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path
from typing import Iterable, Optional


def _module(relative: str) -> Optional[ast.Module]:
    """The parsed source of ``vllm/<relative>``, or None."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


@functools.lru_cache(maxsize=1)
def tool_parser_names() -> Optional[frozenset[str]]:
    """The tool-call parsers the installed vLLM registers (``vllm/tool_parsers/__init__.py``)."""
    tree = _module("tool_parsers/__init__.py")
    if tree is None:
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id == "_TOOL_PARSERS_TO_REGISTER" for t in node.targets)):
            names = [k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            return frozenset(names) or None
    return None


def _dataclass_fields(tree: ast.Module, classes: Iterable[str]) -> dict[str, str]:
    """name -> annotation text of the annotated fields of ``classes`` (a class and the bases
    it inherits fields from, all in one file)."""
    wanted = set(classes)
    fields: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in wanted:
            wanted.discard(node.name)
            for statement in node.body:
                if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                    annotation = ast.unparse(statement.annotation)
                    if "ClassVar" not in annotation and "InitVar" not in annotation:
                        fields[statement.target.id] = annotation
    return fields if not wanted else {}


@functools.lru_cache(maxsize=1)
def engine_arguments() -> Optional[dict[str, str]]:
    """name -> annotation text of every key ``ray.serve.llm`` takes in ``engine_kwargs``: the
    fields of vLLM's ``AsyncEngineArgs`` and its OpenAI ``FrontendArgs``. It splits the
    mapping between the two by name and refuses any other ("Unknown engine argument") when the
    application is built, after Ray has started."""
    engine = _module("engine/arg_utils.py")
    frontend = _module("entrypoints/launchers/cli_args.py")
    if engine is None or frontend is None:
        return None
    engine_fields = _dataclass_fields(engine, ("EngineArgs", "AsyncEngineArgs"))
    frontend_fields = _dataclass_fields(frontend, ("BaseFrontendArgs", "FrontendArgs"))
    if not engine_fields or not frontend_fields:
        return None  # half the names would refuse every key of the other half
    return {**engine_fields, **frontend_fields}
