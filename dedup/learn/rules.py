"""URL rewrite rules of the classic kinds, and what a pair of duplicate URLs proposes.

A rule maps a canonical key (``dedup.url.canonical``: scheme and host lowercased,
query sorted) to another key of the same content. The kinds are the ones the
literature on DUST ("different URLs with similar text": Bar-Yossef, Keidar,
Schonfeld, WWW 2007; Dasgupta, Kumar, Sasturkar, KDD 2008; Koppula et al., WSDM
2010) finds on real sites:

- ``drop_params``: query parameters whose values never change the content
  (session ids, referral tags, sort orders, printer views);
- ``default_param``: a parameter with the value that equals its absence (``?page=1``);
- ``strip_suffix``: a directory's index file (``/a/index.html`` = ``/a/``);
- ``trailing_slash``: ``/a/`` = ``/a``;
- ``lower_case``: paths the server reads case-insensitively;
- ``ignore_segment``: a path segment whose value does not matter (a slug after an
  id, a session id in the path), scoped by the literal segments before it and the
  shape of its value (``segment_class``), so ``/item/7/any-slug`` is one rule and
  ``/about`` vs ``/contact`` is not the same one;
- ``path_param``: a ``;name=value`` path parameter (``;jsessionid=...``);
- ``drop_segment``: a literal path segment that makes another view of the same
  page (``/print/a/b`` = ``/a/b``, ``/amp/...``), after given head segments.

Rules apply in a fixed order of kinds (``ORDER``), each to what the previous made,
so a host's rules compose the same way for every URL. A rule says what it did not
change by returning its input object unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

__all__ = ["ORDER", "Rule", "UrlParts", "apply_rules", "decompose", "parse_key", "pattern_of",
           "propose",
           "rule_from_spec", "segment_class", "shape_of"]

# order of application (and of listing)
ORDER = ("path_param", "lower_case", "drop_segment", "strip_suffix", "trailing_slash",
         "ignore_segment", "drop_params", "default_param")
_RANK = {k: i for i, k in enumerate(ORDER)}


class UrlParts(NamedTuple):
    """A canonical key cut where rules work: ``prefix`` (``scheme://authority``),
    ``path`` (from its ``/``) and the query's ``(name, value)`` pairs in key order
    (value None: a name without ``=``). A tuple: every fetched page's key is cut
    (``parse_key``), and a tuple is made in a third of a frozen dataclass's time."""

    prefix: str
    path: str
    params: tuple[tuple[str, str | None], ...]

    def key(self) -> str:
        if not self.params:
            return self.prefix + self.path
        query = "&".join(n if v is None else f"{n}={v}" for n, v in self.params)
        return f"{self.prefix}{self.path}?{query}"

    def segments(self) -> list[str]:
        """The path's segments; a trailing slash is a last empty segment."""
        return self.path[1:].split("/")


_new_parts = tuple.__new__  # UrlParts(...) without its Python-level __new__


def parse_key(key: str) -> UrlParts | None:
    """A canonical http(s) key's parts, None for anything else (a rule key)."""
    start = key.find("://")
    if start < 0 or not key.startswith(("http://", "https://")):
        return None
    slash = key.find("/", start + 3)
    if slash < 0:
        return UrlParts(key, "/", ())
    path, _, query = key[slash:].partition("?")
    if not query:
        return _new_parts(UrlParts, (key[:slash], path, ()))
    params = []
    for p in query.split("&"):
        name, eq, value = p.partition("=")
        params.append((name, value if eq else None))
    return _new_parts(UrlParts, (key[:slash], path, tuple(params)))


_NUM = re.compile(r"[0-9]+")
_HEX = re.compile(r"[0-9a-fA-F]{8,}")
_TOKEN = re.compile(r"[A-Za-z0-9_.~()!$'*+,=:@-]{6,}")
_SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)+")
_WORD = re.compile(r"[A-Za-z]+")


