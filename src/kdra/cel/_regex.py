"""RE2-flavoured regular expressions for matches()/find()/findAll() without catastrophic backtracking.

cel-go uses RE2 (linear time). Python's `re` backtracks, so `(a+)+$` or `a*a*a*b` on a long input can
take exponential or high-polynomial time. Patterns with at most one repetition run on `re` (fast, at
worst quadratic in C); anything else runs on a small Pike VM over `re`'s own parse tree, which is
O(len(text) * len(pattern)) like RE2. Syntax RE2 rejects (look-around, back-references, \\Z) is rejected
here with RE2's message, and \\d \\w \\s \\b are ASCII-only as in RE2.
"""

from __future__ import annotations

import re
import re._constants as C
import re._parser as P
from collections.abc import Callable
from typing import Any

from kdra.cel._values import EvalError

_POSIX = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7f",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}
_POSIX_RE = re.compile(r"\[:(\^?)([a-z]+):\]")


def _re2_message(py: str, pattern: str) -> str:
    """Python's re error -> RE2's wording for the common cases."""
    if py.startswith("unterminated character set"):
        return f"missing closing ]: `{pattern[pattern.find('[') :]}`"
    if py.startswith("missing ), unterminated subpattern"):
        return f"missing closing ): `{pattern}`"
    if py.startswith("unbalanced parenthesis"):
        return f"unexpected ): `{pattern}`"
    if py.startswith("nothing to repeat") or py.startswith("multiple repeat"):
        return f"missing argument to repetition operator: `{pattern}`"
    return f"{py}: `{pattern}`"


def _error(msg: str) -> EvalError:
    return EvalError(f"error parsing regexp: {msg}")


