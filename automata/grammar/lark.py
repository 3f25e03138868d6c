"""Lark grammars, as Lark, llguidance and Outlines write them, read into the grammar IR (``automata.grammar.ir``).

Read: rules (``name: expansions``, lower-case names, with the ``?``, ``!`` and ``_`` modifiers, which shape Lark's
tree, not its language, so are read as plain rules) and terminals (``NAME: expansions``, upper-case, an optional
priority ``.n``); alternatives ``|`` (on a new line too); items ``"literal"`` and ``"literal"i``, ``/regex/flags``
(Python ``re`` syntax; flags ``imslux``), ``"a".."z"``, references, ``(...)``, ``[...]`` (optional), ``* + ?``,
``~ n`` and ``~ n..m``; aliases ``-> name`` (dropped); ``%ignore`` (terminals, literals or regexes);
``%import common.NAME [-> ALIAS]`` and ``%import common (A, B)`` for the common terminals (``COMMON``: NUMBER, INT,
SIGNED_NUMBER, FLOAT, DECIMAL, WS, WS_INLINE, NEWLINE, CNAME, WORD, LETTER, DIGIT, HEXDIGIT, ESCAPED_STRING, the
comment terminals, ...); ``//`` and ``#`` comments. Literals and regexes are unescaped as Lark unescapes them.
The start rule is ``start`` unless named.

Refused with ``UnsupportedGrammarError`` (construct and line:column): templates (``name{x}``), ``%declare``,
``%override``, ``%extend``, imports from other modules, and llguidance's extensions (``%json``, ``%llguidance``,
special tokens ``<...>``, rule attributes ``name[...]``). Malformed text: ``GrammarSyntaxError``; undefined names:
``UndefinedRuleError``; a rule defined twice, a terminal that refers to a rule or to itself: ``GrammarSyntaxError``,
as Lark refuses them.

Leaves out: Lark's lexer choices (the language read is that of Earley with ``lexer="dynamic_complete"``:
every way of cutting the text into terminals counts; ``automata.grammar.ir``) and tree shaping.
"""

from __future__ import annotations

import ast
import bisect
import re
from dataclasses import dataclass

from automata.grammar.ir import (
    EMPTY,
    CharClass,
    Choice,
    Expr,
    Grammar,
    GrammarSyntaxError,
    Literal,
    Ref,
    Regex,
    Repeat,
    Rule,
    Sequence,
    Span,
    UndefinedRuleError,
    UnsupportedGrammarError,
    cyclic_rules,
    references,
)

__all__ = ["parse_lark", "COMMON"]

#: Lark's ``common`` terminals, written out: the strings Lark's lexers match with ``common.lark``'s definitions.
#: ESCAPED_STRING and C_COMMENT are written there with a lazy ``.*?`` (and a lookbehind), which every Lark lexer
#: ends at the first possible close: a quoted line whose inner quotes are escaped; ``/*`` to the first ``*/``.
COMMON = r"""
DIGIT: "0".."9"
HEXDIGIT: "a".."f"|"A".."F"|DIGIT
INT: DIGIT+
SIGNED_INT: ["+"|"-"] INT
DECIMAL: INT "." INT? | "." INT
_EXP: ("e"|"E") SIGNED_INT
FLOAT: INT _EXP | DECIMAL _EXP?
SIGNED_FLOAT: ["+"|"-"] FLOAT
NUMBER: FLOAT | INT
SIGNED_NUMBER: ["+"|"-"] NUMBER
ESCAPED_STRING: /"(?:[^"\n\\]|\\[^\n])*"/
LCASE_LETTER: "a".."z"
UCASE_LETTER: "A".."Z"
LETTER: UCASE_LETTER | LCASE_LETTER
WORD: LETTER+
CNAME: ("_"|LETTER) ("_"|LETTER|DIGIT)*
WS_INLINE: (" "|/\t/)+
WS: /[ \t\f\r\n]/+
CR: /\r/
LF: /\n/
NEWLINE: (CR? LF)+
SH_COMMENT: /#[^\n]*/
CPP_COMMENT: /\/\/[^\n]*/
C_COMMENT: /\/\*(?:[^*]|\*+[^*\/])*\*+\//
SQL_COMMENT: /--[^\n]*/
"""