@lru_cache(maxsize=1 << 16)  # a site's segments repeat: its sections, its words
def segment_class(value: str) -> str:
    """The shape of a path segment's value: ``hex`` (8+ hex digits: a session id
    drawn at random is all digits or all letters now and then, and keeps its
    class), ``num``, ``token`` (6+ URL characters with a digit and a letter),
    ``slug`` (lowercase words joined by ``-``), ``word``, or ``other``."""
    if _HEX.fullmatch(value):
        return "hex"
    if _NUM.fullmatch(value):
        return "num"
    digit = any(c.isdigit() for c in value)
    if digit and _TOKEN.fullmatch(value) and any(c.isalpha() for c in value):
        return "token"
    if _SLUG.fullmatch(value):
        return "slug"
    if _WORD.fullmatch(value):
        return "word"
    return "other"


_ID_CLASSES = ("num", "hex", "token")


def _head(segments: list[str]) -> tuple[str, ...]:
    """Segments before an ignored one, ids (numbers, hex, tokens) as ``*``."""
    return tuple("*" if segment_class(s) in _ID_CLASSES else s for s in segments)


def _under(head: tuple[str, ...], segments: list[str]) -> bool:
    """Whether ``segments`` are under a rule's ``head``: its literal segments equal, its
    ``*`` any segment (an id, or, first in a head, any section)."""
    return len(head) == len(segments) and all(
        h == "*" or h == s for h, s in zip(head, _head(segments), strict=True))


def _path_params(segment: str) -> tuple[str, dict[str, str]]:
    """A segment without its ``;name=value`` parameters, and those parameters."""
    base, *params = segment.split(";")
    return base, {p.partition("=")[0]: p.partition("=")[2] for p in params}


