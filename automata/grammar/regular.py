"""A grammar whose language is regular, written as one regex (the syntax ``automata.from_regex`` reads).

Rules are written bottom-up over the reference graph's strongly connected components (dependencies first):

- a rule outside any cycle is its body with each reference replaced by the referenced rule's regex;
- a cycle of rules whose every recursive reference is in *tail* position (right-linear: ``list ::= item list |
  item``, ``a ::= "x" b?``, ``b ::= "y" a``) is a system of equations ``X = c_X | a_XY Y | ...`` over the cycle's
  rules, solved by eliminating one rule at a time with Arden's rule (``X = a X | b`` is ``X = a* b``); one whose
  every recursive reference is a *head* (left-linear, Lark's ``list: list "," item | item``) likewise, mirrored;
- any other recursion — a reference with text on both sides (``"(" expr ")"``), inside a repetition, or heads and
  tails mixed — is refused with ``UnsupportedGrammarError`` (construct "recursion"), naming the rule and its
  line: its language may not be regular (``max_depth`` cuts it at a depth, when asked). ``call_regexes`` writes
  such a grammar instead as regexes that call a few of the cycle's rules (``automata.grammar.pushdown`` builds the
  automaton that runs them).

First, a rule's references to itself at the start or end of an alternative become repetitions (``X = X a | c`` is
``c a*``), which also takes Lark's left-recursive lists out of the cycles that remain.

Characters are written as themselves where the regex syntax allows, ``\\xHH`` for control characters, escaped
where special; Lark's case-insensitive literals and regex flags become ``(?i:...)``/``(?s:...)`` groups. A regex
longer than ``max_length`` (a DAG of rules written out as a tree can grow exponentially) raises
``StateLimitError``.

Leaves out: tokens (``product.grammar`` compiles the regex), and regular languages written with other recursion
(a cycle mixing heads and tails, which can be regular but is refused).
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from automata.errors import StateLimitError
from automata.grammar.ir import (
    MAX_CODE_POINT,
    CharClass,
    Choice,
    Expr,
    Grammar,
    Literal,
    Ref,
    Regex,
    Repeat,
    Rule,
    Sequence,
    UnsupportedGrammarError,
    references,
    regexes,
)
from automata.parse import syntax_positions

__all__ = ["to_regex", "call_regexes", "call_marker", "MAX_REGEX_LENGTH", "MAX_CALL_RULES"]

MAX_REGEX_LENGTH = 2_000_000
_SPECIAL = frozenset("\\.^$*+?{}[]|()/")
_CLASS_SPECIAL = frozenset("\\]^-[")
_NOTHING = "[^\\x00-\U0010ffff]"  # a class no character is in: the empty language


def to_regex(grammar: Grammar, *, max_length: int = MAX_REGEX_LENGTH, max_depth: int | None = None) -> str:
    """The regex of ``grammar``'s language (``re.fullmatch`` semantics); errors: see the module's docstring.

    ``max_depth``: where recursion is not right-linear, instead of refusing, the regex of the strings whose
    derivations nest at most ``max_depth`` references inside the cycle (a smaller, regular language: deeper
    nesting is not accepted; JSON's ``value -> object -> value`` counts two per level of braces). Opt-in: the
    language is then the grammar's cut at that depth, and the regex grows with the depth (exponentially where a rule
    refers to the cycle twice)."""
    def cut(writer: _Writer, members: list[str], refusal: UnsupportedGrammarError) -> None:
        if max_depth is None:
            raise refusal
        writer.unroll(members, max_depth)

    writer = _written(grammar, max_length, cut)
    return writer.done[writer.grammar.start]


def _written(grammar: Grammar, max_length: int, otherwise) -> "_Writer":
    """The rules' regexes, written bottom-up over the reference graph's components (the module docstring);
    ``otherwise(writer, members, refusal)`` finishes a cycle that is neither right- nor left-linear."""
    grammar = _without_immediate_recursion(grammar.lowered())
    writer = _Writer(grammar, max_length)
    for members in _components(grammar):
        for name in members:  # (the rules the start reaches, before any is written)
            for regex in regexes(grammar.rules[name].body):
                _check_regex(regex, grammar.rules[name])
        if len(members) == 1 and members[0] not in writer.recursive:
            writer.done[members[0]] = writer.write(grammar.rules[members[0]].body)
            continue
        try:
            writer.solve(members)
        except UnsupportedGrammarError as refusal:
            otherwise(writer, members, refusal)
    return writer


def call_regexes(grammar: Grammar, *, max_length: int = MAX_REGEX_LENGTH) -> tuple[str, dict[str, str]]:
    """The grammar as regexes that *call* rules, for the recursion no regex expresses (``automata.grammar.pushdown``):
    ``(root, bodies)``. The rules of each cycle that ``to_regex`` refuses are *call rules*: every reference to one
    is written as the character ``call_marker(k)`` (k: its index in ``bodies``, in insertion order), and ``bodies``
    holds each call rule's body so written; every other rule is inlined as ``to_regex`` inlines it. ``root`` is the
    start rule's regex (a single marker when the start is a call rule). Substituting each marker by its rule's
    language gives the grammar's language. ``bodies`` is empty when the grammar is regular (``root`` is then
    ``to_regex``'s regex). More than ``MAX_CALL_RULES`` call rules: ``UnsupportedGrammarError``."""
    bodies: dict[str, str] = {}

    def called(writer: _Writer, members: list[str], refusal: UnsupportedGrammarError) -> None:
        calls, inlined = _call_rules(writer.grammar, members)
        if len(bodies) + len(calls) > MAX_CALL_RULES:
            raise UnsupportedGrammarError(f"more than {MAX_CALL_RULES} recursive rules", construct="recursion")
        for name in calls:
            writer.done[name] = call_marker(len(bodies))
            bodies[name] = ""
        for name in inlined:
            writer.done[name] = writer.write(writer.grammar.rules[name].body)
        for name in calls:
            bodies[name] = writer.write(writer.grammar.rules[name].body)

    writer = _written(grammar, max_length, called)
    return writer.done[writer.grammar.start], bodies


