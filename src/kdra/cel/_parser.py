"""CEL lexer and recursive-descent parser producing a small AST with source offsets.

The grammar is cel-spec's (https://github.com/google/cel-spec/blob/master/doc/langdef.md#syntax).
Offsets are kept per node so that compile errors can carry cel-go's `<input>:line:col` positions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

# ---------------------------------------------------------------------------------------------------------
# AST


@dataclass(slots=True)
class Node:
    pos: int


@dataclass(slots=True)
class Lit(Node):
    value: Any
    kind: str  # int uint double string bytes bool null


@dataclass(slots=True)
class Ident(Node):
    name: str


@dataclass(slots=True)
class Select(Node):
    operand: Node
    field: str
    test_only: bool = False


@dataclass(slots=True)
class Index(Node):
    operand: Node
    index: Node


@dataclass(slots=True)
class Call(Node):
    function: str
    args: list[Node]
    target: Node | None = None  # receiver for member calls


@dataclass(slots=True)
class ListLit(Node):
    items: list[Node]


@dataclass(slots=True)
class MapLit(Node):
    entries: list[tuple[Node, Node]]


@dataclass(slots=True)
class MessageLit(Node):
    type_name: str
    fields: list[tuple[str, Node]] = field(default_factory=list)


RESERVED = frozenset(
    [
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ]
)


class ParseError(Exception):
    def __init__(self, message: str, pos: int) -> None:
        super().__init__(message)
        self.message = message
        self.pos = pos


# ---------------------------------------------------------------------------------------------------------
# Lexer

_TOKEN_RE = re.compile(
    r"""
    (?P<ws>[ \t\r\n\f]+|//[^\n]*)
  | (?P<num>(?:0[xX][0-9a-fA-F]+[uU]?)
        |(?:(?:[0-9]+\.[0-9]+(?:[eE][+-]?[0-9]+)?)|(?:\.[0-9]+(?:[eE][+-]?[0-9]+)?)|(?:[0-9]+[eE][+-]?[0-9]+))
        |(?:[0-9]+[uU]?))
  | (?P<str>(?:[rR][bB]?|[bB][rR]?)?(?:\"\"\"|'''|\"|'))
  | (?P<ident>[_a-zA-Z][_a-zA-Z0-9]*)
  | (?P<bq>`[^`]*`)
  | (?P<op>==|!=|<=|>=|&&|\|\||[-+*/%!<>?:.,\[\]{}()])
    """,
    re.VERBOSE,
)


@dataclass(slots=True)
class Tok:
    kind: str  # num str ident op eof bq
    text: str
    pos: int
    value: Any = None


_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "`": "`",
    "?": "?",
}


def _unescape(body: str, is_bytes: bool, pos: int) -> str | bytes:
    """Decode CEL escape sequences (cel-go parser/unescape.go semantics)."""
    out: list[Any] = []  # str pieces, or ints (raw bytes) for bytes literals
    i = 0
    n = len(body)
    while i < n:
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= n:
            raise ParseError("Syntax error: found '\\' at end of string literal", pos)
        e = body[i + 1]
        if e in _ESCAPES:
            out.append(_ESCAPES[e])
            i += 2
        elif e in "xX":
            h = body[i + 2 : i + 4]
            if len(h) != 2 or not all(ch in "0123456789abcdefABCDEF" for ch in h):
                raise ParseError("Syntax error: invalid escape sequence", pos)
            v = int(h, 16)
            out.append(v if is_bytes else chr(v))
            i += 4
        elif e in "uU":
            if is_bytes:
                raise ParseError("unable to unescape string", pos)
            ln = 4 if e == "u" else 8
            h = body[i + 2 : i + 2 + ln]
            if len(h) != ln or not all(ch in "0123456789abcdefABCDEF" for ch in h):
                raise ParseError("Syntax error: invalid escape sequence", pos)
            v = int(h, 16)
            if v > 0x10FFFF or 0xD800 <= v <= 0xDFFF:
                raise ParseError("unable to unescape string", pos)
            out.append(chr(v))
            i += 2 + ln
        elif e in "01234567":
            o = body[i + 1 : i + 4]
            if len(o) != 3 or not all(ch in "01234567" for ch in o):
                raise ParseError("Syntax error: invalid escape sequence", pos)
            v = int(o, 8)
            if v > 255:
                raise ParseError("Syntax error: octal escape out of range", pos)
            out.append(v if is_bytes else chr(v))
            i += 4
        else:
            raise ParseError("Syntax error: invalid escape sequence", pos)
    if is_bytes:
        ba = bytearray()
        for piece in out:
            if isinstance(piece, int):
                ba.append(piece)
            else:
                ba.extend(piece.encode("utf-8"))
        return bytes(ba)
    return "".join(out)


_HEX = frozenset("0123456789abcdefABCDEF")


def _escape_len(src: str, j: int) -> int:
    """Length of the escape sequence at src[j] (a backslash) per the CEL lexer, 0 if invalid."""
    e = src[j + 1 : j + 2]
    if e and e in "abfnrtv\"'\\?`":
        return 2
    if e in ("x", "X"):
        return 4 if all(c in _HEX for c in src[j + 2 : j + 4]) and len(src[j + 2 : j + 4]) == 2 else 0
    if e == "u":
        return 6 if len(src[j + 2 : j + 6]) == 4 and all(c in _HEX for c in src[j + 2 : j + 6]) else 0
    if e == "U":
        return 10 if len(src[j + 2 : j + 10]) == 8 and all(c in _HEX for c in src[j + 2 : j + 10]) else 0
    if e and e in "0123":
        o = src[j + 2 : j + 4]
        return 4 if len(o) == 2 and all(c in "01234567" for c in o) else 0
    return 0


def tokenize(src: str) -> list[Tok]:
    toks: list[Tok] = []
    i = 0
    n = len(src)
    match = _TOKEN_RE.match
    while i < n:
        m = match(src, i)
        if m is None:
            raise ParseError(f"Syntax error: token recognition error at: '{src[i]}'", i)
        kind = m.lastgroup
        text = m.group()
        if kind == "ws":
            i = m.end()
            continue
        if kind == "str":
            prefix_len = len(text.rstrip("'\""))
            prefix = text[:prefix_len].lower()
            quote = text[prefix_len:]
            raw = "r" in prefix
            is_bytes = "b" in prefix
            start = m.end()
            j = start
            body_end = -1
            while j < n:
                if src.startswith(quote, j):
                    body_end = j
                    break
                ch = src[j]
                if ch == "\\" and not raw:
                    k = _escape_len(src, j)
                    if k == 0:
                        raise ParseError(f"Syntax error: token recognition error at: '{src[i : j + 2]}'", i)
                    j += k
                    continue
                if ch == "\\" and raw:
                    # raw strings still cannot end with an escaped quote char
                    j += 2 if j + 1 < n and src[j + 1] == quote[0] and len(quote) == 1 else 1
                    continue
                if ch in "\r\n" and len(quote) == 1:
                    break
                j += 1
            if body_end < 0:
                raise ParseError(f"Syntax error: token recognition error at: '{src[i : j + 1]}'", i)
            body = src[start:body_end]
            value: str | bytes = (
                (body.encode("utf-8") if is_bytes else body) if raw else _unescape(body, is_bytes, i)
            )
            toks.append(Tok("bytes" if is_bytes else "str", src[i : body_end + len(quote)], i, value))
            i = body_end + len(quote)
            continue
        toks.append(Tok(kind or "op", text, i))
        i = m.end()
    toks.append(Tok("eof", "<EOF>", n))
    return toks


# ---------------------------------------------------------------------------------------------------------
# Parser

MAX_RECURSION = 250  # cel-go's default max recursion depth for the parser


class Parser:
    def __init__(self, src: str) -> None:
        self.src = src
        self.toks = tokenize(src)
        self.i = 0
        self.depth = 0

    def peek(self) -> Tok:
        return self.toks[self.i]

    def next(self) -> Tok:
        t = self.toks[self.i]
        self.i += 1
        return t

    def at_op(self, text: str) -> bool:
        t = self.toks[self.i]
        return t.kind == "op" and t.text == text

    def expect_op(self, text: str) -> Tok:
        t = self.next()
        if t.kind != "op" or t.text != text:
            self._mismatch(t, f"'{text}'")
        return t

    def _mismatch(self, t: Tok, expecting: str) -> None:
        if t.kind == "eof":
            raise ParseError(f"Syntax error: mismatched input '<EOF>' expecting {expecting}", t.pos)
        raise ParseError(f"Syntax error: mismatched input '{t.text}' expecting {expecting}", t.pos)

    def parse(self) -> Node:
        e = self.expr()
        t = self.peek()
        if t.kind != "eof":
            raise ParseError(f"Syntax error: extraneous input '{t.text}' expecting <EOF>", t.pos)
        return e

    def _enter(self, pos: int) -> None:
        self.depth += 1
        if self.depth > MAX_RECURSION:
            raise ParseError(f"expression recursion limit exceeded: {MAX_RECURSION}", pos)

    def expr(self) -> Node:
        self._enter(self.peek().pos)
        try:
            cond = self.cond_or()
            if self.at_op("?"):
                q = self.next()
                a = self.cond_or()
                self.expect_op(":")
                b = self.expr()
                return Call(q.pos, "_?_:_", [cond, a, b])
            return cond
        finally:
            self.depth -= 1

    def cond_or(self) -> Node:
        left = self.cond_and()
        while self.at_op("||"):
            op = self.next()
            right = self.cond_and()
            left = Call(op.pos, "_||_", [left, right])
        return left

    def cond_and(self) -> Node:
        left = self.relation()
        while self.at_op("&&"):
            op = self.next()
            right = self.relation()
            left = Call(op.pos, "_&&_", [left, right])
        return left

    _REL: ClassVar[dict[str, str]] = {
        "<": "_<_",
        "<=": "_<=_",
        ">": "_>_",
        ">=": "_>=_",
        "==": "_==_",
        "!=": "_!=_",
    }

    def relation(self) -> Node:
        left = self.addition()
        while True:
            t = self.peek()
            if t.kind == "op" and t.text in self._REL:
                self.next()
                right = self.addition()
                left = Call(t.pos, self._REL[t.text], [left, right])
            elif t.kind == "ident" and t.text == "in":
                self.next()
                right = self.addition()
                left = Call(t.pos, "@in", [left, right])
            else:
                return left

    def addition(self) -> Node:
        left = self.multiplication()
        while True:
            t = self.peek()
            if t.kind == "op" and t.text in ("+", "-"):
                self.next()
                right = self.multiplication()
                left = Call(t.pos, "_+_" if t.text == "+" else "_-_", [left, right])
            else:
                return left

    def multiplication(self) -> Node:
        left = self.unary()
        while True:
            t = self.peek()
            if t.kind == "op" and t.text in ("*", "/", "%"):
                self.next()
                right = self.unary()
                left = Call(t.pos, {"*": "_*_", "/": "_/_", "%": "_%_"}[t.text], [left, right])
            else:
                return left

    def unary(self) -> Node:
        t = self.peek()
        e: Node
        if t.kind == "op" and t.text == "!":
            ops = []
            while self.at_op("!"):
                ops.append(self.next())
            e = self.member()
            for op in reversed(ops):
                e = Call(op.pos, "!_", [e])
            return e
        if t.kind == "op" and t.text == "-":
            ops = []
            while self.at_op("-"):
                ops.append(self.next())
            nt = self.peek()
            if nt.kind == "num" and len(ops) % 2 == 1 and not self._next_is_member(1):
                # negative literal: -9223372036854775808 is valid
                self.next()
                e = self._num(nt, negate=True)
                ops = ops[1:]
                e = self._postfix(e)
            else:
                e = self.member()
            for op in reversed(ops):
                e = Call(op.pos, "-_", [e])
            return e
        return self.member()

    def _next_is_member(self, k: int) -> bool:
        t = self.toks[self.i + k]
        return t.kind == "op" and t.text in (".", "[")

    def member(self) -> Node:
        return self._postfix(self.primary())

    def _postfix(self, e: Node) -> Node:
        while True:
            t = self.peek()
            if t.kind != "op":
                return e
            if t.text == ".":
                self.next()
                name_tok = self.next()
                if name_tok.kind == "bq":
                    name = name_tok.text[1:-1]
                elif name_tok.kind == "ident":
                    name = name_tok.text
                else:
                    self._mismatch(name_tok, "IDENTIFIER")
                    raise AssertionError  # unreachable
                if name_tok.kind == "ident" and name in RESERVED:
                    raise ParseError(f"Syntax error: reserved identifier: {name}", name_tok.pos)
                if self.at_op("(") and name_tok.kind == "ident":
                    open_tok = self.next()
                    args = self._args(")")
                    e = Call(open_tok.pos, name, args, target=e)
                else:
                    e = Select(t.pos, e, name)
            elif t.text == "[":
                self.next()
                idx = self.expr()
                self.expect_op("]")
                e = Index(t.pos, e, idx)
            else:
                return e

    def _args(self, close: str) -> list[Node]:
        args: list[Node] = []
        if self.at_op(close):
            self.next()
            return args
        while True:
            args.append(self.expr())
            if self.at_op(","):
                self.next()
                if close == "]" and self.at_op(close):
                    self.next()
                    return args
                continue
            self.expect_op(close)
            return args

    def _num(self, t: Tok, negate: bool = False) -> Lit:
        text = t.text
        sign = "-" if negate else ""
        try:
            if text[-1] in "uU":
                if negate:
                    raise ParseError("Syntax error: unsigned integer literal cannot be negative", t.pos)
                v = int(text[:-1], 0)
                if v > 0xFFFFFFFFFFFFFFFF:
                    raise ParseError("invalid uint literal", t.pos)
                return Lit(t.pos, v, "uint")
            if text.lower().startswith("0x"):
                v = int(sign + text, 16)
                if not -(2**63) <= v < 2**63:
                    raise ParseError("invalid int literal", t.pos)
                return Lit(t.pos, v, "int")
            if any(c in text for c in ".eE"):
                return Lit(t.pos, float(sign + text), "double")
            v = int(sign + text)
            if not -(2**63) <= v < 2**63:
                raise ParseError("invalid int literal", t.pos)
            return Lit(t.pos, v, "int")
        except ValueError:
            raise ParseError(f"invalid number literal {text}", t.pos) from None

    def primary(self) -> Node:
        t = self.next()
        k = t.kind
        if k == "num":
            return self._num(t)
        if k == "str":
            return Lit(t.pos, t.value, "string")
        if k == "bytes":
            return Lit(t.pos, t.value, "bytes")
        if k == "ident":
            name = t.text
            if name == "true":
                return Lit(t.pos, True, "bool")
            if name == "false":
                return Lit(t.pos, False, "bool")
            if name == "null":
                return Lit(t.pos, None, "null")
            if name in RESERVED or name == "in":
                raise ParseError(f"Syntax error: reserved identifier: {name}", t.pos)
            if self.at_op("("):
                open_tok = self.next()
                args = self._args(")")
                return Call(open_tok.pos, name, args)
            if self.at_op("{"):
                return self._message(t.pos, name)
            return Ident(t.pos, name)
        if k == "op":
            if t.text == "(":
                e = self.expr()
                self.expect_op(")")
                return e
            if t.text == "[":
                items = self._args("]")
                return ListLit(t.pos, items)
            if t.text == "{":
                return self._map(t.pos)
            if t.text == ".":
                nt = self.next()
                if nt.kind != "ident":
                    self._mismatch(nt, "IDENTIFIER")
                if self.at_op("("):
                    open_tok = self.next()
                    args = self._args(")")
                    return Call(open_tok.pos, nt.text, args)
                return Ident(nt.pos, nt.text)
        if k == "eof":
            raise ParseError(
                "Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', "
                "'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}",
                t.pos,
            )
        raise ParseError(
            f"Syntax error: mismatched input '{t.text}' expecting {{'[', '{{', '(', '.', '-', '!', "
            "'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}",
            t.pos,
        )

    def _map(self, pos: int) -> Node:
        entries: list[tuple[Node, Node]] = []
        if self.at_op("}"):
            self.next()
            return MapLit(pos, entries)
        while True:
            k = self.expr()
            self.expect_op(":")
            v = self.expr()
            entries.append((k, v))
            if self.at_op(","):
                self.next()
                if self.at_op("}"):
                    self.next()
                    return MapLit(pos, entries)
                continue
            self.expect_op("}")
            return MapLit(pos, entries)

    def _message(self, pos: int, name: str) -> Node:
        open_tok = self.expect_op("{")
        fields: list[tuple[str, Node]] = []
        if self.at_op("}"):
            self.next()
            return MessageLit(open_tok.pos, name, fields)
        while True:
            ft = self.next()
            if ft.kind != "ident":
                self._mismatch(ft, "IDENTIFIER")
            self.expect_op(":")
            fields.append((ft.text, self.expr()))
            if self.at_op(","):
                self.next()
                if self.at_op("}"):
                    self.next()
                    return MessageLit(open_tok.pos, name, fields)
                continue
            self.expect_op("}")
            return MessageLit(open_tok.pos, name, fields)


def parse(src: str) -> Node:
    return Parser(src).parse()