@dataclass(frozen=True, slots=True)
class Rule:
    """One rewrite rule; ``kind`` is one of ``ORDER``, the other fields are its
    arguments (unused ones empty)."""

    kind: str
    names: tuple[str, ...] = ()  # drop_params; default_param, path_param: one name
    value: str | None = None  # default_param's value (None: a name without "=")
    suffix: str = ""  # strip_suffix; drop_segment: the segment dropped
    head: tuple[str, ...] = ()  # ignore_segment, drop_segment: the segments before (ids "*")
    pos: int = 0  # ignore_segment, drop_segment: which segment
    shape: str = ""  # ignore_segment: segment_class of the ignored values

    def apply(self, u: UrlParts) -> UrlParts:
        """``u`` rewritten, or ``u`` itself when the rule does not apply to it."""
        kind = self.kind
        if kind == "drop_params":
            names = self.names
            if not any(n in names for n, _ in u.params):
                return u
            return UrlParts(u.prefix, u.path, tuple(p for p in u.params if p[0] not in names))
        if kind == "default_param":
            pair = (self.names[0], self.value)
            if pair not in u.params:
                return u
            return UrlParts(u.prefix, u.path, tuple(p for p in u.params if p != pair))
        if kind == "trailing_slash":
            if len(u.path) > 1 and u.path.endswith("/"):
                return UrlParts(u.prefix, u.path.rstrip("/") or "/", u.params)
            return u
        if kind == "lower_case":
            low = u.path.lower()
            return u if low == u.path else UrlParts(u.prefix, low, u.params)
        if kind == "strip_suffix":
            tail = "/" + self.suffix
            if u.path.endswith(tail):
                return UrlParts(u.prefix, u.path[:-len(self.suffix)], u.params)
            return u
        if kind == "path_param":
            if ";" not in u.path:
                return u
            name = self.names[0]
            segs = []
            changed = False
            for s in u.segments():
                base, params = _path_params(s)
                if name in params:
                    changed = True
                    rest = [f"{k}={v}" if v else k for k, v in params.items() if k != name]
                    s = ";".join([base, *rest])
                segs.append(s)
            return UrlParts(u.prefix, "/" + "/".join(segs), u.params) if changed else u
        if kind == "drop_segment":
            segs = u.segments()
            pos = self.pos
            if len(segs) <= pos + 1 or not _under(self.head, segs[:pos]):
                return u
            changed = False
            # a segment after it must remain (/print/ alone is not a view of /); a
            # shape (a relative-link loop: /help/a/b/c/ is /help/c/) drops all it can
            while len(segs) > pos + 1 and segs[pos + 1] and (
                    segs[pos] == self.suffix if self.suffix
                    else segs[pos] and segment_class(segs[pos]) == self.shape):
                del segs[pos]
                changed = True
                if self.suffix:
                    break
            return UrlParts(u.prefix, "/" + "/".join(segs), u.params) if changed else u
        if kind == "ignore_segment":
            segs = u.segments()
            pos = self.pos
            # the segment must exist and not be a trailing slash's empty one
            if len(segs) <= pos or segs[pos] in ("", "*") or segment_class(segs[pos]) != \
                    self.shape or not _under(self.head, segs[:pos]):
                return u
            if pos == len(segs) - 1:  # a last one (a slug) goes: /item/7/x is /item/7
                del segs[pos]
            else:
                segs[pos] = "*"
            return UrlParts(u.prefix, "/" + "/".join(segs), u.params)
        raise ValueError(f"unknown rule kind {kind!r}")

    def spec(self) -> dict[str, Any]:
        """The rule as JSON data (``rule_from_spec`` reads it back)."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.kind in ("drop_params", "default_param", "path_param"):
            out["names"] = list(self.names)
        if self.kind == "default_param":
            out["value"] = self.value
        if self.kind in ("strip_suffix", "drop_segment"):
            out["suffix"] = self.suffix
        if self.kind in ("ignore_segment", "drop_segment"):
            out.update(head=list(self.head), pos=self.pos, shape=self.shape)
        return out

    def describe(self) -> str:
        """One line a user reads: what the rule treats as the same content."""
        kind = self.kind
        if kind == "drop_params":
            return "query parameter" + ("s " if len(self.names) > 1 else " ") + \
                ", ".join(self.names) + " ignored"
        if kind == "default_param":
            v = self.names[0] if self.value is None else f"{self.names[0]}={self.value}"
            return f"?{v} same as without it"
        if kind == "trailing_slash":
            return "/path/ same as /path"
        if kind == "lower_case":
            return "paths case-insensitive"
        if kind == "strip_suffix":
            return f"/dir/{self.suffix} same as /dir/"
        if kind == "path_param":
            return f";{self.names[0]}= path parameter ignored"
        head = "/".join(self.head)
        if kind == "drop_segment" and self.suffix:
            return f"/{head + '/' if head else ''}{self.suffix}/... same as without {self.suffix}/"
        if kind == "drop_segment":
            return (f"/{head}/<{self.shape}>/.../x same as /{head}/x (segments after "
                    f"{self.pos} but the last dropped)")
        return f"segment {self.pos + 1} ignored in /{head + '/' if head else ''}<{self.shape}>/..."

    def rank(self) -> int:
        return _RANK[self.kind]


def rule_from_spec(spec: dict[str, Any]) -> Rule:
    """The rule of ``Rule.spec`` data; ValueError for anything else."""
    kind = spec.get("kind")
    if kind not in _RANK:
        raise ValueError(f"unknown rule kind {kind!r}")
    return Rule(kind, names=tuple(spec.get("names", ())), value=spec.get("value"),
                suffix=spec.get("suffix", ""), head=tuple(spec.get("head", ())),
                pos=int(spec.get("pos", 0)), shape=spec.get("shape", ""))


def apply_rules(rules: list[tuple[int, Rule]], u: UrlParts) -> tuple[UrlParts, tuple[int, ...]]:
    """``u`` through ``rules`` (``(id, rule)`` in application order): the result and
    the ids of the rules that changed it."""
    applied: list[int] = []
    for rid, rule in rules:
        v = rule.apply(u)
        if v is not u:
            applied.append(rid)
            u = v
    return u, tuple(applied)


def _param_values(params: tuple[tuple[str, str | None], ...]) -> dict[str, list[str | None]]:
    out: dict[str, list[str | None]] = {}
    for n, v in params:
        out.setdefault(n, []).append(v)
    return out


def propose(a: UrlParts, b: UrlParts) -> list[Rule]:
    """The rules under which two keys of the same content would be one: one kind of
    difference at a time (a pair differing in two ways proposes nothing; once one
    way is a rule, the pair's rewritten keys differ in one)."""
    if a.prefix != b.prefix or a == b:
        return []
    if a.path == b.path:
        va, vb = _param_values(a.params), _param_values(b.params)
        both = sorted(n for n in va.keys() & vb.keys() if va[n] != vb[n])
        one = sorted(va.keys() ^ vb.keys())
        if both:  # values that differ: ignored together (a parameter only one side has
            # is learned on its own, from pairs where it is the one difference)
            return [Rule("drop_params", names=tuple(both))]
        if len(one) != 1:
            return []
        n = one[0]
        out = [Rule("drop_params", names=(n,))]
        values = va.get(n) or vb.get(n) or []
        if len(values) == 1:
            out.append(Rule("default_param", names=(n,), value=values[0]))
        return out
    if a.params != b.params:
        return []
    pa, pb = a.path, b.path
    if pa.lower() == pb.lower():
        return [Rule("lower_case")]
    if pa.rstrip("/") == pb.rstrip("/"):
        return [Rule("trailing_slash")]
    out = []
    for x, y in ((pa, pb), (pb, pa)):
        base = y if y.endswith("/") else y + "/"
        last = x[len(base):]
        if x.startswith(base) and "/" not in last and last:
            if "." in last or y.endswith("/"):  # an index file of a directory
                out.append(Rule("strip_suffix", suffix=last))
            elif segment_class(last) in ("slug", "word", "token"):  # /item/7/slug = /item/7
                segs = x[1:].split("/")
                out += _ignored(_head(segs[:-1]), len(segs) - 1, segment_class(last))
    if out:
        return out
    sa, sb = a.segments(), b.segments()
    if abs(len(sa) - len(sb)) == 1:  # a literal segment more: another view of the page
        long, short = (sa, sb) if len(sa) > len(sb) else (sb, sa)
        for i, seg in enumerate(long[:-1]):
            if long[:i] + long[i + 1:] == short:
                shape = segment_class(seg) if seg else ""
                if shape not in ("word", "slug"):
                    break
                head = _head(long[:i])
                out = [Rule("drop_segment", suffix=seg, head=head, pos=i)]
                # a relative-link loop, /help/a/b/ = /help/b/: under a head, the segment
                # dropped is followed by the last one only, of the same shape
                rest = [x for x in long[i + 1:] if x]
                if head and len(rest) == 1 and segment_class(rest[0]) == shape:
                    out.append(Rule("drop_segment", head=head, pos=i, shape=shape))
                return out
        return []
    if len(sa) != len(sb):
        return []
    diffs = [i for i in range(len(sa)) if sa[i] != sb[i]]
    if len(diffs) != 1:
        return []
    i = diffs[0]
    (ba, qa), (bb, qb) = _path_params(sa[i]), _path_params(sb[i])
    if ba == bb and (qa or qb):
        names = sorted(n for n in qa.keys() | qb.keys() if qa.get(n) != qb.get(n))
        return [Rule("path_param", names=(n,)) for n in names] if len(names) == 1 else []
    shape = segment_class(sa[i])
    if not sa[i] or not sb[i] or shape != segment_class(sb[i]):
        return []
    return _ignored(_head(sa[:i]), i, shape)


_CASE, _SLASH = Rule("lower_case"), Rule("trailing_slash")


def decompose(a: UrlParts, b: UrlParts) -> list[list[Rule]]:
    """Two keys of the same content that differ in several ways (``propose`` gives
    nothing for them): the differences one by one, each as the rules that would
    explain it alone (``[[drop ref], [lower_case], [ignore slug, ignore slug under any
    section]]``), or ``[]`` if one of them is no difference a rule explains. Each
    parameter whose value differs is one difference, then the case of the path, then
    its trailing slash, then what ``propose`` finds in what is left. The pair is
    evidence for each of them (``RuleLearner``): a host whose links mix aliases (a
    session id, a referral tag, a slug and the case at once) teaches its rules
    together, not one after the other."""
    if a.prefix != b.prefix or a == b:
        return []
    out: list[list[Rule]] = []
    va, vb = _param_values(a.params), _param_values(b.params)
    for n in sorted(n for n in va.keys() | vb.keys() if va.get(n) != vb.get(n)):
        rule = Rule("drop_params", names=(n,))
        out.append([rule])
        a, b = rule.apply(a), rule.apply(b)
    if _case_differs(a.path, b.path):
        out.append([_CASE])
        a, b = _CASE.apply(a), _CASE.apply(b)
    if a.path != b.path and (len(a.path) > 1 and a.path.endswith("/")) != (
            len(b.path) > 1 and b.path.endswith("/")):
        out.append([_SLASH])
        a, b = _SLASH.apply(a), _SLASH.apply(b)
    if a != b:
        rest = propose(a, b)
        if not rest:
            return []
        out.append(rest)
    return out if len(out) >= 2 else []


def _case_differs(pa: str, pb: str) -> bool:
    """Whether a segment of one path is the other's in another case."""
    sa, sb = pa.rstrip("/").split("/"), pb.rstrip("/").split("/")
    return len(sa) == len(sb) and any(x != y and x.lower() == y.lower()
                                      for x, y in zip(sa, sb, strict=True))


def _ignored(head: tuple[str, ...], pos: int, shape: str) -> list[Rule]:
    """``ignore_segment`` under ``head``, and under any first segment when the head is a
    section and an id (/news/7/x, /sport/9/y: the sections' slugs are one rule)."""
    out = [Rule("ignore_segment", head=head, pos=pos, shape=shape)]
    if len(head) >= 2 and head[0] != "*":
        out.append(Rule("ignore_segment", head=("*", *head[1:]), pos=pos, shape=shape))
    return out


def pattern_of(key: str) -> str:
    """A key's URL pattern: its first path segment (``*`` if an id), a ``/*`` for each
    further segment (path parameters left out) and its query's parameter names,
    sorted: ``/calendar/*/*``, ``/shop/*/?color&size``, ``/news/*/*?lang`` (a
    trailing slash as ``/``). The depth keeps a section's listings, articles and a
    relative-link loop's levels apart; the parameter names keep a page's views
    apart. A segment a rule ignored (``*`` in a rewritten key: a session id in the
    path, a slug) is left out, and a first segment that only leads to one or to an
    opaque hex token, so ``/s/*/calendar/2026/05`` and ``/s/0ddb5e66/calendar/2026/05``
    are ``/calendar/*/*``.
    (Once a page at commit: cut by hand, not through ``parse_key``.)"""
    start = key.find("://")
    if start < 0 or not key.startswith(("http://", "https://")):
        return "?"
    slash = key.find("/", start + 3)
    if slash < 0:
        return "/"
    path, _, query = key[slash + 1:].partition("?")
    segs = path.split("/")
    # a first segment that only leads to a session-like one (/s/SESSION/...: ignored by
    # a rule, "*", or before the rule an opaque hex token) is no part of the pattern,
    # the same before and after the rule (a budget's counts must not move mid-crawl)
    if len(segs) > 2 and (segs[1] == "*" or segment_class(segs[1].split(";", 1)[0]) == "hex"):
        segs = segs[2:]
    if "*" in segs and len(segs) > 1:  # nor a segment a rule ignores
        segs = [s for s in segs if s != "*"] or [""]
    params = ";" in path
    first = segs[0].split(";", 1)[0] if params else segs[0]
    if first and segment_class(first) in _ID_CLASSES:
        first = "*"
    empty = 0 if params else segs.count("") - (not segs[0])
    if empty == 0 and not params:  # the usual key: every further segment a "/*"
        rest = "/*" * (len(segs) - 1)
    elif empty == 1 and not segs[-1] and len(segs) > 1:  # ... and a trailing slash
        rest = "/*" * (len(segs) - 2) + "/"
    else:
        rest = "".join("/*" if s.split(";", 1)[0] else "/" for s in segs[1:])
    if not query:
        return f"/{first}{rest}"
    names = sorted({p.partition("=")[0] for p in query.split("&")})
    return f"/{first}{rest}?{'&'.join(names)}"


def shape_of(key: str) -> str:
    """A key's path shape: the first segment as it is, each further one as its
    ``segment_class``: ``/docs/<slug>``, ``/news/<num>/<slug>``, ``/docs/``."""
    parts = parse_key(key)
    if parts is None:
        return "?"
    segs = [s.split(";", 1)[0] for s in parts.path[1:].split("/")]
    first = "<id>" if segs[0] and segment_class(segs[0]) in _ID_CLASSES else segs[0]
    return f"/{first}" + "".join(f"/<{segment_class(s)}>" if s else "/" for s in segs[1:])