_INLINED_LENGTH = 50_000  # a cycle's rules inlined between its call rules past this many characters: all called


def _call_rules(grammar: Grammar, members: list[str]) -> tuple[list[str], list[str]]:
    """Which rules of a cycle become call rules, and the others in the order to write them (dependencies first):
    few call rules mean short stacks, so few distinct configurations. Greedily, the member with the most recursive
    references in and out (in x out) becomes a call rule until the rest refer to one another without a cycle
    (JSON's object/value/array: value alone; llama.cpp's C expressions: factor alone). Where writing the rest out
    would grow past ``_INLINED_LENGTH`` characters (a rule referenced many times, each copy inlined), every member is
    a call rule instead."""
    graph = nx.DiGraph()
    graph.add_nodes_from(members)
    graph.add_edges_from((name, ref.name) for name in members for ref in references(grammar.rules[name].body)
                         if ref.name in graph)
    calls: list[str] = []
    rest = graph.copy()
    while not nx.is_directed_acyclic_graph(rest):
        cyclic = {n for component in nx.strongly_connected_components(rest) for n in component
                  if len(component) > 1 or rest.has_edge(n, n)}
        best = max(sorted(cyclic, key=members.index), key=lambda n: rest.in_degree(n) * rest.out_degree(n))
        calls.append(best)
        rest.remove_node(best)
    inlined = list(reversed(list(nx.topological_sort(rest))))
    sizes: dict[str, int] = {}
    for name in inlined:  # (an upper bound on each written rule's length: its own text plus its references')
        sizes[name] = len(str(grammar.rules[name].body)) + sum(sizes.get(ref.name, 0)
                                                             for ref in references(grammar.rules[name].body))
        if sizes[name] > _INLINED_LENGTH:
            return list(members), []
    return sorted(calls, key=members.index), inlined


MAX_CALL_RULES = 512
_CALL_BASE = 0xDA00  # U+DA00..U+DBFF: lone surrogates, in no text (``product.counted`` marks its loops below)


def call_marker(k: int) -> str:
    """The character that stands for call rule ``k`` in ``call_regexes``' regexes."""
    if not 0 <= k < MAX_CALL_RULES:
        raise ValueError(f"call rule {k} outside 0..{MAX_CALL_RULES - 1}")
    return chr(_CALL_BASE + k)


def is_call_marker(char: str) -> bool:
    return _CALL_BASE <= ord(char) < _CALL_BASE + MAX_CALL_RULES


def _components(grammar: Grammar) -> list[list[str]]:
    """The strongly connected components of the rules the start uses, dependencies first, each in the grammar's
    order."""
    graph = nx.DiGraph()
    reachable = grammar.reachable()
    graph.add_nodes_from(reachable)
    for name in reachable:
        graph.add_edges_from((name, ref.name) for ref in references(grammar.rules[name].body))
    condensed = nx.condensation(graph)
    out = []
    for component in reversed(list(nx.topological_sort(condensed))):
        members = condensed.nodes[component]["members"]
        out.append([n for n in reachable if n in members])
    return out


