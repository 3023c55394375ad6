"""Label and field selectors, parsed the way apimachinery parses them.

Label selectors (``k8s.io/apimachinery/pkg/labels``): the same grammar and lexer rules as
upstream's parser::

    <selector>    ::= <requirement> | <requirement> "," <selector>
    <requirement> ::= [!] KEY [ ("in" | "notin") "(" VALUES ")" | ("=" | "==" | "!=" | ">" | "<") VALUE ]

Identifiers run until whitespace or one of ``=!(),<>``; ``in``/``notin`` are keywords only in
operator position; ``()`` and empty list items mean the empty value (so ``x in ()`` is
``x in ("")``, which upstream accepts); ``!=`` and ``notin`` also match objects without the label;
``>``/``<`` compare integers.  Errors carry upstream's text (``unable to parse requirement:
values[0][x]: Invalid value: "a b": a valid label must be ...``) and become 400 BadRequest, as
when ``DecodeParameters`` fails to convert the ``labelSelector`` query parameter.

Field selectors (``k8s.io/apimachinery/pkg/fields``): terms split on unescaped commas, each
``field=value``, ``field==value`` or ``field!=value`` (no whitespace trimming, ``\\,`` ``\\=``
``\\\\`` escapes), on a per-resource allow-list of fields (upstream registers them in each
resource's strategy via ``AddFieldLabelConversionFunc``); anything else is a 400 BadRequest, which
is what kubectl shows for an unsupported field label.  Missing fields compare as the empty
string.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pykubelet.common.podspec import label_value_errors, qualified_name_errors
from pykubelet.server.errors import bad_request

Obj = dict[str, Any]
Matcher = Callable[[Obj], bool]


class Tok(Enum):
    ERROR = "error"
    END = "end"
    CLOSE = ")"
    COMMA = ","
    NOT = "!"
    DOUBLE_EQ = "=="
    EQ = "="
    GT = ">"
    IDENT = "identifier"
    IN = "in"
    LT = "<"
    NOT_EQ = "!="
    NOT_IN = "notin"
    OPEN = "("


_SYMBOLS = {")": Tok.CLOSE, ",": Tok.COMMA, "!": Tok.NOT, "==": Tok.DOUBLE_EQ, "=": Tok.EQ, ">": Tok.GT,
            "<": Tok.LT, "!=": Tok.NOT_EQ, "(": Tok.OPEN}
_KEYWORDS = {"in": Tok.IN, "notin": Tok.NOT_IN}
_SPECIAL = set("=!(),><")
_SPACE = set(" \t\r\n")
# upstream binaryOperators, in its order
_BINARY_OPS = "in, notin, =, ==, !=, gt, lt"


class SelectorError(ValueError):
    pass


def _lex(s: str) -> list[tuple[Tok, str]]:
    out: list[tuple[Tok, str]] = []
    i, n = 0, len(s)
    while True:
        while i < n and s[i] in _SPACE:
            i += 1
        if i >= n:
            out.append((Tok.END, ""))
            return out
        if s[i] in _SPECIAL:
            buf, last = "", None
            while i < n and s[i] in _SPECIAL:
                if buf + s[i] in _SYMBOLS:
                    buf += s[i]
                    last = (_SYMBOLS[buf], buf)
                    i += 1
                elif last is not None:
                    break
                else:
                    buf += s[i]
                    i += 1
            out.append(last if last is not None else (Tok.ERROR, f"error expected: keyword found '{buf}'"))
            continue
        j = i
        while j < n and s[j] not in _SPECIAL and s[j] not in _SPACE:
            j += 1
        word = s[i:j]
        i = j
        out.append((_KEYWORDS.get(word, Tok.IDENT), word))


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # in notin = == != gt lt exists !
    values: tuple[str, ...]

    def matches(self, labels: dict[str, Any]) -> bool:
        has = self.key in labels
        val = labels.get(self.key)
        if self.op in ("in", "=", "=="):
            return has and val in self.values
        if self.op in ("notin", "!="):
            return not has or val not in self.values
        if self.op == "exists":
            return has
        if self.op == "!":
            return not has
        if not has or not isinstance(val, str):
            return False
        if not re.fullmatch(r"[+-]?[0-9]+", val):
            return False
        lv, rv = int(val), int(self.values[0])
        return lv > rv if self.op == "gt" else lv < rv


def _field_error(path: str, body: str) -> str:
    return f"{path}: {body}"


def _new_requirement(key: str, op: str, values: list[str]) -> Requirement:
    """labels.NewRequirement: the key and values validated, errors aggregated."""
    errs: list[str] = []
    key_errs = qualified_name_errors(key)
    if key_errs:
        errs.append(_field_error("key", f"Invalid value: {json.dumps(key)}: " + "; ".join(key_errs)))
    vals_go = "[]string{" + ", ".join(json.dumps(v) for v in values) + "}"
    if op in ("in", "notin") and not values:
        errs.append(_field_error("values", f"Invalid value: {vals_go}: for 'in', 'notin' operators, values set "
                                 "can't be empty"))
    elif op in ("=", "==", "!=") and len(values) != 1:
        errs.append(_field_error("values", f"Invalid value: {vals_go}: exact-match compatibility requires one "
                                 "single value"))
    elif op in ("gt", "lt"):
        if len(values) != 1:
            errs.append(_field_error("values", f"Invalid value: {vals_go}: for 'Gt', 'Lt' operators, exactly one "
                                     "value is required"))
        for i, v in enumerate(values):
            if not re.fullmatch(r"[+-]?[0-9]+", v) or not -(2**63) <= int(v) < 2**63:  # strconv.ParseInt
                errs.append(_field_error(f"values[{i}]", f"Invalid value: {json.dumps(v)}: for 'Gt', 'Lt' "
                                         "operators, the value must be an integer"))
    for i, v in enumerate(values):
        why = label_value_errors(v)
        if why:
            errs.append(_field_error(f"values[{i}][{key}]", f"Invalid value: {json.dumps(v)}: " + "; ".join(why)))
    if errs:
        raise SelectorError(errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]")
    return Requirement(key, op, tuple(values))


class _Parser:
    def __init__(self, s: str) -> None:
        self.items = _lex(s)
        self.pos = 0

    def _look(self, values: bool) -> tuple[Tok, str]:
        tok, lit = self.items[self.pos]
        if values and tok in (Tok.IN, Tok.NOT_IN):
            tok = Tok.IDENT
        return tok, lit

    def _take(self, values: bool) -> tuple[Tok, str]:
        t = self._look(values)
        self.pos += 1
        return t

    def parse(self) -> list[Requirement]:
        reqs: list[Requirement] = []
        while True:
            tok, lit = self._look(True)
            if tok in (Tok.IDENT, Tok.NOT):
                try:
                    reqs.append(self._requirement())
                except SelectorError as e:
                    raise SelectorError(f"unable to parse requirement: {e}") from e
                t, lit2 = self._take(True)
                if t == Tok.END:
                    return reqs
                if t != Tok.COMMA:
                    raise SelectorError(f"found '{lit2}', expected: ',' or 'end of string'")
                t2, lit3 = self._look(True)
                if t2 not in (Tok.IDENT, Tok.NOT):
                    raise SelectorError(f"found '{lit3}', expected: identifier after ','")
            elif tok == Tok.END:
                return reqs
            else:
                raise SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")

    def _requirement(self) -> Requirement:
        tok, lit = self._take(True)
        negated = tok == Tok.NOT
        if negated:
            tok, lit = self._take(True)
        if tok != Tok.IDENT:
            raise SelectorError(f"found '{lit}', expected: identifier")
        key_errs = qualified_name_errors(lit)
        if key_errs:
            raise SelectorError(f": Invalid value: {json.dumps(lit)}: " + "; ".join(key_errs))
        nxt, _ = self._look(True)
        if negated or nxt in (Tok.END, Tok.COMMA):
            return _new_requirement(lit, "!" if negated else "exists", [])
        op_tok, op_lit = self._take(False)
        op = {Tok.IN: "in", Tok.NOT_IN: "notin", Tok.EQ: "=", Tok.DOUBLE_EQ: "==", Tok.NOT_EQ: "!=",
              Tok.GT: "gt", Tok.LT: "lt"}.get(op_tok)
        if op is None:
            raise SelectorError(f"found '{op_lit}', expected: {_BINARY_OPS}")
        values = self._set_values() if op in ("in", "notin") else self._exact_value()
        return _new_requirement(lit, op, sorted(values))

    def _set_values(self) -> set[str]:
        tok, lit = self._take(True)
        if tok != Tok.OPEN:
            raise SelectorError(f"found '{lit}' expected: '('")
        tok, lit = self._look(True)
        if tok == Tok.CLOSE:
            self._take(True)
            return {""}
        if tok not in (Tok.IDENT, Tok.COMMA):
            raise SelectorError(f"found '{lit}', expected: ',', ')' or identifier")
        out: set[str] = set()
        while True:
            t, val = self._take(True)
            if t == Tok.IDENT:
                out.add(val)
                t2, lit2 = self._look(True)
                if t2 == Tok.COMMA:
                    continue
                if t2 == Tok.CLOSE:
                    break
                raise SelectorError(f"found '{lit2}', expected: ',' or ')'")
            if t == Tok.COMMA:
                if not out:
                    out.add("")
                t2, _ = self._look(True)
                if t2 == Tok.CLOSE:
                    out.add("")
                    break
                if t2 == Tok.COMMA:
                    out.add("")
                continue
            raise SelectorError(f"found '{val}', expected: ',', or identifier")
        t, _ = self._take(True)
        if t != Tok.CLOSE:
            raise SelectorError(f"found '{lit}', expected: ')'")
        return out

    def _exact_value(self) -> set[str]:
        tok, _ = self._look(True)
        if tok in (Tok.END, Tok.COMMA):
            return {""}
        tok, lit = self._take(True)
        if tok == Tok.IDENT:
            return {lit}
        raise SelectorError(f"found '{lit}', expected: identifier")


def parse_label_requirements(sel: str) -> list[Requirement]:
    """labels.Parse; raises SelectorError with upstream's message."""
    return _Parser(sel).parse()