_UNICODE_CLASS = re.compile(r"\\([pP])(?:\{(\^?)([A-Za-z_]*)\}|([A-Za-z]))")
# Go's unicode.Categories names; scripts (Greek, Han, ..) are valid in Go but not available here
_GO_CATEGORY_NAMES = frozenset(
    [
        "C",
        "Cc",
        "Cf",
        "Co",
        "Cs",
        "L",
        "Ll",
        "Lm",
        "Lo",
        "Lt",
        "Lu",
        "M",
        "Mc",
        "Me",
        "Mn",
        "N",
        "Nd",
        "Nl",
        "No",
        "P",
        "Pc",
        "Pd",
        "Pe",
        "Pf",
        "Pi",
        "Po",
        "Ps",
        "S",
        "Sc",
        "Sk",
        "Sm",
        "So",
        "Z",
        "Zl",
        "Zp",
        "Zs",
    ]
)
# Go's unicode.Scripts names (go1.26 tables.go): valid in RE2 syntax, not supported by kdra
_GO_SCRIPT_NAMES = frozenset(
    [
        "Adlam",
        "Ahom",
        "Anatolian_Hieroglyphs",
        "Arabic",
        "Armenian",
        "Avestan",
        "Balinese",
        "Bamum",
        "Bassa_Vah",
        "Batak",
        "Bengali",
        "Bhaiksuki",
        "Bopomofo",
        "Brahmi",
        "Braille",
        "Buginese",
        "Buhid",
        "Canadian_Aboriginal",
        "Carian",
        "Caucasian_Albanian",
        "Chakma",
        "Cham",
        "Cherokee",
        "Chorasmian",
        "Common",
        "Coptic",
        "Cuneiform",
        "Cypriot",
        "Cypro_Minoan",
        "Cyrillic",
        "Deseret",
        "Devanagari",
        "Dives_Akuru",
        "Dogra",
        "Duployan",
        "Egyptian_Hieroglyphs",
        "Elbasan",
        "Elymaic",
        "Ethiopic",
        "Georgian",
        "Glagolitic",
        "Gothic",
        "Grantha",
        "Greek",
        "Gujarati",
        "Gunjala_Gondi",
        "Gurmukhi",
        "Han",
        "Hangul",
        "Hanifi_Rohingya",
        "Hanunoo",
        "Hatran",
        "Hebrew",
        "Hiragana",
        "Imperial_Aramaic",
        "Inherited",
        "Inscriptional_Pahlavi",
        "Inscriptional_Parthian",
        "Javanese",
        "Kaithi",
        "Kannada",
        "Katakana",
        "Kawi",
        "Kayah_Li",
        "Kharoshthi",
        "Khitan_Small_Script",
        "Khmer",
        "Khojki",
        "Khudawadi",
        "Lao",
        "Latin",
        "Lepcha",
        "Limbu",
        "Linear_A",
        "Linear_B",
        "Lisu",
        "Lycian",
        "Lydian",
        "Mahajani",
        "Makasar",
        "Malayalam",
        "Mandaic",
        "Manichaean",
        "Marchen",
        "Masaram_Gondi",
        "Medefaidrin",
        "Meetei_Mayek",
        "Mende_Kikakui",
        "Meroitic_Cursive",
        "Meroitic_Hieroglyphs",
        "Miao",
        "Modi",
        "Mongolian",
        "Mro",
        "Multani",
        "Myanmar",
        "Nabataean",
        "Nag_Mundari",
        "Nandinagari",
        "New_Tai_Lue",
        "Newa",
        "Nko",
        "Nushu",
        "Nyiakeng_Puachue_Hmong",
        "Ogham",
        "Ol_Chiki",
        "Old_Hungarian",
        "Old_Italic",
        "Old_North_Arabian",
        "Old_Permic",
        "Old_Persian",
        "Old_Sogdian",
        "Old_South_Arabian",
        "Old_Turkic",
        "Old_Uyghur",
        "Oriya",
        "Osage",
        "Osmanya",
        "Pahawh_Hmong",
        "Palmyrene",
        "Pau_Cin_Hau",
        "Phags_Pa",
        "Phoenician",
        "Psalter_Pahlavi",
        "Rejang",
        "Runic",
        "Samaritan",
        "Saurashtra",
        "Sharada",
        "Shavian",
        "Siddham",
        "SignWriting",
        "Sinhala",
        "Sogdian",
        "Sora_Sompeng",
        "Soyombo",
        "Sundanese",
        "Syloti_Nagri",
        "Syriac",
        "Tagalog",
        "Tagbanwa",
        "Tai_Le",
        "Tai_Tham",
        "Tai_Viet",
        "Takri",
        "Tamil",
        "Tangsa",
        "Tangut",
        "Telugu",
        "Thaana",
        "Thai",
        "Tibetan",
        "Tifinagh",
        "Tirhuta",
        "Toto",
        "Ugaritic",
        "Vai",
        "Vithkuqi",
        "Wancho",
        "Warang_Citi",
        "Yezidi",
        "Yi",
        "Zanabazar_Square",
    ]
)
_CATEGORY_RANGES: dict[str, str] = {}


def _unicode_ranges(name: str) -> str | None:
    """A character-class body for \\p{name}: a Unicode general category (one or two letters) or Any;
    None for anything else. Built once from unicodedata (Go's C excludes unassigned code points)."""
    if name == "Any":
        return "\\x00-\\U0010ffff"
    if name not in _GO_CATEGORY_NAMES:
        return None
    if not _CATEGORY_RANGES:
        import unicodedata

        spans: dict[str, list[list[int]]] = {}
        for cp in range(0x110000):
            cat = unicodedata.category(chr(cp))
            if cat == "Cn":
                continue
            for key in (cat, cat[0]):
                lst = spans.setdefault(key, [])
                if lst and lst[-1][1] == cp - 1:
                    lst[-1][1] = cp
                else:
                    lst.append([cp, cp])
        for key, lst in spans.items():
            _CATEGORY_RANGES[key] = "".join(
                f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in lst
            )
    return _CATEGORY_RANGES.get(name, "")