class _Writer:
    """Regexes of rules: ``done`` holds each finished rule's."""

    def __init__(self, grammar: Grammar, max_length: int):
        self.grammar, self.max_length = grammar, max_length
        self.done: dict[str, str] = {}
        self.recursive = {name for name, rule in grammar.rules.items()
                          if any(ref.name == name for ref in references(rule.body))}  # (self-references)

    def checked(self, regex: str) -> str:
        if len(regex) > self.max_length:
            raise StateLimitError(f"the grammar's regex would be longer than {self.max_length:,} characters")
        return regex

    def write(self, expr: Expr) -> str:
        """The regex of an expression whose references are all to finished rules."""
        if isinstance(expr, _Raw):
            return _group(expr.regex)
        if isinstance(expr, Literal):
            text = "".join(_char(c) for c in expr.text)
            return f"(?i:{text})" if expr.ignore_case and text else text
        if isinstance(expr, CharClass):
            return _class(expr)
        if isinstance(expr, Regex):  # (its flags and syntax checked before: ``_check_regex``)
            flags = "".join(f for f in expr.flags if f != "u")
            return f"(?{flags}:{expr.pattern})" if flags else f"(?:{expr.pattern})"
        if isinstance(expr, Ref):
            return f"(?:{self.done[expr.name]})"
        if isinstance(expr, Sequence):
            return self.checked("".join(self.write(item) for item in expr.items))  # (no part is an open "|")
        if isinstance(expr, Choice):
            return self.checked("(?:" + "|".join(self.write(option) for option in expr.options) + ")")
        inner = self.atom(expr.item)
        if not inner:
            return ""
        if (expr.min, expr.max) == (0, None):
            q = "*"
        elif (expr.min, expr.max) == (1, None):
            q = "+"
        elif (expr.min, expr.max) == (0, 1):
            q = "?"
        elif expr.max is None:
            q = f"{{{expr.min},}}"
        elif expr.min == expr.max:
            q = f"{{{expr.min}}}"
        else:
            q = f"{{{expr.min},{expr.max}}}"
        return self.checked(f"(?:{inner}){q}")

    def atom(self, expr: Expr) -> str:
        """``write(expr)`` as one unit a quantifier or a concatenation may follow."""
        text = self.write(expr)
        if isinstance(expr, (Choice, Repeat, Ref, Regex, CharClass)) or len(text) <= 1:
            return text
        return f"(?:{text})"

    # ---- other cycles, cut at a depth (opt-in) ---------------------------------------------------------------
    def unroll(self, members: list[str], max_depth: int) -> None:
        """Finish the rules of a cycle as the strings whose derivations nest at most ``max_depth`` references to
        the cycle: rule X at depth d refers to the cycle's rules at depth d + 1, and past ``max_depth`` to nothing
        (an alternative that needs deeper nesting is dropped)."""
        cycle, memo = set(members), {}

        def at(name: str, depth: int) -> str | None:
            if depth > max_depth:
                return None
            if (name, depth) not in memo:
                memo[name, depth] = None  # (a cycle inside one depth cannot happen: every reference goes deeper)
                memo[name, depth] = bounded(self.grammar.rules[name].body, depth)
            return memo[name, depth]

        def bounded(expr: Expr, depth: int) -> str | None:
            """``expr``'s regex with the cycle's references at ``depth + 1``; None: no string at this depth."""
            if not any(ref.name in cycle for ref in references(expr)):
                return self.write(expr)
            if isinstance(expr, Ref):
                inner = at(expr.name, depth + 1)
                return None if inner is None else _group(inner)
            if isinstance(expr, Sequence):
                parts = [bounded(item, depth) for item in expr.items]
                return None if any(p is None for p in parts) else self.checked("".join(_group(p) for p in parts))
            if isinstance(expr, Choice):
                options = [o for o in (bounded(option, depth) for option in expr.options) if o is not None]
                return None if not options else self.checked("(?:" + "|".join(options) + ")")
            inner = bounded(expr.item, depth)  # a Repeat
            if inner is None:
                return "" if expr.min == 0 else None
            return self.write(Repeat(_Raw(inner), expr.min, expr.max))

        for name in members:
            regex = at(name, 0)
            self.done[name] = _NOTHING if regex is None else regex

    # ---- right- and left-linear cycles ---------------------------------------------------------------------
    def solve(self, members: list[str]) -> None:
        """Finish the rules of one cycle if every recursive reference in it is a tail (right-linear), or every one
        a head (left-linear: ``list ::= list "," item | item``); else refuse, naming the first rule that is not
        right-linear."""
        cycle = set(members)
        for left in (False, True):
            equations = {name: self.linear(self.grammar.rules[name].body, cycle, left) for name in members}
            if all(linear is not None for linear in equations.values()):
                self.eliminate(members, equations, left)
                return
            if not left:
                name = next(n for n in members if equations[n] is None)
        rule = self.grammar.rules[name]
        raise UnsupportedGrammarError(
            f"rule {name!r} is recursive in a way a regex cannot express (a recursive reference with text on both "
            "sides, or inside a repetition); compiling recursive grammars is not supported yet (max_depth= cuts "
            "them at a depth)", construct="recursion", line=rule.at.line, column=rule.at.column, rule=name)

    def eliminate(self, members: list[str], equations: dict, left: bool) -> None:
        """Solve ``X = c_X | a_XY Y | ...`` (right-linear; ``X = c_X | Y a_XY | ...`` when ``left``) for the cycle's
        rules: eliminate each in turn with Arden's rule (``X = a X | b`` is ``a* b``; ``X = X a | b`` is ``b a*``),
        substituting it in the others, then write the rules back in reverse order."""
        def join(outer: str, inner: str) -> str:  # the outer coefficient before the inner text (after, if left)
            return _group(inner) + outer if left else outer + _group(inner)

        for x in members:
            const, coeffs = equations.pop(x)
            loop = coeffs.pop(x, None)
            if loop is not None:
                star = f"(?:{loop})*"
                const = None if const is None else join(star, const)
                coeffs = {y: join(star, a) for y, a in coeffs.items()}
            for z, (c_z, a_z) in equations.items():
                a_zx = a_z.pop(x, None)
                if a_zx is None:
                    continue
                if const is not None:
                    c_z = _union(c_z, join(a_zx, const))
                for y, a in coeffs.items():
                    a_z[y] = _union(a_z.get(y), join(a_zx, a))
                equations[z] = (c_z, a_z)
            self.done[x] = (const, coeffs)  # type: ignore[assignment]  (finished below, once its coefficients are)
        # back-substitute in reverse order: the last rule eliminated has no references left
        for x in reversed(members):
            const, coeffs = self.done[x]  # type: ignore[misc]
            regex = const
            for y, a in coeffs.items():
                regex = _union(regex, join(a, self.done[y]))
            self.done[x] = self.checked(_NOTHING if regex is None else regex)

    def linear(self, expr: Expr, cycle: set[str], left: bool = False):
        """``expr`` as ``(c, {Y: a_Y})`` with ``expr = c | a_Y Y | ...`` (``c | Y a_Y | ...`` when ``left``; regexes,
        ``None`` the empty set), the ``Y`` rules of ``cycle``; None if a reference to the cycle is not a tail (a
        head)."""
        if not any(ref.name in cycle for ref in references(expr)):
            return self.write(expr), {}
        if isinstance(expr, Ref):
            return None, {expr.name: ""}
        if isinstance(expr, Choice):
            const, coeffs = None, {}
            for option in expr.options:
                linear = self.linear(option, cycle, left)
                if linear is None:
                    return None
                const = _union(const, linear[0])
                for y, a in linear[1].items():
                    coeffs[y] = _union(coeffs.get(y), a)
            return const, coeffs
        if isinstance(expr, Sequence):
            items = list(expr.items)
            end = items.pop(0) if left else items.pop()  # the item the cycle may be in
            if any(ref.name in cycle for item in items for ref in references(item)):
                return None
            linear = self.linear(end, cycle, left)
            if linear is None:
                return None
            rest = "".join(self.atom(item) for item in items)
            join = (lambda inner: _group(inner) + rest) if left else (lambda inner: rest + _group(inner))
            return (None if linear[0] is None else join(linear[0])), {y: join(a) for y, a in linear[1].items()}
        if isinstance(expr, Repeat) and expr.max == 1:  # x? with x a tail (head): "" | x
            linear = self.linear(expr.item, cycle, left)
            if linear is None:
                return None
            return (_union(linear[0], "") if expr.min == 0 else linear[0]), linear[1]
        return None


