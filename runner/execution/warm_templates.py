"""Compiled Jinja templates shared by the warm executor's task workers, on disk.

Every task worker is a fresh fork, so Jinja compiles every template and conditional of every task again,
in every run: a third of a SampleDB run (`python -m bench.profile --sampledb`). Compiling depends only on
the template's text and the environment's syntax settings, so the Python code Jinja makes is kept on disk,
keyed by both, and the next worker that meets the same text loads it instead. An edited template is new
text, hence a new key. Only successful compilations are kept: a syntax error is reported as before.

Installed per run by ``warm_child.run_playbook``; nothing here may fail a template: any problem with the
cache falls back to Jinja's own compilation.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import types
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.environment import TemplateExpression
from jinja2.parser import Parser

_ORIGINAL_COMPILE = jinja2.Environment.compile
_ORIGINAL_COMPILE_EXPRESSION = jinja2.Environment.compile_expression
_SYNTAX = ("block_start_string", "block_end_string", "variable_start_string", "variable_end_string",
           "comment_start_string", "comment_end_string", "line_statement_prefix", "line_comment_prefix",
           "trim_blocks", "lstrip_blocks", "newline_sequence", "keep_trailing_newline", "optimized", "is_async")

_directory: str | None = None


def install(directory: str) -> None:
    """Use ``directory`` (made if needed) for this process and its forks; a no-op when Ansible's templating
    is not the one this was written for (its compile-time settings could not be part of the key)."""
    global _directory
    try:
        _compile_settings()
    except Exception:
        return
    os.makedirs(directory, mode=0o700, exist_ok=True)
    _directory = directory
    jinja2.Environment.compile = _compile
    jinja2.Environment.compile_expression = _compile_expression


def _compile_settings() -> tuple[Any, ...]:
    """What Ansible adds to Jinja's settings at compile time (ansible-core 2.19's internals)."""
    from ansible._internal._templating._jinja_bits import _TemplateCompileContext
    from ansible._internal._templating._jinja_common import _TemplateConfig

    current = _TemplateCompileContext.current(optional=True)
    return (getattr(current, "escape_backslashes", None), _TemplateConfig.allow_embedded_templates)


def _key(env: jinja2.Environment, kind: str, source: str, *extra: Any) -> str | None:
    if getattr(env, "_debuggable_template_source", False) or not isinstance(source, str):
        return None
    settings = (type(env).__module__, type(env).__qualname__, *(getattr(env, k, None) for k in _SYNTAX),
                tuple(sorted(env.extensions)), env.finalize is not None, _callable_name(env.autoescape),
                *_compile_settings(), jinja2.__version__)
    return hashlib.sha256(repr((kind, settings, extra, str(source))).encode()).hexdigest()


def _callable_name(value: Any) -> Any:
    return f"{value.__module__}.{value.__qualname__}" if callable(value) else value


def _load(key: str) -> types.CodeType | None:
    try:
        with open(os.path.join(_directory or "", key), "rb") as f:
            code = marshal.load(f)
        return code if isinstance(code, types.CodeType) else None
    except (OSError, EOFError, ValueError, TypeError):
        return None


def _store(key: str, code: types.CodeType) -> None:
    path = os.path.join(_directory or "", key)
    tmp = f"{path}.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            marshal.dump(code, f)
        os.replace(tmp, path)  # readers see the whole file or none
    except OSError:
        pass


def _compile(self: jinja2.Environment, source: Any, name: str | None = None, filename: str | None = None,
             raw: bool = False, defer_init: bool = False) -> Any:
    key = None if raw else _key(self, "template", source, name, filename, defer_init)
    if key is not None and (code := _load(key)) is not None:
        return code
    code = _ORIGINAL_COMPILE(self, source, name, filename, raw, defer_init)
    if key is not None:
        _store(key, code)
    return code


def _compile_expression(self: jinja2.Environment, source: str, undefined_to_none: bool = True) -> TemplateExpression:
    key = _key(self, "expression", source)
    if key is None:
        return _ORIGINAL_COMPILE_EXPRESSION(self, source, undefined_to_none)
    code = _load(key)
    if code is None:
        # Jinja's compile_expression, keeping the code it compiles
        parser = Parser(self, source, state="variable")
        try:
            expr = parser.parse_expression()
            if not parser.stream.eos:
                raise jinja2.TemplateSyntaxError("chunk after expression", parser.stream.current.lineno, None, None)
            expr.set_environment(self)
        except jinja2.TemplateSyntaxError:
            self.handle_exception(source=source)
        body = [nodes.Assign(nodes.Name("result", "store"), expr, lineno=1)]
        code = _ORIGINAL_COMPILE(self, nodes.Template(body, lineno=1))
        _store(key, code)
    template = self.template_class.from_code(self, code, self.make_globals(None), None)
    return TemplateExpression(template, undefined_to_none)
