"""GBNF, llama.cpp's grammar syntax, read into the grammar IR (``automata.grammar.ir``).

The syntax is the one llama.cpp's ``grammars/README.md`` defines and its parser (``src/llama-grammar.cpp``)
accepts: rules ``name ::= alternatives`` with names of ``[a-zA-Z0-9-]`` (and ``_``, which llama.cpp refuses but
XGrammar's and vLLM's GBNF accept: ``select_stmt``; no llama.cpp grammar changes meaning); string literals ``"..."``; character
classes ``[...]`` with ranges and ``^``; ``.`` (any character); groups ``(...)``; ``|``; the quantifiers
``* + ? {m} {m,} {m,n}`` on the item before them (a whole literal, class, reference or group); escapes ``\\xHH
\\uHHHH \\UHHHHHHHH \\t \\r \\n \\\\ \\" \\[ \\] \\-`` (any other escape is an error); ``#`` comments. Space and
comments may separate anything; a newline ends a rule except inside parentheses, right after ``::=`` and right
after ``|``. ``root`` is the start. A rule defined twice keeps its last definition, as llama.cpp's parser does;
a repetition bound above 2000 is unbounded (a lower bound above 2000 is refused), as llama.cpp's.

Refused as llama.cpp refuses them (``GrammarSyntaxError``, ``UndefinedRuleError``, with line and column): malformed
text, unknown escapes, undefined rules, no ``root``, left recursion (``UnsupportedGrammarError``, construct "left
recursion", as llama.cpp's "unsupported grammar, left recursion detected"). Refused because canonmerge constrains
text, not token ids (``UnsupportedGrammarError``, construct "token"): token matches ``<[id]>``, ``<text>``,
``!<...>``.

Leaves out: what the grammar means for tokens (``product.grammar``).
"""

from __future__ import annotations

import bisect

from automata.grammar.ir import (
    ANY_CHAR,
    CharClass,
    Choice,
    Expr,
    Grammar,
    GrammarSyntaxError,
    Literal,
    Ref,
    Repeat,
    Rule,
    Sequence,
    Span,
    UndefinedRuleError,
    UnsupportedGrammarError,
)

__all__ = ["parse_gbnf", "MAX_REPETITION"]

MAX_REPETITION = 2000  # llama.cpp's MAX_REPETITION_THRESHOLD
_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
_SIMPLE_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-"}
_HEX_DIGITS = {"x": 2, "u": 4, "U": 8}


def parse_gbnf(text: str, start: str = "root") -> Grammar:
    """The grammar of GBNF ``text``, started at ``start``. Errors: see the module's docstring."""
    return _Parser(text).grammar(start)