_TOKEN = re.compile(r"""
    (?P<NL_OR>(?:\r?\n)+[ \t\r\n]*\|)
  | (?P<NL>(?:\r?\n)+)
  | (?P<WS>[ \t]+|\\[ ]*\r?\n)
  | (?P<COMMENT>//[^\n]*|\#[^\n]*)
  | (?P<STRING>"(?:\\"|\\\\|[^"\n])*?"i?)
  | (?P<REGEXP>/(?!/)(?:\\/|\\\\|[^/\n])*?/[imslux]*)
  | (?P<DIRECTIVE>%[a-z]+)
  | (?P<ARROW>->)
  | (?P<DOTDOT>\.\.)
  | (?P<NUMBER>[+-]?\d+)
  | (?P<NAME>[!?]*_?[a-zA-Z][_a-zA-Z0-9]*)
  | (?P<OP>[+*?])
  | (?P<PUNCT>[:|()\[\]{},~.<>])
""", re.X)


_RULE_NAME = re.compile(r"_?[a-z][_a-z0-9]*")
_TERMINAL_NAME = re.compile(r"_?[A-Z][_A-Z0-9]*")


def _is_terminal_name(name: str) -> bool:
    return _TERMINAL_NAME.fullmatch(name) is not None


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str
    at: int


def parse_lark(text: str, start: str = "start") -> Grammar:
    """The grammar of Lark ``text``, started at ``start``. Errors: see the module's docstring."""
    return _Parser(text).grammar(start)