def parse_label_selector(sel: str | None) -> Matcher:
    """Return a predicate over objects (matches metadata.labels); a bad selector is 400."""
    if not sel:
        return lambda _o: True
    try:
        reqs = parse_label_requirements(sel)
    except SelectorError as e:
        raise bad_request(str(e)) from e

    def match(obj: Obj) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r.matches(labels) for r in reqs)

    return match


# Field paths each resource supports beyond metadata.name / metadata.namespace.
FIELD_LABELS: dict[str, set[str]] = {
    "pods": {"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
             "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"},
    "nodes": {"spec.unschedulable"},
    "events": {"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
               "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
               "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"},
    "events.events.k8s.io": {"regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid",
                             "reason", "type", "reportingController"},
    "secrets": {"type"},
    "namespaces": {"status.phase"},
    "certificatesigningrequests.certificates.k8s.io": {"spec.signerName"},
}


def field_value(obj: Obj, path: str) -> str:
    if path == "source":  # events: source is source.component upstream
        src = obj.get("source")
        return str((src.get("component") if isinstance(src, dict) else "") or "")
    cur: Any = obj
    for p in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(p)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def _split_terms(sel: str) -> list[str]:
    """fields.splitTerms: split on commas not escaped by a backslash."""
    terms: list[str] = []
    cur: list[str] = []
    escaped = False
    for ch in sel:
        if escaped:
            cur.append(ch)
            escaped = False
        elif ch == "\\":
            cur.append(ch)
            escaped = True
        elif ch == ",":
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    terms.append("".join(cur))
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    for i in range(len(term)):
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op):]
    return None


