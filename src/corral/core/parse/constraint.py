"""Node feature constraints (``--constraint``/``-C``, Volcano node selectors) and matching.

Grammar (Slurm 22.05 ``--constraint``)::

    expr    := term ('|' term)*                 -- OR
    term    := counted (('&' | ',') counted)*   -- AND
    counted := primary ('*' COUNT)?             -- node count, COUNT >= 1
    primary := FEATURE | '(' expr ')' | '[' expr ']'

``FEATURE`` is any run of characters other than ``& | , ( ) [ ] *`` and whitespace.
Whitespace separates tokens only (``avx512 & ib`` is fine, ``avx512 ib`` is an error).

Decisions:

- **Comma is AND.** Slurm documents only ``&`` and ``|`` for ``--constraint``; a comma is
  how node feature lists and several other tools (PBS ``-l feature=``, older Slurm
  examples) join required features, and reading it as AND never matches a node the user
  did not ask for. So ``a,b`` equals ``a&b``.
- **Square brackets** are Slurm's "matching OR": ``[rack1|rack2]`` asks that *all* nodes of
  the job pick the *same* alternative. Per node they match like parentheses; the job-level
  rule is exposed (``Constraint.matching_or`` and ``Constraint.alternatives``) for the
  placement code. Brackets may not nest.
- **Counts** (``gpu*2``, ``[rack1*2&rack2*4]``, ``(knl&flat)*4``) say how many nodes of
  the job must have that feature. They are parsed and exposed (``Constraint.counts``);
  per-node matching ignores them.

Matching is cached per expression (``compile_constraint`` is memoized), and plain
AND/OR lists of features compile to a single set test, because placement calls it for
every (job, node) pair it considers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache

from corral.core.parse.errors import ParseError

Matcher = Callable[[frozenset[str]], bool]
_OPS = set("&|,()[]*")


class ConstraintError(ParseError):
    """A malformed constraint; ``str(err)`` names the text and the position of the fault."""

    def __init__(self, text: str, reason: str) -> None:
        super().__init__("constraint", text, reason)


@dataclass(frozen=True, slots=True)
class Feature:
    name: str


@dataclass(frozen=True, slots=True)
class AllOf:
    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class AnyOf:
    items: tuple[Node, ...]
    matching: bool = False  # written in square brackets: one alternative for all nodes


@dataclass(frozen=True, slots=True)
class Counted:
    item: Node
    count: int


Node = Feature | AllOf | AnyOf | Counted


@dataclass(frozen=True, slots=True)
class Constraint:
    """A parsed constraint. ``root`` is ``None`` for an empty expression (matches all)."""

    text: str
    root: Node | None

    @property
    def features(self) -> frozenset[str]:
        """Every feature name mentioned."""
        return frozenset(n.name for n in _nodes(self.root) if isinstance(n, Feature))

    @property
    def counts(self) -> tuple[tuple[str, int], ...]:
        """``(sub-expression text, node count)`` for each ``*COUNT``, in order written."""
        return tuple(
            (to_text(n.item), n.count) for n in _nodes(self.root) if isinstance(n, Counted)
        )

    @property
    def matching_or(self) -> bool:
        """True when a square-bracket OR asks for one alternative across all nodes."""
        return any(isinstance(n, AnyOf) and n.matching for n in _nodes(self.root))

    def alternatives(self) -> tuple[Node, ...]:
        """The options of the first square-bracket OR (each one applied to all nodes)."""
        for n in _nodes(self.root):
            if isinstance(n, AnyOf) and n.matching:
                return n.items
        return ()

    def matches(self, features: frozenset[str]) -> bool:
        return compile_constraint(self.text)(features)


def _nodes(node: Node | None) -> Iterator[Node]:
    """Pre-order walk of the expression tree."""
    if node is None:
        return
    yield node
    if isinstance(node, (AllOf, AnyOf)):
        for child in node.items:
            yield from _nodes(child)
    elif isinstance(node, Counted):
        yield from _nodes(node.item)


def to_text(node: Node | None) -> str:
    """Canonical text of a (sub-)expression: ``&``, ``|``, brackets where needed."""
    if node is None:
        return ""
    if isinstance(node, Feature):
        return node.name
    if isinstance(node, Counted):
        inner = to_text(node.item)
        if isinstance(node.item, (AllOf, AnyOf)) and not (
            isinstance(node.item, AnyOf) and node.item.matching
        ):
            inner = f"({inner})"
        return f"{inner}*{node.count}"
    if isinstance(node, AnyOf):
        body = "|".join(to_text(i) for i in node.items)
        return f"[{body}]" if node.matching else body
    parts = []
    for i in node.items:
        t = to_text(i)
        parts.append(f"({t})" if isinstance(i, AnyOf) and not i.matching else t)
    return "&".join(parts)


def _tokenize(expr: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    i, n = 0, len(expr)
    while i < n:
        ch = expr[i]
        if ch.isspace():
            i += 1
        elif ch in _OPS:
            out.append((i, ch))
            i += 1
        else:
            j = i
            while j < n and expr[j] not in _OPS and not expr[j].isspace():
                j += 1
            out.append((i, expr[i:j]))
            i = j
    return out


class _Parser:
    def __init__(self, expr: str) -> None:
        self.expr = expr
        self.toks = _tokenize(expr)
        self.pos = 0
        self.bracket_depth = 0

    def fail(self, reason: str) -> ConstraintError:
        return ConstraintError(self.expr, reason)

    def peek(self) -> str | None:
        return self.toks[self.pos][1] if self.pos < len(self.toks) else None

    def where(self) -> str:
        if self.pos < len(self.toks):
            off, tok = self.toks[self.pos]
            return f"{tok!r} at position {off}"
        return "end of expression"

    def parse(self) -> Node:
        node = self.expr_()
        if self.pos != len(self.toks):
            off, tok = self.toks[self.pos]
            if tok in (")", "]"):
                raise self.fail(f"unmatched {tok!r} at position {off}")
            raise self.fail(f"missing operator before {tok!r} at position {off}")
        return node

    def expr_(self, matching: bool = False) -> Node:
        terms = [self.term()]
        while self.peek() == "|":
            self.pos += 1
            terms.append(self.term())
        if len(terms) == 1 and not matching:
            return terms[0]
        return AnyOf(tuple(terms), matching)

    def term(self) -> Node:
        items = [self.counted()]
        while self.peek() in ("&", ","):
            self.pos += 1
            items.append(self.counted())
        return items[0] if len(items) == 1 else AllOf(tuple(items))

    def counted(self) -> Node:
        node = self.primary()
        if self.peek() == "*":
            self.pos += 1
            tok = self.peek()
            if tok is None or not (tok.isdigit() and tok.isascii()) or int(tok) < 1:
                raise self.fail(
                    f"expected a node count of at least 1 after '*', got {self.where()}"
                )
            self.pos += 1
            node = Counted(node, int(tok))
        return node

    def primary(self) -> Node:
        tok = self.peek()
        if tok is None:
            raise self.fail("expected a feature name, got end of expression")
        if tok in ("(", "["):
            off = self.toks[self.pos][0]
            if tok == "[" and self.bracket_depth:
                raise self.fail(f"square brackets cannot nest ('[' at position {off})")
            self.pos += 1
            close = ")" if tok == "(" else "]"
            if tok == "[":
                self.bracket_depth += 1
            inner = self.expr_(matching=tok == "[")
            if tok == "[":
                self.bracket_depth -= 1
            if self.peek() != close:
                raise self.fail(
                    f"missing {close!r} for {tok!r} at position {off}, got {self.where()}"
                )
            self.pos += 1
            return inner
        if tok in _OPS:
            raise self.fail(f"expected a feature name, got {self.where()}")
        self.pos += 1
        return Feature(tok)


@lru_cache(maxsize=4096)
def parse_constraint(expr: str) -> Constraint:
    """Parse ``expr``; raises ``ConstraintError`` with the position of the first fault."""
    if not expr.strip():
        return Constraint(expr, None)
    return Constraint(expr, _Parser(expr).parse())


def _compile(node: Node) -> Matcher:
    if isinstance(node, Feature):
        name = node.name
        return lambda f: name in f
    if isinstance(node, Counted):
        return _compile(node.item)
    if all(isinstance(i, Feature) for i in node.items):
        names = frozenset(i.name for i in node.items if isinstance(i, Feature))
        if isinstance(node, AllOf):
            return names.issubset
        return lambda f: not names.isdisjoint(f)
    subs = tuple(_compile(i) for i in node.items)
    if isinstance(node, AllOf):
        return lambda f: all(m(f) for m in subs)
    return lambda f: any(m(f) for m in subs)


def _match_all(features: frozenset[str]) -> bool:
    return True


@lru_cache(maxsize=4096)
def compile_constraint(expr: str) -> Matcher:
    """A per-node predicate over a node's feature set (counts ignored, memoized)."""
    root = parse_constraint(expr).root
    return _match_all if root is None else _compile(root)


def matches(expr: str | None, features: frozenset[str]) -> bool:
    """True when a node with ``features`` satisfies ``expr`` (``None``/empty: always)."""
    return True if not expr else compile_constraint(expr)(features)