class _Parser:
    """A recursive-descent reader over the text's tokens (``toks``, ending with NL and END; ``k`` the cursor): one
    definition or directive per line, a newline before ``|`` continuing it."""

    def __init__(self, text: str):
        self.s = text
        self.line_starts = [0] + [k + 1 for k, c in enumerate(text) if c == "\n"]
        self.toks = self.tokens(text)
        self.k = 0
        self.rules: dict[str, Rule] = {}
        self.ignore: list[Expr] = []

    # ---- places and errors ---------------------------------------------------------------------------------
    def span(self, at: int) -> Span:
        line = bisect.bisect_right(self.line_starts, at)
        return Span(line, at - self.line_starts[line - 1] + 1)

    def fail(self, construct: str, message: str, at: int, error=GrammarSyntaxError):
        span = self.span(at)
        raise error(f"Lark: {message}", construct=construct, line=span.line, column=span.column)

    def tokens(self, text: str) -> list[_Tok]:
        out, i = [], 0
        while i < len(text):
            m = _TOKEN.match(text, i)
            if m is None:
                self.fail("unexpected character", f"unexpected {text[i]!r}", i)
            kind = m.lastgroup
            if kind == "NL_OR":
                out.append(_Tok("PUNCT", "|", m.end() - 1))
            elif kind not in ("WS", "COMMENT"):
                out.append(_Tok(kind, m.group(), i))
            i = m.end()
        out.append(_Tok("NL", "", len(text)))
        out.append(_Tok("END", "", len(text)))
        return out

    def peek(self) -> _Tok:
        return self.toks[self.k]

    def take(self) -> _Tok:
        tok = self.toks[self.k]
        self.k += 1
        return tok

    def expect(self, text: str) -> _Tok:
        tok = self.take()
        if tok.text != text or tok.kind not in ("PUNCT", "DOTDOT", "ARROW"):
            self.fail(f"expecting {text}", f"expecting {text!r}, found {tok.text or tok.kind!r}", tok.at)
        return tok

    def is_punct(self, text: str) -> bool:
        tok = self.peek()
        return tok.kind == "PUNCT" and tok.text == text

    # ---- definitions -----------------------------------------------------------------------------------------
    def grammar(self, start: str) -> Grammar:
        self.definitions()
        self.check()
        if start not in self.rules or self.rules[start].terminal:
            raise UndefinedRuleError(f"Lark: the grammar has no rule {start!r}", construct="start rule", rule=start)
        return Grammar(self.rules, start, tuple(self.ignore), "lark")

    def definitions(self) -> None:
        while self.peek().kind != "END":
            tok = self.peek()
            if tok.kind == "NL":
                self.take()
            elif tok.kind == "DIRECTIVE":
                self.directive()
            elif tok.kind == "NAME":
                self.definition()
            else:
                self.fail("expecting a definition", f"unexpected {tok.text!r} at the start of a definition", tok.at,
                          error=UnsupportedGrammarError if tok.text == "<" else GrammarSyntaxError)

    def definition(self) -> None:
        tok = self.take()
        name = tok.text.lstrip("!?")
        terminal = _is_terminal_name(name)
        if not (terminal or _RULE_NAME.fullmatch(name)) or (terminal and name != tok.text):
            self.fail("name", f"{tok.text!r} is neither a rule name (lower case) nor a terminal's (upper case)", tok.at)
        if self.is_punct("{"):
            self.fail("template", f"templates ({name}{{...}}) are not supported", self.peek().at,
                      error=UnsupportedGrammarError)
        if self.is_punct("["):
            self.fail("rule attributes", f"rule attributes ({name}[...], llguidance's) are not supported",
                      self.peek().at, error=UnsupportedGrammarError)
        if self.is_punct("."):  # priority: ordering for Lark's lexer and parser, not the language
            self.take()
            if self.take().kind != "NUMBER":
                self.fail("priority", "expecting a number after '.'", tok.at)
        self.expect(":")
        body = self.expansions()
        self.end_of_line()
        if name in self.rules:
            self.fail("duplicate", f"{name!r} is defined twice", tok.at)
        self.rules[name] = Rule(name, body, self.span(tok.at), terminal)

    def end_of_line(self) -> None:
        tok = self.take()
        if tok.kind != "NL":
            self.fail("expecting newline", f"unexpected {tok.text!r}; expecting the end of the line", tok.at,
                      error=UnsupportedGrammarError if tok.text == "<" else GrammarSyntaxError)

    def directive(self) -> None:
        tok = self.take()
        if tok.text == "%ignore":
            self.ignore.append(self.expansions())
            self.end_of_line()
        elif tok.text == "%import":
            self.imports(tok)
        else:
            self.fail(tok.text, f"{tok.text} is not supported", tok.at, error=UnsupportedGrammarError)

    def imports(self, directive: _Tok) -> None:
        if self.peek().kind == "PUNCT" and self.peek().text == ".":  # %import .module.NAME: a file beside this one
            self.fail("import", "relative %import (a grammar file beside this one): only Lark's common terminals are "
                      "supported", directive.at, error=UnsupportedGrammarError)
        path = [self.take()]
        while self.peek().kind == "PUNCT" and self.peek().text == ".":
            self.take()
            path.append(self.take())
        if any(p.kind != "NAME" for p in path):
            self.fail("import", "expecting a module path after %import", directive.at)
        module = ".".join(p.text for p in path)
        names: list[tuple[str, str]] = []
        if self.is_punct("("):  # %import common (A, B)
            self.take()
            while True:
                name = self.take()
                names.append((name.text, name.text))
                if self.is_punct(","):
                    self.take()
                    continue
                self.expect(")")
                break
        else:
            module, _, name = module.rpartition(".")
            alias = name
            if self.peek().kind == "ARROW":
                self.take()
                alias = self.take().text
            names.append((name, alias))
        if module != "common":
            self.fail("import", f"%import from {module or 'nothing'!r}: only Lark's common terminals are supported",
                      directive.at, error=UnsupportedGrammarError)
        self.end_of_line()
        common = _common()
        for name, alias in names:
            if name not in common:
                self.fail("import", f"common has no terminal {name!r}", directive.at, error=UndefinedRuleError)
            self.add_common(name, alias, common, directive.at)

    def add_common(self, name: str, alias: str, common: dict[str, Rule], at: int) -> None:
        """The common terminal ``name`` as ``alias``, and the ones it uses (transitively) as ``common.NAME``: a
        grammar's own names never clash with them."""
        if alias in self.rules:
            self.fail("duplicate", f"{alias!r} is defined twice", at)
        self.rules[alias] = Rule(alias, _renamed(common[name].body), self.span(at), terminal=True)
        pending = [ref.name for ref in references(common[name].body)]
        while pending:
            used = pending.pop()
            if f"common.{used}" not in self.rules:
                self.rules[f"common.{used}"] = Rule(f"common.{used}", _renamed(common[used].body), self.span(at),
                                                    terminal=True)
                pending += [ref.name for ref in references(common[used].body)]

    def check(self) -> None:
        for rule in self.rules.values():
            for ref in references(rule.body):
                if ref.name not in self.rules:
                    raise UndefinedRuleError(f"Lark: {ref.name!r} is not defined", construct="undefined name",
                                             line=ref.at.line, column=ref.at.column, rule=ref.name)
                if rule.terminal and not self.rules[ref.name].terminal:
                    raise GrammarSyntaxError(f"Lark: terminal {rule.name!r} refers to rule {ref.name!r}",
                                             construct="terminal uses a rule", line=ref.at.line,
                                             column=ref.at.column, rule=rule.name)
        terminals = Grammar({n: r for n, r in self.rules.items() if r.terminal}, "", (), "lark")
        cyclic = [n for n in terminals.rules if n in cyclic_rules(terminals)]
        if cyclic:
            at = self.rules[cyclic[0]].at
            raise GrammarSyntaxError(f"Lark: terminal {cyclic[0]!r} is recursive", construct="recursive terminal",
                                     line=at.line, column=at.column, rule=cyclic[0])

    # ---- expansions ------------------------------------------------------------------------------------------
    def expansions(self) -> Expr:
        options = [self.alias()]
        while self.is_punct("|"):
            self.take()
            options.append(self.alias())
        return options[0] if len(options) == 1 else Choice(tuple(options))

    def alias(self) -> Expr:
        expansion = self.expansion()
        if self.peek().kind == "ARROW":  # an alias names the tree node; the language is the same
            self.take()
            if self.take().kind != "NAME":
                self.fail("alias", "expecting a name after '->'", self.toks[self.k - 1].at)
        return expansion

    def expansion(self) -> Expr:
        items = []
        while True:
            tok = self.peek()
            if tok.kind in ("STRING", "REGEXP", "NAME") or (tok.kind == "PUNCT" and tok.text in "([<"):
                items.append(self.expr())
            else:
                break
        return EMPTY if not items else items[0] if len(items) == 1 else Sequence(tuple(items))

    def expr(self) -> Expr:
        atom = self.atom()
        tok = self.peek()
        if tok.kind == "OP":
            self.take()
            return Repeat(atom, *{"*": (0, None), "+": (1, None), "?": (0, 1)}[tok.text])
        if self.is_punct("~"):
            self.take()
            low = self.number()
            high = low
            if self.peek().kind == "DOTDOT":
                self.take()
                high = self.number()
            if high < low:
                self.fail("repetition", f"~ {low}..{high}: the upper bound is below the lower one", tok.at)
            return Repeat(atom, low, high)
        return atom

    def number(self) -> int:
        tok = self.take()
        if tok.kind != "NUMBER" or int(tok.text) < 0:
            self.fail("expecting a number", f"expecting a number, found {tok.text!r}", tok.at)
        return int(tok.text)

    def atom(self) -> Expr:
        tok = self.take()
        if tok.kind == "PUNCT" and tok.text in "([":
            self.skip_newlines()
            inner = self.expansions()
            self.skip_newlines()
            self.expect(")" if tok.text == "(" else "]")
            return inner if tok.text == "(" else Repeat(inner, 0, 1)
        if tok.kind == "PUNCT" and tok.text == "<":
            self.fail("special token", "special tokens (<...>, llguidance's) are not supported", tok.at,
                      error=UnsupportedGrammarError)
        if tok.kind == "NAME":
            name = tok.text
            if not (_is_terminal_name(name) or _RULE_NAME.fullmatch(name)):
                self.fail("name", f"{name!r} is neither a rule name (lower case) nor a terminal's (upper case)", tok.at)
            if self.is_punct("{"):
                self.fail("template", f"template usage {name}{{...}} is not supported", tok.at,
                          error=UnsupportedGrammarError)
            return Ref(name, self.span(tok.at))
        if tok.kind == "STRING":
            value, ignore_case = self.string(tok)
            if self.peek().kind == "DOTDOT":  # "a".."z"
                self.take()
                high_tok = self.take()
                if high_tok.kind != "STRING":
                    self.fail("range", "expecting a string after '..'", high_tok.at)
                high, _ = self.string(high_tok)
                if len(value) != 1 or len(high) != 1:
                    self.fail("range", "a range's ends must be single characters", tok.at)
                return CharClass.of([(ord(value), ord(high))])
            return Literal(value, ignore_case)
        if tok.kind == "REGEXP":
            body, _, flags = tok.text[1:].rpartition("/")
            pattern = _unescape(body, tok, self)
            try:
                re.compile(pattern)
            except re.error as exc:
                self.fail("regex", f"bad regex {tok.text}: {exc}", tok.at)
            return Regex(pattern, "".join(sorted(set(flags))))
        self.fail("expecting an item", f"unexpected {tok.text or tok.kind!r}", tok.at)

    def skip_newlines(self) -> None:
        while self.peek().kind == "NL" and self.toks[self.k + 1].kind != "END":
            self.take()

    def string(self, tok: _Tok) -> tuple[str, bool]:
        ignore_case = tok.text.endswith("i")
        body = tok.text[1:-2] if ignore_case else tok.text[1:-1]
        value = _unescape(body, tok, self).replace("\\\\", "\\")  # (Lark halves a string's doubled backslashes)
        if value == "":
            self.fail("empty literal", "empty literals are not allowed (Lark refuses them)", tok.at)
        return value, ignore_case