class _Parser:
    """A recursive-descent reader; ``i`` is the cursor into ``s``."""

    def __init__(self, text: str):
        self.s, self.i = text, 0
        self.line_starts = [0] + [k + 1 for k, c in enumerate(text) if c == "\n"]
        self.rules: dict[str, Rule] = {}
        self.refs: list[Ref] = []

    # ---- places and errors ---------------------------------------------------------------------------------
    def span(self, at: int | None = None) -> Span:
        at = self.i if at is None else at
        line = bisect.bisect_right(self.line_starts, at)
        return Span(line, at - self.line_starts[line - 1] + 1)

    def fail(self, construct: str, message: str, at: int | None = None, error=GrammarSyntaxError):
        span = self.span(at)
        raise error(f"GBNF: {message}", construct=construct, line=span.line, column=span.column)

    def peek(self, k: int = 0) -> str:
        return self.s[self.i + k] if self.i + k < len(self.s) else ""

    def space(self, newline_ok: bool) -> None:
        """Skip blanks and comments (and newlines where ``newline_ok``)."""
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c == "#":
                while self.i < len(s) and s[self.i] not in "\r\n":
                    self.i += 1
            elif c in " \t" or (newline_ok and c in "\r\n"):
                self.i += 1
            else:
                break

    # ---- rules -------------------------------------------------------------------------------------------
    def grammar(self, start: str) -> Grammar:
        self.space(True)
        while self.i < len(self.s):
            self.rule()
        for ref in self.refs:
            if ref.name not in self.rules:
                raise UndefinedRuleError(f"GBNF: undefined rule {ref.name!r}", construct="undefined rule",
                                         line=ref.at.line, column=ref.at.column, rule=ref.name)
        if start not in self.rules:
            raise UndefinedRuleError(f"GBNF: the grammar has no {start!r} rule", construct="start rule", rule=start)
        grammar = Grammar(self.rules, start, (), "gbnf")
        looping = grammar.left_recursive_rule()
        if looping is not None:
            at = self.rules[looping].at
            raise UnsupportedGrammarError(f"GBNF: rule {looping!r} is left-recursive (llama.cpp refuses it)",
                                          construct="left recursion", line=at.line, column=at.column, rule=looping)
        return grammar

    def rule(self) -> None:
        at = self.i
        name = self.name()
        self.space(False)
        if not self.s.startswith("::=", self.i):
            self.fail("expecting ::=", "expecting '::='")
        self.i += 3
        self.space(True)
        body = self.alternatives(nested=False)
        if self.peek() == "\r":
            self.i += 2 if self.peek(1) == "\n" else 1
        elif self.peek() == "\n":
            self.i += 1
        elif self.i < len(self.s):
            self.unexpected()
        self.space(True)
        self.rules[name] = Rule(name, body, self.span(at))  # (a second definition replaces the first)

    def unexpected(self) -> None:
        c = self.peek()
        if c in "<!":
            self.fail("token", "token matches (<[id]>, <text>, !<...>) constrain token ids, not text",
                      error=UnsupportedGrammarError)
        self.fail("expecting newline or end", f"unexpected {c!r}; expecting newline or end")

    def name(self) -> str:
        begin = self.i
        while self.peek() and self.peek() in _WORD:
            self.i += 1
        if self.i == begin:
            self.fail("expecting name", "expecting a rule name")
        return self.s[begin:self.i]

    def alternatives(self, nested: bool) -> Expr:
        options = [self.sequence(nested)]
        while self.peek() == "|":
            self.i += 1
            self.space(True)
            options.append(self.sequence(nested))
        return options[0] if len(options) == 1 else Choice(tuple(options))

    def sequence(self, nested: bool) -> Expr:
        items: list[Expr] = []
        while self.i < len(self.s):
            c, at = self.peek(), self.i
            if c == '"':
                self.i += 1
                chars = []
                while self.peek() != '"':
                    if not self.peek():
                        self.fail("unterminated literal", "unexpected end of input in a literal", at)
                    chars.append(self.char())
                self.i += 1
                items.append(Literal("".join(chars)))
            elif c == "[":
                items.append(self.char_class())
            elif c in "<!":
                self.fail("token", "token matches (<[id]>, <text>, !<...>) constrain token ids, not text",
                          error=UnsupportedGrammarError)
            elif c in _WORD:
                name = self.name()
                ref = Ref(name, self.span(at))
                self.refs.append(ref)
                items.append(ref)
                self.space(nested)
                continue
            elif c == "(":
                self.i += 1
                self.space(True)
                inner = self.alternatives(nested=True)
                if self.peek() != ")":
                    self.fail("expecting )", "expecting ')'")
                self.i += 1
                items.append(inner)
            elif c == ".":
                self.i += 1
                items.append(ANY_CHAR)
            elif c in "*+?{":
                if not items:
                    self.fail("quantifier without item", f"{c!r} has no item before it to repeat")
                items[-1] = self.quantified(items[-1], nested)
            else:
                break
            self.space(nested)
        return items[0] if len(items) == 1 else Sequence(tuple(items))

    def quantified(self, item: Expr, nested: bool) -> Expr:
        """The item repeated as the quantifier at the cursor says (blanks inside braces skipped, and newlines
        where the sequence allows them, as llama.cpp does)."""
        c = self.peek()
        self.i += 1
        if c in "*+?":
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
            return Repeat(item, low, high)
        self.space(nested)
        low = self.integer()
        self.space(nested)
        if self.peek() == "}":
            high = low
        elif self.peek() == ",":
            self.i += 1
            self.space(nested)
            high = self.integer() if self.peek().isascii() and self.peek().isdigit() else None
            self.space(nested)
            if self.peek() != "}":
                self.fail("expecting }", "expecting '}'")
        else:
            self.fail("expecting ,", "expecting ',' or '}' in a repetition")
        self.i += 1
        if low > MAX_REPETITION:
            self.fail("repetition", f"at least {low} repetitions exceeds llama.cpp's {MAX_REPETITION}")
        if high is not None and high > MAX_REPETITION:
            high = None  # llama.cpp reads a larger upper bound as none
        if high is not None and high < low:
            self.fail("repetition", f"repetition {{{low},{high}}} has its upper bound below its lower one")
        return Repeat(item, low, high)

    def integer(self) -> int:
        begin = self.i
        while self.peek().isascii() and self.peek().isdigit():
            self.i += 1
        if self.i == begin:
            self.fail("expecting an int", "expecting an integer")
        return int(self.s[begin:self.i])

    def char(self) -> str:
        """One character of a literal or class, its escape read."""
        c = self.peek()
        if c != "\\":
            self.i += 1
            return c
        at, e = self.i, self.peek(1)
        if e in _SIMPLE_ESCAPES:
            self.i += 2
            return _SIMPLE_ESCAPES[e]
        if e in _HEX_DIGITS:
            digits = self.s[self.i + 2:self.i + 2 + _HEX_DIGITS[e]]
            if len(digits) != _HEX_DIGITS[e] or any(d not in "0123456789abcdefABCDEF" for d in digits):
                self.fail("escape", f"expecting {_HEX_DIGITS[e]} hex digits after \\{e}", at)
            value = int(digits, 16)
            if value > 0x10FFFF:
                self.fail("escape", f"\\{e}{digits} is past the last code point", at)
            self.i += 2 + len(digits)
            return chr(value)
        self.fail("escape", f"unknown escape \\{e}", at)

    def char_class(self) -> CharClass:
        at = self.i
        self.i += 1
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        ranges = []
        while self.peek() != "]":
            if not self.peek():
                self.fail("unterminated class", "unexpected end of input in a character class", at)
            low = ord(self.char())
            high = low
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                high = ord(self.char())
            ranges.append((low, high))  # (a reversed range matches nothing, as in llama.cpp)
        self.i += 1
        return CharClass.of(ranges, negated)