def _translate(pattern: str) -> str:
    """RE2 syntax -> Python syntax, rejecting what RE2 rejects."""
    out: list[str] = []
    i = 0
    n = len(pattern)
    in_class = False
    multiline = re.search(r"\(\?[a-zA-Z]*m", pattern) is not None
    # RE2 flag groups such as (?i) apply to the rest of the enclosing group (every later alternative
    # too); Python takes global flags only at the start, so each becomes a scoped (?i:...) closed
    # at the next | or ) of its level and reopened after a |
    scoped: list[list[str]] = [[]]
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                raise _error("trailing backslash at end of expression: ``")
            e = pattern[i + 1]
            if e.isdigit() and e != "0" and not in_class:
                raise _error(f"invalid escape sequence: `\\{e}`")
            if e == "Z":
                raise _error("invalid escape sequence: `\\Z`")
            if e == "z":
                out.append("\\Z")
            elif e in "pP":
                um = _UNICODE_CLASS.match(pattern, i)
                text = um.group(0) if um else pattern[i : i + 2]
                name = (um.group(3) or um.group(4)) if um else ""
                negate = um is not None and (e == "P") != (um.group(2) == "^")
                ranges = _unicode_ranges(name)
                if ranges is None:
                    if name not in _GO_SCRIPT_NAMES:
                        raise _error(f"invalid character class range: `{text}`")
                    raise _error(
                        f"invalid character class range: `{text}` (Unicode scripts are not supported by kdra)"
                    )
                if in_class:
                    if negate:
                        raise _error(f"invalid character class range: `{text}` (not supported by kdra)")
                    out.append(ranges)
                else:
                    out.append(("[^" if negate else "[") + ranges + "]")
                i += len(text)
                continue
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if c == "[":
                m = _POSIX_RE.match(pattern, i)
                if m:
                    if m.group(2) not in _POSIX:
                        raise _error(f"invalid character class range: `{m.group(0)}`")
                    if m.group(1):
                        raise _error(f"invalid character class range: `{m.group(0)}`")
                    out.append(_POSIX[m.group(2)])
                    i = m.end()
                    continue
                out.append("\\[")
                i += 1
                continue
            if c == "]" and not (out and out[-1] in ("[", "[^")):
                in_class = False
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            if pattern.startswith("[^", i):
                out.append("[^")
                i += 2
            else:
                out.append("[")
                i += 1
            continue
        if c in "^$" and i + 1 < n and pattern[i + 1] in "*+?{":
            # RE2 repeats an anchor (a no-op); Python's re refuses "nothing to repeat" unless grouped
            out.append("(?:" + ("\\Z" if c == "$" and not multiline else c) + ")")
            i += 1
            continue
        if c == "$" and not multiline:
            out.append("\\Z")  # RE2: end of text only (Python's $ also matches before a final newline)
            i += 1
            continue
        if c == "(" and pattern.startswith("(?", i):
            for bad in ("(?=", "(?!", "(?<=", "(?<!", "(?>", "(?#"):
                if pattern.startswith(bad, i):
                    raise _error(f"invalid or unsupported Perl syntax: `{bad}`")
            if pattern.startswith("(?P<", i) or pattern.startswith("(?<", i):
                # a named group; the name plays no part in matching, and Go's names (1n, repeated
                # names) are wider than Python's, so it becomes a plain group
                start = i + (4 if pattern[i + 2] == "P" else 3)
                end = pattern.find(">", start)
                if end < 0:
                    raise _error(f"invalid named capture: `{pattern[i:]}`")
                name = pattern[start:end]
                if not name or not all(ch.isascii() and (ch.isalnum() or ch == "_") for ch in name):
                    raise _error(f"invalid named capture: `{pattern[i : end + 1]}`")
                out.append("(")
                scoped.append([])
                i = end + 1
                continue
            if pattern.startswith("(?P", i):
                raise _error("invalid or unsupported Perl syntax: `(?P`")
            fm = _FLAGS_ONLY.match(pattern, i)
            if fm and fm.end() - i > 3:
                opener = fm.group(0)[:-1] + ":"
                scoped[-1].append(opener)
                out.append(opener)
                i = fm.end()
                continue
        if c == "(":
            scoped.append([])
        if c == ")" and len(scoped) > 1:
            out.append(")" * len(scoped.pop()))
        elif c == "|" and scoped[-1]:
            out.append(")" * len(scoped[-1]) + "|" + "".join(scoped[-1]))
            i += 1
            continue
        out.append(c)
        i += 1
    out.append(")" * len(scoped[0]))
    return "".join(out)


