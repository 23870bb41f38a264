"""Node feature constraints (``--constraint``/``-C``): ``&`` (and), ``|`` (or), parentheses.

Placeholder grammar until the full parser lands: ``expr := term ('|' term)*``,
``term := atom ('&' atom)*``, ``atom := NAME | '(' expr ')'``.
"""

from __future__ import annotations

from collections.abc import Callable

Matcher = Callable[[frozenset[str]], bool]


class ConstraintError(ValueError):
    pass


def compile_constraint(expr: str) -> Matcher:
    tokens = [t for t in _tokenize(expr)]
    pos = 0

    def parse_expr() -> Matcher:
        nonlocal pos
        terms = [parse_term()]
        while pos < len(tokens) and tokens[pos] == "|":
            pos += 1
            terms.append(parse_term())
        return lambda f: any(t(f) for t in terms)

    def parse_term() -> Matcher:
        nonlocal pos
        atoms = [parse_atom()]
        while pos < len(tokens) and tokens[pos] in ("&", ","):
            pos += 1
            atoms.append(parse_atom())
        return lambda f: all(a(f) for a in atoms)

    def parse_atom() -> Matcher:
        nonlocal pos
        if pos >= len(tokens):
            raise ConstraintError(f"invalid constraint {expr!r}: unexpected end")
        tok = tokens[pos]
        pos += 1
        if tok == "(" or tok == "[":
            inner = parse_expr()
            if pos >= len(tokens) or tokens[pos] not in (")", "]"):
                raise ConstraintError(f"invalid constraint {expr!r}: missing closing bracket")
            pos += 1
            return inner
        if tok in "&|,)]":
            raise ConstraintError(f"invalid constraint {expr!r}: unexpected {tok!r}")
        return lambda f, name=tok: name in f

    if not tokens:
        return lambda f: True
    m = parse_expr()
    if pos != len(tokens):
        raise ConstraintError(f"invalid constraint {expr!r}: unexpected {tokens[pos]!r}")
    return m


def _tokenize(expr: str) -> list[str]:
    out: list[str] = []
    cur = ""
    for ch in expr.replace(" ", ""):
        if ch in "&|,()[]":
            if cur:
                out.append(cur)
                cur = ""
            out.append(ch)
        else:
            cur += ch
    if cur:
        out.append(cur)
    return out


def matches(expr: str | None, features: frozenset[str]) -> bool:
    return True if not expr else compile_constraint(expr)(features)