def _unescape(value: str) -> str:
    out: list[str] = []
    slash = False
    for ch in value:
        if slash:
            if ch not in "\\,=":
                raise bad_request(f"invalid field selector: invalid escape sequence: \\{ch}")
            out.append(ch)
            slash = False
        elif ch == "\\":
            slash = True
        elif ch in ",=":
            raise bad_request(f"invalid field selector: unescaped character in value: {ord(ch)}")
        else:
            out.append(ch)
    if slash:
        raise bad_request("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def parse_field_selector(sel: str | None, resource: str) -> tuple[Matcher, dict[str, str]]:
    """Return (predicate, exact-equality requirements).  The second lets callers narrow cheaply
    (e.g. metadata.namespace)."""
    if not sel:
        return (lambda _o: True), {}
    allowed = {"metadata.name", "metadata.namespace"} | FIELD_LABELS.get(resource, set())
    reqs: list[tuple[str, bool, str]] = []
    eq: dict[str, str] = {}
    for part in sorted(_split_terms(sel)):
        if part == "":
            continue
        split = _split_term(part)
        if split is None:
            raise bad_request(f"invalid selector: '{sel}'; can't understand '{part}'")
        key, op, raw = split
        val = _unescape(raw)
        if key not in allowed:
            raise bad_request(f"field label not supported: {key}")
        reqs.append((key, op == "!=", val))
        if op != "!=":
            eq[key] = val

    def match(obj: Obj) -> bool:
        for key, neg, val in reqs:
            got = field_value(obj, key)
            if (got == val) == neg:
                return False
        return True

    return match, eq


__all__ = ["Requirement", "SelectorError", "field_value", "parse_field_selector",
           "parse_label_requirements", "parse_label_selector"]


def label_selector_matches(selector: Any, labels: Any) -> bool:
    """``metav1.LabelSelectorAsSelector(selector).Matches(labels)``: ``matchLabels`` and
    ``matchExpressions`` (In, NotIn, Exists, DoesNotExist) ANDed; a nil selector matches
    nothing and an empty one everything, as upstream's controllers read them."""
    if not isinstance(selector, dict):
        return False
    have = {str(k): str(v) for k, v in (labels or {}).items()}
    for k, v in (selector.get("matchLabels") or {}).items():
        if have.get(str(k)) != str(v):
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, vals = str(e.get("key", "")), e.get("operator"), [str(v) for v in e.get("values") or []]
        if op == "In" and have.get(key) not in vals:
            return False
        if op == "NotIn" and key in have and have[key] in vals:
            return False
        if op == "Exists" and key not in have:
            return False
        if op == "DoesNotExist" and key in have:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True