def _without_immediate_recursion(grammar: Grammar) -> Grammar:
    """The same language with each rule's references to itself at the start or end of an alternative written as
    repetitions: ``X = X a | b X | c`` (``a``, ``b``, ``c`` alternatives without such references) is ``X = b* c a*``
    — the textbook removal of immediate left recursion, and its mirror. Lark's ``sum: sum "+" product | product``
    then no longer makes ``sum`` recursive at all, so a cycle through it (``atom: "(" sum ")"``) is cut at a depth by
    its parentheses only, not by the length of the sum. A rule with no alternative free of such references, or one
    that is both (``X = X a X``), is left as it is."""
    rules = dict(grammar.rules)
    for name, rule in grammar.rules.items():
        options = rule.body.options if isinstance(rule.body, Choice) else (rule.body,)
        heads, tails, rest = [], [], []
        for option in options:
            items = option.items if isinstance(option, Sequence) else (option,)
            first, last = items[0] == Ref(name) if items else False, items[-1] == Ref(name) if items else False
            if first and last:
                if len(items) == 1:
                    continue  # X -> X derives nothing new
                break  # X -> X a X: not immediate recursion of one side
            if first:
                heads.append(Sequence(tuple(items[1:])))
            elif last:
                tails.append(Sequence(tuple(items[:-1])))
            else:
                rest.append(option)
        else:
            if (heads or tails) and rest:
                def star(parts):
                    return (Repeat(parts[0] if len(parts) == 1 else Choice(tuple(parts)), 0, None),) if parts else ()
                middle = rest[0] if len(rest) == 1 else Choice(tuple(rest))
                body = Sequence(star(tails) + (middle,) + star(heads))
                rules[name] = Rule(name, body, rule.at, rule.terminal)
    return Grammar(rules, grammar.start, grammar.ignore, grammar.syntax)