def _unescape(body: str, tok: _Tok, parser: _Parser) -> str:
    """A literal's or regex's text between its delimiters, its escapes read as Lark reads them: the text is made a
    Python string literal (``\\n \\t \\r \\f \\xHH \\uHHHH \\UHHHHHHHH`` kept as escapes, a doubled backslash doubled
    again, any other ``\\c`` kept as its two characters), then every backslash-quote made a quote, and evaluated."""
    out, i = [], 0
    while i < len(body):
        c = body[i]
        out.append(c)
        i += 1
        if c != "\\":
            continue
        if i >= len(body):
            parser.fail("escape", "a literal ends with a backslash", tok.at)
        e = body[i]
        i += 1
        if e == "\\":
            out.append("\\\\")
        elif e not in "Uuxnftr":
            out.append("\\")
        out.append(e)
    text = "".join(out).replace('\\"', '"').replace("'", "\\'")
    try:
        return ast.literal_eval("u'''" + text + "'''")
    except (SyntaxError, ValueError) as exc:
        parser.fail("escape", f"bad escape in {tok.text}: {exc}", tok.at)


_COMMON: dict[str, Rule] = {}


def _common() -> dict[str, Rule]:
    """``COMMON``'s terminals, read once."""
    if not _COMMON:
        parser = _Parser(COMMON)
        parser.definitions()
        _COMMON.update(parser.rules)
    return _COMMON


def _renamed(expr: Expr) -> Expr:
    """A common terminal's body, its references to other common terminals renamed ``common.NAME``."""
    if isinstance(expr, Ref):
        return Ref(f"common.{expr.name}", expr.at)
    if isinstance(expr, Sequence):
        return Sequence(tuple(_renamed(item) for item in expr.items))
    if isinstance(expr, Choice):
        return Choice(tuple(_renamed(option) for option in expr.options))
    if isinstance(expr, Repeat):
        return Repeat(_renamed(expr.item), expr.min, expr.max)
    return expr
