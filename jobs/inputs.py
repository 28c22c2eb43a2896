"""What the console accepts from outside, in one place: text that can be stored
and shown, whole numbers written in ASCII digits, JSON of bounded depth, and
workspace references that are unambiguous.

Why each rule exists:
- PostgreSQL stores neither NUL characters nor lone UTF-16 surrogates, and a
  surrogate stored by SQLite breaks every page that later renders it (UTF-8
  encoding fails), so neither is accepted anywhere.
- Names (workspaces, channels, rules, jobs) are shown on one line in lists,
  e-mails and chat messages: control characters and line separators are refused.
- `str.isdigit()` is true for "²" and "①", which `int()` refuses, and `int()`
  takes "٣" (Arabic-Indic three): numbers from requests are ASCII digits only.
- JSON nested a few thousand levels deep makes the parser raise RecursionError
  (a 500); anything below that but deeper than MAX_JSON_DEPTH would recurse again
  when stored or rendered. No request of ours is nested more than a few levels.
- A workspace slug starts with a letter, so a reference that is all digits is an
  id and anything else is a slug: "4" can no longer mean two workspaces.

Refusals are InputError, a BadRequest: the pages answer 400 through Django's
handler400 (console.views.bad_request), the API through
jobs.exceptions.api_exception_handler, both naming the field.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from django.core.exceptions import BadRequest
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import exceptions
from rest_framework.parsers import JSONParser
from rest_framework.settings import api_settings

MAX_JSON_DEPTH = 32
MAX_BIGINT = (1 << 63) - 1  # the largest id, offset or count a database column holds
SLUG_RE = re.compile(r"[A-Za-z][-A-Za-z0-9_]*")
_INT_RE = re.compile(r"[+-]?[0-9]+", re.ASCII)
_MAX_INT_DIGITS = 19
# Characters a one-line name may not hold: C0/C1 controls, line and paragraph separators.
_NOT_IN_NAMES = frozenset({"Cc", "Zl", "Zp"})
# Bidirectional controls: in a name they reorder what follows, so "job\u202egnp.exe"
# reads as another name in every list that shows it (issue 31, finding 7).
_BIDI_CONTROLS = frozenset(
    {"\u061c", "\u200e", "\u200f", *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))}
)


class InputError(BadRequest):
    """A request value that is not accepted: which field, and what is."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# --- text ----------------------------------------------------------------------------


def text_problem(value: str, *, one_line: bool = False) -> str | None:
    """Why `value` cannot be stored (or, with one_line, shown as a name), or None."""
    if "\x00" in value:
        return "contains a NUL character (\\u0000), which cannot be stored; remove it."
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"contains a lone surrogate (U+{ord(value[exc.start]):04X}, an unpaired \\ud800-\\udfff escape), "
            "which is not valid Unicode; send the character itself."
        )
    if one_line:
        for ch in value:
            if unicodedata.category(ch) in _NOT_IN_NAMES:
                return f"contains the control character U+{ord(ch):04X}; use printable characters on one line."
            if ch in _BIDI_CONTROLS:
                return (
                    f"contains the bidirectional control U+{ord(ch):04X}, which would make the name read "
                    "differently from what it is; remove it."
                )
    return None


def validate_name(value) -> None:
    """Django validator for names shown on one line (workspaces, channels, rules)."""
    problem = text_problem(value, one_line=True) if isinstance(value, str) else None
    if problem:
        raise DjangoValidationError(problem[0].upper() + problem[1:], code="not_a_name")


def validate_workspace_slug(value) -> None:
    if not isinstance(value, str) or not SLUG_RE.fullmatch(value):
        raise DjangoValidationError(
            "A slug starts with a letter and holds only letters, digits, - and _ (e.g. vision-lab); "
            "an all-digit reference means a workspace id.",
            code="invalid_slug",
        )


# --- numbers -------------------------------------------------------------------------