_REPEAT_RE = re.compile(r"\{(\d+)(,(\d*))?\}")
_FLAGS_ONLY = re.compile(r"\(\?[a-zA-Z-]*\)")


def _repeat_is_valid(node: tuple[int, list[Any]], n: int) -> bool:
    """Go regexp/syntax repeatIsValid: nested {n,m} counts may not multiply past 1000."""
    m, subs = node
    if m >= 0:
        if m == 0:
            return True
        if m > n:
            return False
        n //= m
    return all(_repeat_is_valid(sub, n) for sub in subs)


def _check_repeats(pattern: str) -> None:
    """What Go's parser checks of repetition operators (RE2 syntax, Perl flags), with its messages:
    counts over 1000 or min > max, nested counts multiplying past 1000, stacked operators (a**),
    an operator with nothing to repeat."""
    # a node is (count or -1, children); a {n,m} repeat has count m (n when unbounded)
    frames: list[list[tuple[int, list[Any]]]] = [[]]
    last: tuple[int, list[Any]] | None = None  # the atom an operator would apply to
    last_repeat = -1  # start of the previous token when it was a repetition operator
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        start = i
        if c in "*+?{":
            if c == "{":
                m = _REPEAT_RE.match(pattern, i)
                if m is None or (len(m.group(1)) > 1 and m.group(1)[0] == "0"):
                    last, last_repeat = (-1, []), -1
                    frames[-1].append(last)
                    i += 1
                    continue
                lo = int(m.group(1))
                hi = lo if m.group(2) is None else (-1 if m.group(3) == "" else int(m.group(3)))
                i = m.end()
                if lo > 1000 or hi > 1000 or (hi >= 0 and lo > hi):
                    raise _error(f"invalid repeat count: `{pattern[start:i]}`")
            else:
                lo, hi = 0, 0
                i += 1
            if i < n and pattern[i] == "?":
                i += 1
            if last_repeat >= 0:
                raise _error(f"invalid nested repetition operator: `{pattern[last_repeat:i]}`")
            if last is None:
                raise _error(f"missing argument to repetition operator: `{pattern[start:i]}`")
            count = (hi if hi >= 0 else lo) if c == "{" else -1
            node = (count, [last])
            if c == "{" and (lo >= 2 or hi >= 2) and not _repeat_is_valid(node, 1000):
                raise _error(f"invalid repeat count: `{pattern[start:i]}`")
            frames[-1][-1] = node
            last = node
            last_repeat = start
            continue
        last_repeat = -1
        if c == "\\":
            if pattern.startswith("\\Q", i):
                end = pattern.find("\\E", i + 2)
                i = n if end < 0 else end + 2
            elif pattern.startswith("\\x{", i) or (pattern[i + 1 : i + 3] in ("p{", "P{")):
                end = pattern.find("}", i)
                i = n if end < 0 else end + 1
            else:
                i += 2
        elif c == "[":
            i += 1
            if i < n and pattern[i] == "^":
                i += 1
            if i < n and pattern[i] == "]":
                i += 1
            while i < n and pattern[i] != "]":
                if pattern[i] == "\\":
                    i += 2
                elif pattern[i] == "[" and (pm := _POSIX_RE.match(pattern, i)):
                    i = pm.end()
                else:
                    i += 1
            i += 1
        elif c == "(":
            fm = _FLAGS_ONLY.match(pattern, i)
            if fm:
                i = fm.end()  # flags only: an operator after it applies to the atom before it
                continue
            frames.append([])
            last = None
            i += 1
            if pattern.startswith("?", i):  # (?:  (?i:  (?P<name>  (?<name>
                end = pattern.find(">" if pattern.startswith(("?P<", "?<"), i) else ":", i)
                i = n if end < 0 else end + 1
            continue
        elif c == ")":
            if len(frames) == 1:
                return  # unbalanced: the parser reports it
            children = frames.pop()
            last = (-1, children)
            frames[-1].append(last)
            i += 1
            continue
        elif c == "|":
            last = None
            i += 1
            continue
        elif c in "^$":
            i += 1
            last = (-1, [])
            frames[-1].append(last)
            continue
        else:
            i += 1
        last = (-1, [])
        frames[-1].append(last)


