"""A small PromQL reader for the dashboard test: the series an expression selects, the labels
its matchers name, and the labels each `by (...)` groups on with the series it groups.

    selectors, groupings = read('sum by (target) (rate(x_total{vm=~".*"}[1m]))')
    # [Selector("x_total", {"vm"})], [Grouping({"target"}, {"x_total"})]

Not a parser of all PromQL: an identifier followed by `(` is a function or an aggregation, one
followed by `{` or `[` or standing bare is a metric. The forms it cannot check (`without`,
`on`, `ignoring`, `group_left`, a `{__name__=...}` selector) raise, so a dashboard using them
fails its test instead of passing unchecked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(r"""\s*(?:
    (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<num>\d+(?:\.\d+)?(?:e[+-]?\d+)?(?:ms|[smhdwy])*(?![A-Za-z_]))
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=(){}\[\],:@])
)""", re.VERBOSE)

# Binary operators and modifiers spelled as words: never metric names.
KEYWORDS = {"and", "or", "unless", "bool", "offset", "start", "end", "inf", "nan"}
UNCHECKED = {"without", "on", "ignoring", "group_left", "group_right"}


@dataclass(frozen=True)
class Selector:
    name: str
    labels: frozenset[str]


@dataclass(frozen=True)
class Grouping:
    labels: frozenset[str]
    metrics: frozenset[str]


def tokens(expr: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(expr.rstrip()):
        m = _TOKEN.match(expr, pos)
        if not m or m.end() == pos:
            raise ValueError(f"cannot read {expr[pos:pos + 20]!r} in {expr!r}")
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def _close(toks: list[tuple[str, str]], open_at: int) -> int:
    """The index of the bracket closing the one at `open_at`."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack = []
    for i in range(open_at, len(toks)):
        text = toks[i][1] if toks[i][0] == "op" else ""
        if text in pairs:
            stack.append(pairs[text])
        elif stack and text == stack[-1]:
            stack.pop()
            if not stack:
                return i
    raise ValueError(f"unbalanced brackets in {' '.join(t for _, t in toks)!r}")


def _open(toks: list[tuple[str, str]], close_at: int) -> int:
    """The index of the `(` that the `)` at `close_at` closes."""
    depth = 0
    for i in range(close_at, -1, -1):
        depth += {")": 1, "(": -1}.get(toks[i][1] if toks[i][0] == "op" else "", 0)
        if depth == 0:
            return i
    raise ValueError("unbalanced brackets")


def _label_list(toks, open_at: int) -> tuple[frozenset[str], int]:
    end = _close(toks, open_at)
    return frozenset(t for k, t in toks[open_at + 1:end] if k == "ident"), end


def _matchers(toks, open_at: int) -> tuple[frozenset[str], int]:
    """The label names of a `{...}` matcher list: each identifier before an operator."""
    end = _close(toks, open_at)
    inner = toks[open_at + 1:end]
    names = {t for i, (k, t) in enumerate(inner[:-1]) if k == "ident" and inner[i + 1][1] in ("=", "!=", "=~", "!~")}
    return frozenset(names), end


def read(expr: str) -> tuple[list[Selector], list[Grouping]]:
    toks = tokens(expr)
    if _close([("op", "(")] + toks + [("op", ")")], 0) != len(toks) + 1:
        raise ValueError(f"unbalanced brackets in {expr!r}")
    found: list[tuple[int, Selector]] = []
    by: list[tuple[frozenset[str], int, int]] = []  # labels, and the argument's token range
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        after = toks[i + 1][1] if i + 1 < len(toks) else ""
        if kind == "op" and text == "{":
            raise ValueError(f"a selector without a metric name is not checked: {expr!r}")
        if kind != "ident":
            i += 1
            continue
        if text in UNCHECKED:
            raise ValueError(f"`{text}` is not checked by this reader: {expr!r}")
        if text == "by":
            labels, end = _label_list(toks, i + 1)
            if i > 0 and toks[i - 1][0] == "ident":  # sum by (l) (arg)
                start = end + 1
                by.append((labels, start, _close(toks, start)))
            else:  # sum (arg) by (l)
                by.append((labels, _open(toks, i - 1), i - 1))
            i = end + 1
        elif after in ("(", "by", "without") or text in KEYWORDS:
            i += 1  # a function, an aggregation or a keyword
        else:
            labels, end = _matchers(toks, i + 1) if after == "{" else (frozenset(), i)
            found.append((i, Selector(text, labels)))
            i = end + 1
    groupings = [Grouping(labels, frozenset(s.name for at, s in found if lo <= at <= hi))
                 for labels, lo, hi in by]
    return [s for _, s in found], groupings