@dataclass(frozen=True)
class _Raw:
    """A regex already written, inside an expression being written (``_Writer.unroll``'s repetitions)."""
    regex: str


def _group(regex: str) -> str:
    return regex if len(regex) <= 1 else f"(?:{regex})"


def _union(a: str | None, b: str | None) -> str | None:
    if a is None:
        return b
    if b is None:
        return a
    return f"(?:{a}|{b})"


def _char(c: str) -> str:
    """One character as a regex outside a class."""
    o = ord(c)
    if o < 0x20 or o == 0x7F:
        return f"\\x{o:02x}"
    return "\\" + c if c in _SPECIAL else c


def _class_char(o: int) -> str:
    if o < 0x20 or o == 0x7F:
        return f"\\x{o:02x}"
    c = chr(o)
    return "\\" + c if c in _CLASS_SPECIAL else c


def _class(cls: CharClass) -> str:
    ranges = cls.ranges
    if not ranges:
        return "[\\x00-\U0010ffff]" if cls.negated else _NOTHING
    if not cls.negated and len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return _char(chr(ranges[0][0]))
    if cls.negated and ranges == ((0, MAX_CODE_POINT),):
        return _NOTHING
    body = "".join(_class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}" for lo, hi in ranges)
    return f"[{'^' if cls.negated else ''}{body}]"


def _check_regex(regex: Regex, rule: Rule) -> None:
    """Refuses, naming the rule and its line, a Lark regex terminal a compiled grammar cannot read: flags other than
    i, s, u, and lookarounds (Lark's may look past the terminal's own text, into what follows it)."""
    flags = "".join(f for f in regex.flags if f != "u")
    where = dict(line=rule.at.line, column=rule.at.column, rule=rule.name)
    if set(flags) - set("is"):
        raise UnsupportedGrammarError(f"regex /{regex.pattern}/{regex.flags} in {rule.name}: only the flags i, s "
                                      "and u are supported in a compiled grammar", construct=f"regex flags {flags}",
                                      **where)
    if _has_lookaround(regex.pattern):
        raise UnsupportedGrammarError(f"regex /{regex.pattern}/ in {rule.name}: lookarounds are not supported in a "
                                      "compiled grammar", construct="lookaround", **where)


def _has_lookaround(pattern: str) -> bool:
    """Whether a Python regex holds ``(?=``, ``(?!``, ``(?<=`` or ``(?<!`` outside escapes and classes."""
    return any(pattern.startswith(("(?=", "(?!", "(?<=", "(?<!"), i) for i in syntax_positions(pattern))