# --- Pike VM ------------------------------------------------------------------------------------------------

_CHAR, _SPLIT, _JMP, _ASSERT, _MATCH = range(5)
_MAX_REPEAT = 1000  # RE2's repeat count limit
_MAX_PROGRAM = 50_000  # RE2 rejects programs over its memory budget the same way

_CATEGORIES: dict[Any, Callable[[str], bool]] = {
    C.CATEGORY_DIGIT: lambda ch: "0" <= ch <= "9",
    C.CATEGORY_NOT_DIGIT: lambda ch: not ("0" <= ch <= "9"),
    C.CATEGORY_SPACE: lambda ch: ch in "\t\n\v\f\r ",
    C.CATEGORY_NOT_SPACE: lambda ch: ch not in "\t\n\v\f\r ",
    C.CATEGORY_WORD: lambda ch: ch.isascii() and (ch.isalnum() or ch == "_"),
    C.CATEGORY_NOT_WORD: lambda ch: not (ch.isascii() and (ch.isalnum() or ch == "_")),
}


def _is_word(s: str, i: int) -> bool:
    return 0 <= i < len(s) and s[i].isascii() and (s[i].isalnum() or s[i] == "_")


class _Prog:
    def __init__(self, flags: int) -> None:
        self.ins: list[list[Any]] = []
        self.icase = bool(flags & re.IGNORECASE)
        self.dotall = bool(flags & re.DOTALL)
        self.multiline = bool(flags & re.MULTILINE)

    def emit(self, *op: Any) -> int:
        if len(self.ins) >= _MAX_PROGRAM:
            raise _error("expression too large")
        self.ins.append(list(op))
        return len(self.ins) - 1

    def pred(self, test: Callable[[str], bool]) -> Callable[[str], bool]:
        if not self.icase:
            return test
        return lambda ch: test(ch) or test(ch.lower()) or test(ch.upper())

    def compile(self, items: Any) -> None:
        for op, av in items:
            self.node(op, av)

    def node(self, op: Any, av: Any) -> None:
        if op is C.LITERAL:
            c = chr(av)
            self.emit(_CHAR, self.pred(lambda ch: ch == c), None)
        elif op is C.NOT_LITERAL:
            c = chr(av)
            if self.icase:
                self.emit(_CHAR, lambda ch: ch.lower() != c.lower(), None)
            else:
                self.emit(_CHAR, lambda ch: ch != c, None)
        elif op is C.ANY:
            self.emit(_CHAR, (lambda ch: True) if self.dotall else (lambda ch: ch != "\n"), None)
        elif op is C.IN:
            self.emit(
                _CHAR, self.pred(self._charset(av)) if not _negated(av) else self._neg_charset(av), None
            )
        elif op is C.CATEGORY:
            self.emit(_CHAR, _CATEGORIES[av], None)
        elif op is C.SUBPATTERN:
            saved = (self.icase, self.dotall, self.multiline)
            add, delete = av[1], av[2]  # a scoped (?i:...) group's flags
            self.icase = bool(add & re.IGNORECASE) or (self.icase and not delete & re.IGNORECASE)
            self.dotall = bool(add & re.DOTALL) or (self.dotall and not delete & re.DOTALL)
            self.multiline = bool(add & re.MULTILINE) or (self.multiline and not delete & re.MULTILINE)
            self.compile(av[3])
            self.icase, self.dotall, self.multiline = saved
        elif op is C.BRANCH:
            alts = av[1]
            jumps = []
            for k, alt in enumerate(alts):
                if k < len(alts) - 1:
                    split = self.emit(_SPLIT, len(self.ins) + 1, None)
                    self.compile(alt)
                    jumps.append(self.emit(_JMP, None))
                    self.ins[split][2] = len(self.ins)
                else:
                    self.compile(alt)
            for j in jumps:
                self.ins[j][1] = len(self.ins)
        elif op is C.MAX_REPEAT or op is C.MIN_REPEAT:
            lo, hi, sub = av
            greedy = op is C.MAX_REPEAT
            unbounded = hi == C.MAXREPEAT
            if lo > _MAX_REPEAT or (not unbounded and hi > _MAX_REPEAT):
                raise _error("invalid repeat count")
            for _ in range(lo):
                self.compile(sub)
            if unbounded:
                loop = self.emit(_SPLIT, None, None)
                self.compile(sub)
                self.emit(_JMP, loop)
                self._set_split(loop, loop + 1, len(self.ins), greedy)
            else:
                splits = []
                for _ in range(hi - lo):
                    s = self.emit(_SPLIT, None, None)
                    splits.append(s)
                    self.compile(sub)
                end = len(self.ins)
                for s in splits:
                    self._set_split(s, s + 1, end, greedy)
        elif op is C.AT:
            self.emit(_ASSERT, av, None)
        else:
            raise _error(f"unsupported regular expression construct {op}")

    def _set_split(self, at: int, body: int, out: int, greedy: bool) -> None:
        self.ins[at][1], self.ins[at][2] = (body, out) if greedy else (out, body)

    def _charset(self, items: Any) -> Callable[[str], bool]:
        tests: list[Callable[[str], bool]] = []
        chars: set[str] = set()
        for op, av in items:
            if op is C.LITERAL:
                chars.add(chr(av))
            elif op is C.RANGE:
                lo, hi = chr(av[0]), chr(av[1])
                tests.append(_in_range(lo, hi))
            elif op is C.CATEGORY:
                tests.append(_CATEGORIES[av])
            elif op is C.NEGATE:
                continue
            else:
                raise _error(f"unsupported character class item {op}")
        return lambda ch: ch in chars or any(t(ch) for t in tests)

    def _neg_charset(self, items: Any) -> Callable[[str], bool]:
        inner = self.pred(self._charset(items))
        return lambda ch: not inner(ch)


