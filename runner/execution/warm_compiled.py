"""Jinja's compiled code of a template string, kept for the next time the same string is templated.

ansible-core 2.18 compiles every string it templates anew (``Environment.from_string``: parse, optimise,
generate Python, ``compile``), also one it compiled a moment ago: a role default that refers to another
variable is compiled again each time a task uses it (in eda-server-operator's first reconcile, 140 of 410
compiles were of a string the same process had compiled before). Here the code object is kept per run
process (and so in each task worker forked from it), keyed by the string and everything of the environment
the compiler reads, and ``from_string`` builds a fresh template from it as Jinja itself does for a loaded
template (``Template.from_code``): each template still has its own globals, and renders with its own
environment's filters and tests, looked up when it renders, as before.

Kept only when compiling it could not have gone otherwise: no filter or test was called while the optimiser
folded constants (``{{ 'pw' | password_hash }}`` draws a new salt each time it is compiled), and the names of
filters and tests resolve the same way (the same plugin directories and collection). A string that fails to
compile fails the way Jinja fails, each time.
"""

from __future__ import annotations

import threading
from typing import Any

from jinja2 import nodes

_MAX_ENTRIES = 4096
_CODE: dict[tuple[Any, ...], Any] = {}
_folding = threading.local()


def _collection_paths(config: Any) -> tuple[str, ...]:
    try:
        return tuple(config.collection_paths or ())
    except NotImplementedError:  # no collection finder in this process (yet)
        return ()


def _environment_key(env: Any) -> tuple[Any, ...]:
    """What of the environment and the plugin loaders the compiled code depends on."""
    from ansible.plugins.loader import filter_loader, test_loader
    from ansible.utils.collection_loader import AnsibleCollectionConfig

    return (type(env), env.block_start_string, env.block_end_string, env.variable_start_string,
            env.variable_end_string, env.comment_start_string, env.comment_end_string, env.line_statement_prefix,
            env.line_comment_prefix, env.trim_blocks, env.lstrip_blocks, env.newline_sequence,
            env.keep_trailing_newline, env.optimized, env.is_async, env.autoescape, env.finalize,
            env.code_generator_class, env.concat, tuple(env.extensions), env.undefined,
            tuple(filter_loader._extra_dirs), tuple(test_loader._extra_dirs),
            AnsibleCollectionConfig.default_collection, _collection_paths(AnsibleCollectionConfig))


def _recording_as_const(original: Any) -> Any:
    def as_const(self: Any, eval_ctx: Any = None) -> Any:
        try:
            value = original(self, eval_ctx)
        except nodes.Impossible as exc:
            if exc.__cause__ is not None and getattr(_folding, "active", False):
                _folding.called = True  # the filter or test (or one of its arguments) ran and raised
            raise
        if getattr(_folding, "active", False):
            _folding.called = True
        return value

    as_const.recording = True  # type: ignore[attr-defined]
    return as_const


def install() -> bool:
    """For ansible-core 2.18's environments in this process and its forks; False where there is nothing to do."""
    try:
        from ansible.template import AnsibleEnvironment
        from ansible.template.native_helpers import ansible_eval_concat  # noqa: F401  (2.18 only)
    except ImportError:  # ansible-core 2.19 and later template otherwise
        return False
    if getattr(AnsibleEnvironment.compile, "kept", False):
        return True
    if not getattr(nodes._FilterTestCommon.as_const, "recording", False):
        nodes._FilterTestCommon.as_const = _recording_as_const(nodes._FilterTestCommon.as_const)
    original_compile = AnsibleEnvironment.compile

    def compile(self: Any, source: Any, name: Any = None, filename: Any = None, raw: bool = False,
                defer_init: bool = False) -> Any:
        if not isinstance(source, str) or name is not None or filename is not None or raw or defer_init:
            return original_compile(self, source, name, filename, raw, defer_init)
        key = (str.__str__(source), *_environment_key(self))
        code = _CODE.get(key)
        if code is not None:
            return code
        outer = (getattr(_folding, "active", False), getattr(_folding, "called", False))
        _folding.active, _folding.called = True, False
        try:
            code = original_compile(self, source)
        finally:
            called = _folding.called
            _folding.active, _folding.called = outer[0], outer[1] or called
        if not called:
            if len(_CODE) >= _MAX_ENTRIES:
                _CODE.clear()
            _CODE[key] = code
        return code

    compile.kept = True  # type: ignore[attr-defined]
    AnsibleEnvironment.compile = compile  # type: ignore[method-assign]
    return True