def whole_number(raw) -> int | None:
    """An int from an int or from ASCII digits (optional sign, spaces around), else None."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str):
        text = raw.strip()
        if _INT_RE.fullmatch(text) and len(text.lstrip("+-")) <= _MAX_INT_DIGITS:
            return int(text)
    return None


def parse_int(raw, field: str, *, minimum: int = 0, maximum: int = MAX_BIGINT) -> int:
    value = whole_number(raw)
    if value is None:
        raise InputError(
            field, f"must be a whole number from {minimum} to {maximum} in ASCII digits; got {str(raw)[:40]!r}."
        )
    if not minimum <= value <= maximum:
        raise InputError(field, f"must be from {minimum} to {maximum}; got {value}.")
    return value


def query_int(params, field: str, *, default=None, minimum: int = 0, maximum: int = MAX_BIGINT):
    """A whole-number query parameter, `default` when it is absent or empty."""
    raw = params.get(field)
    if raw in (None, ""):
        return default
    return parse_int(raw, field, minimum=minimum, maximum=maximum)


# --- workspace references ----------------------------------------------------------------


def workspace_ref(ref, field: str = "workspace") -> tuple[str, int | str]:
    """("pk", id) for an id (an int, or ASCII digits), ("slug", slug) for a slug."""
    if isinstance(ref, bool):
        ref = None
    if isinstance(ref, int):
        return "pk", parse_int(ref, field, minimum=1)
    if isinstance(ref, str):
        text = ref.strip()
        if text.isascii() and text.isdigit():
            return "pk", parse_int(text, field, minimum=1)
        if SLUG_RE.fullmatch(text):
            return "slug", text
    raise InputError(field, f"must be a workspace id (digits) or slug (starting with a letter); got {str(ref)[:40]!r}.")


# --- JSON bodies ----------------------------------------------------------------------------


class UnacceptableJSON(exceptions.ParseError):
    """A JSON body that parsed but cannot be taken; detail names the field path."""

    def __init__(self, field: str, message: str):
        super().__init__({field: [message]})
        self.field = field
        self.message = message


def json_problem(data, max_depth: int = MAX_JSON_DEPTH, brackets: bool = False) -> tuple[str, str] | None:
    """(field path, why) for the first thing in parsed JSON that cannot be taken:
    nesting deeper than max_depth, or a key or string that cannot be stored. Paths
    name list items the caller's way: `job_specs.1.image`, or with brackets
    `records[0].op` (the SDK endpoints' style)."""
    stack = [(data, "", 1)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, str):
            problem = text_problem(value)
            if problem:
                return path or "body", problem
            continue
        if isinstance(value, dict):
            items = ((key, f"{path}.{key}" if path else str(key), child) for key, child in value.items())
        elif isinstance(value, list):
            items = (
                (i, f"{path}[{i}]" if brackets else f"{path}.{i}" if path else str(i), child)
                for i, child in enumerate(value)
            )
        else:
            continue
        if depth > max_depth:
            return path or "body", f"is nested more than {max_depth} levels deep."
        children = []
        for key, child_path, child in items:
            key_problem = text_problem(key) if isinstance(key, str) else None
            if key_problem:
                return child_path.encode("utf-8", "replace").decode().replace("\x00", "\\u0000"), (
                    "this key " + key_problem
                )
            if isinstance(child, (str, dict, list)):
                children.append((child, child_path, depth + 1))
        stack.extend(reversed(children))  # the first problem in document order is the one named
    return None


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser, answering 400 for bodies nested too deep for Python's
    parser (RecursionError), nested deeper than MAX_JSON_DEPTH, or holding a NUL
    character or a lone surrogate in any key or string."""

    brackets = False  # how a refusal names list items (json_problem)

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise UnacceptableJSON("body", f"is nested more than {MAX_JSON_DEPTH} levels deep.") from None
        problem = json_problem(data, brackets=self.brackets)
        if problem:
            raise UnacceptableJSON(*problem)
        return data


def flat_errors(detail: Any, *, brackets: bool = False, path: str = "") -> dict[str, list[str]]:
    """A serializer's nested errors keyed by the path the caller sent, so that the
    message sits beside its field: {"job_specs": [{}, {"pod_count": [...]}]} becomes
    {"job_specs.1.pod_count": [...]} (with brackets: `records[1].op`). An object's own
    error (non_field_errors) is named by the object's path."""
    if isinstance(detail, dict):
        items: list[tuple[Any, Any]] = list(detail.items())
    elif isinstance(detail, list) and detail and all(isinstance(d, (dict, list)) for d in detail):
        items = list(enumerate(detail))  # a list serializer: one entry per item, {} for a valid one
    else:
        messages = detail if isinstance(detail, list) else [detail]
        return {path or api_settings.NON_FIELD_ERRORS_KEY: [str(m) for m in messages]}
    out: dict[str, list[str]] = {}
    for key, child in items:
        if not child:
            continue
        if key == api_settings.NON_FIELD_ERRORS_KEY and path:
            child_path = path
        elif isinstance(key, int):
            child_path = f"{path}[{key}]" if brackets else f"{path}.{key}" if path else str(key)
        else:
            child_path = f"{path}.{key}" if path else str(key)
        for name, messages in flat_errors(child, brackets=brackets, path=child_path).items():
            out.setdefault(name, []).extend(messages)
    return out