def _in_range(lo: str, hi: str) -> Callable[[str], bool]:
    return lambda ch: lo <= ch <= hi


def _negated(items: Any) -> bool:
    return bool(items) and items[0][0] is C.NEGATE


def _fix(prog: _Prog) -> list[tuple[Any, ...]]:
    """Resolve 'next' pointers: a CHAR/ASSERT falls through to the following instruction."""
    out = []
    for k, ins in enumerate(prog.ins):
        if ins[0] in (_CHAR, _ASSERT) and ins[2] is None:
            ins[2] = k + 1
        out.append(tuple(ins))
    out.append((_MATCH, None, None))
    return out


class PikeRegex:
    """Leftmost-first search (RE2/Go semantics) in O(len(text) * len(program))."""

    def __init__(self, translated: str) -> None:
        parsed = P.parse(translated, re.ASCII)
        prog = _Prog(parsed.state.flags)
        prog.compile(parsed)
        self.multiline = prog.multiline
        self.ins = _fix(prog)

    def _assert(self, kind: Any, s: str, i: int) -> bool:
        n = len(s)
        if kind is C.AT_BEGINNING:
            return i == 0 or (self.multiline and s[i - 1] == "\n")
        if kind is C.AT_BEGINNING_STRING:
            return i == 0
        if kind is C.AT_END:
            return i == n or (self.multiline and s[i] == "\n")
        if kind is C.AT_END_STRING:
            return i == n
        if kind is C.AT_BOUNDARY:
            return _is_word(s, i - 1) != _is_word(s, i)
        if kind is C.AT_NON_BOUNDARY:
            return _is_word(s, i - 1) == _is_word(s, i)
        return False

    def _add(self, lst: list[tuple[int, int]], seen: set[int], pc: int, start: int, s: str, i: int) -> None:
        ins = self.ins
        stack = [pc]
        while stack:
            pc = stack.pop()
            if pc in seen:
                continue
            seen.add(pc)
            op = ins[pc]
            kind = op[0]
            if kind == _JMP:
                stack.append(op[1])
            elif kind == _SPLIT:
                stack.append(op[2])
                stack.append(op[1])
            elif kind == _ASSERT:
                if self._assert(op[1], s, i):
                    stack.append(op[2])
            else:
                lst.append((pc, start))

    def search(self, s: str, pos: int = 0) -> tuple[int, int] | None:
        ins = self.ins
        n = len(s)
        clist: list[tuple[int, int]] = []
        cseen: set[int] = set()
        matched: tuple[int, int] | None = None
        for i in range(pos, n + 1):
            if matched is None:
                self._add(clist, cseen, 0, i, s, i)
            if not clist:
                if matched is not None:
                    break
                continue
            nlist: list[tuple[int, int]] = []
            nseen: set[int] = set()
            ch = s[i] if i < n else ""
            for pc, start in clist:
                op = ins[pc]
                if op[0] == _MATCH:
                    matched = (start, i)
                    break
                if i < n and op[1](ch):
                    self._add(nlist, nseen, op[2], start, s, i + 1)
            clist, cseen = nlist, nseen
        return matched


class Regex:
    """A compiled pattern: `re` when it cannot blow up, the Pike VM otherwise."""

    __slots__ = ("_pike", "_re")

    def __init__(self, pattern: str) -> None:
        translated = _translate(pattern)
        _check_repeats(pattern)
        try:
            parsed = P.parse(translated, re.ASCII)
        except re.error as e:
            raise _error(_re2_message(str(e), pattern)) from None
        self._re: re.Pattern[str] | None = None
        self._pike: PikeRegex | None = None
        if _repeats(parsed) <= 1 and not _repeated_branch(parsed, False):
            self._re = re.compile(translated, re.ASCII)
        else:
            self._pike = PikeRegex(translated)

    def search(self, s: str, pos: int = 0) -> tuple[int, int] | None:
        if self._re is not None:
            m = self._re.search(s, pos)
            return m.span() if m else None
        assert self._pike is not None
        return self._pike.search(s, pos)

    def find_all(self, s: str, limit: int) -> list[str]:
        """Go's FindAllString: empty matches abutting the previous match are dropped."""
        out: list[str] = []
        pos = 0
        prev_end = -1
        n = len(s)
        while pos <= n and (limit < 0 or len(out) < limit):
            m = self.search(s, pos)
            if m is None:
                break
            a, b = m
            if a == b:
                if b != prev_end:
                    out.append("")
                pos = b + 1
            else:
                out.append(s[a:b])
                pos = b
            prev_end = b
        return out


def _repeats(items: Any) -> int:
    """Number of repetition operators that can repeat more than once (nesting counts each level)."""
    count = 0
    for op, av in items:
        if op is C.MAX_REPEAT or op is C.MIN_REPEAT:
            if av[1] > 1:
                count += 1
            count += _repeats(av[2])
        elif op is C.SUBPATTERN:
            count += _repeats(av[3])
        elif op is C.BRANCH:
            count += sum(_repeats(alt) for alt in av[1])
    return count


def _repeated_branch(items: Any, inside: bool) -> bool:
    """An alternation under a repetition ((a|aa)*) backtracks exponentially in `re`."""
    for op, av in items:
        if op is C.MAX_REPEAT or op is C.MIN_REPEAT:
            if _repeated_branch(av[2], inside or av[1] > 1):
                return True
        elif op is C.SUBPATTERN:
            if _repeated_branch(av[3], inside):
                return True
        elif op is C.BRANCH:
            if inside:
                return True
            if any(_repeated_branch(alt, inside) for alt in av[1]):
                return True
    return False


_CACHE: dict[str, Regex] = {}


def compile_regex(pattern: str) -> Regex:
    r = _CACHE.get(pattern)
    if r is None:
        r = Regex(pattern)
        if len(_CACHE) > 1024:
            _CACHE.clear()
        _CACHE[pattern] = r
    return r
