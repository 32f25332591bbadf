"""A deterministic multi-host web site whose *different* URLs carry the *same* content.

Why: issue 39 asks the crawler to learn which URLs of a host are duplicates of
one another (session ids, parameters that change nothing, path aliases, printer
views, calendars, facets, relative-link loops) and to stop fetching them, without
ever dropping a URL whose content is new. Testing and measuring that needs a site
whose answer is known: here every page is a pure function of (seed, host, node),
and the ground truth (the distinct content pages reachable from the seeds, and
for any URL the content it returns) is computed from the same generator that
renders the pages, never by crawling.

The model. Each host is a set of *nodes*: a content page (its content id is the
node id, e.g. ``h2:item:news:1017``) or a trap page (an empty calendar month, a
facet combination with no results: served, linked, but no content of its own).
``Site.resolve(url)`` is the server's router: it maps any URL a host serves to
its node and template (the normal page or a printer view), or to a 404. Links are
written in the page with the spellings the host's patterns allow; the ground
truth follows them through the router, from the home pages (the seeds).

Patterns (``PATTERNS``), each switched on per host (``HostSpec.patterns``):
duplicates under session ids in the query, the path prefix or ``;jsessionid=``
(a fresh id on every response, as a cookie-less crawler sees); ignored sort and
referral parameters, ``?page=1``; printer views; ``index.html``, trailing slashes,
case-insensitive paths and ignored slugs; an infinite calendar; faceted
navigation; relative-link loops; and per-response noise (timestamps, ad ids, a
rotating "related" box) so that exact digests of duplicates differ. And the
tempting wrong rules: ``?lang=`` that translates the docs but changes nothing
elsewhere, ``?page=`` that pages listings but not articles, a case-sensitive
wiki with articles whose titles differ only in case, and a guides section whose
slug-like last segment does change the page.

    site = build(seed=1, pages=300)                      # the six default hosts
    site = build(seed=1, hosts=[{"print_view"}], pages=100)   # one pattern, one host
    async with site.serve() as running:                  # real aiohttp.web servers
        ... crawl running.seeds ...
        running.found()          # content ids served with a 200
        running.fetches()        # requests the hosts answered
    site.truth                   # content ids of the distinct pages reachable

Hosts are distinct ports of 127.0.0.1, or one port of several 127.0.0.x
addresses (``serve(ips=[...])``). Sizes: tests use ~100-300 pages, the benchmark
(bench/dup_bench.py) ~3,000 over six hosts.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import random
import re
from collections import Counter, deque
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from html import escape
from urllib.parse import parse_qsl, unquote, urlencode, urljoin, urlsplit

from aiohttp import web

__all__ = ["DEFAULT_HOSTS", "PATTERNS", "Host", "HostLog", "HostSpec", "Node", "RunningDupSite",
           "Served", "Site", "build"]

PATTERNS: dict[str, str] = {
    # session ids: a fresh value in every internal link of every response
    "sid_query": "?sid=<id> on every internal link, a new id on every response",
    "sid_path": "/s/<id>/ before every root-relative link, a new id on every response",
    "jsessionid": ";jsessionid=<id> after every internal link's path, new on every response",
    # parameters that never change content
    "sort_param": "links carry ?sort=newest|oldest|popular, which the server ignores",
    "ref_param": "links carry ?ref=nav|footer|list|related|home, which the server ignores",
    "default_param": "listing links spell out defaults: ?page=1 (first page), "
                     "?per_page=10 (the page size)",
    "print_view": "articles link to a printer view (?print=1 or /print/...): same text, "
                  "another template (a near-duplicate)",
    # path aliases
    "index_html": "/dir/index.html is /dir/",
    "trailing_slash": "/dir is /dir/ and /a/b/ is /a/b",
    "case_alias": "paths are case-insensitive (/News/ is /news/)",
    "ignored_slug": "/news/123/any-slug (or none) is article 123",
    # URL spaces without end, or wide and shallow
    "calendar": "/calendar/YYYY/MM links to the next and previous month and year "
                "forever; months without events are near-identical trap pages",
    "facets": "/shop/CAT/?color=&size=&material= combinations: a few listings, "
              "the rest of the combinations equal to one of them or empty",
    "rel_loop": "help pages link to 'topic/' relatively: /help/a/b/c/ is topic c, "
                "one level deeper on every click",
    "noise": "a timestamp, an ad id and a rotating 'related' box differ on every "
             "response, so duplicates are near-identical, never byte-identical",
    # tempting wrong rules: a learner must NOT learn these
    "lang_param": "every page links ?lang=en|de|fr: the docs are translated (lang changes "
                  "them), other pages ignore it",
    "page_param": "articles link ?page=2 (their comments; ignored) while ?page=N "
                  "changes listings",
    "case_distinct": "a case-sensitive wiki where /wiki/Mercury and /wiki/MERCURY are "
                     "distinct articles",
    "slug_distinct": "/guides/ID/CHAPTER: the slug-like last segment changes the page "
                     "(unlike articles' slugs)",
}
_SESSIONS = ("sid_query", "sid_path", "jsessionid")


@dataclass(frozen=True, slots=True)
class HostSpec:
    """One host: which patterns it has, and about how many content pages
    (None: an equal share of ``build``'s ``pages``)."""

    patterns: frozenset[str] = frozenset()
    pages: int | None = None
    name: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "patterns", frozenset(self.patterns))
        unknown = self.patterns - PATTERNS.keys()
        if unknown:
            raise ValueError(f"unknown patterns {sorted(unknown)}; known: {sorted(PATTERNS)}")
        if {"case_alias", "case_distinct"} <= self.patterns:
            raise ValueError("case_alias and case_distinct contradict each other on one host")
        if self.pages is not None and self.pages < 20:
            raise ValueError(f"a host needs at least 20 pages, not {self.pages}")


# The benchmark's six hosts: every pattern somewhere, and the tempting wrong rules
# on hosts that also have the right ones next to them.
DEFAULT_HOSTS: tuple[HostSpec, ...] = (
    HostSpec(frozenset({"sid_query", "sort_param", "ref_param", "default_param", "print_view",
                        "page_param", "noise"}), name="Northwind Gazette"),
    HostSpec(frozenset({"facets", "case_alias", "trailing_slash", "ignored_slug", "ref_param",
                        "noise"}), name="Harbor Outfitters"),
    HostSpec(frozenset({"sid_path", "index_html", "calendar", "print_view", "noise"}),
             name="Civic Portal"),
    HostSpec(frozenset({"lang_param", "rel_loop", "index_html", "trailing_slash",
                        "default_param", "noise"}), name="Lantern Docs"),
    HostSpec(frozenset({"case_distinct", "slug_distinct", "ignored_slug", "sort_param",
                        "print_view", "noise"}), name="Open Atlas"),
    HostSpec(frozenset({"jsessionid", "calendar", "ref_param", "trailing_slash", "noise"}),
             name="Riverside Events"),
)


@dataclass(frozen=True, slots=True)
class Node:
    """A page of a host: content (``id`` is its content id) or a trap page."""

    id: str
    kind: str
    path: str  # canonical path
    query: tuple[tuple[str, str], ...]  # canonical query
    title: str
    content: bool = True
    expand: bool = True  # the ground truth follows its links (False: far end of a trap)

    @property
    def target(self) -> str:
        return self.path + ("?" + urlencode(self.query) if self.query else "")


@dataclass(frozen=True, slots=True)
class Served:
    """What a URL gets: status, the node (None: 404), printer view or not."""

    status: int
    host: int | None = None
    node: Node | None = None
    printed: bool = False

    @property
    def content(self) -> str | None:
        return self.node.id if self.node is not None and self.node.content else None


_NOT_FOUND = Served(404)

# -- words ------------------------------------------------------------------------------------


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_WORDS = _words("""
able about above accept across action active actual address advance afford after again
against agency agent agree ahead allow almost alone along already also always amount
analysis ancient animal annual answer anyone appear apply approach area argue around arrive
article artist attack attempt attention author available avoid away balance bank base
basic beach beautiful become before begin behavior behind believe benefit better between
beyond bird blood board boat body book border bottom branch bread break bridge brief
bring brother budget build building business button camera campaign capital career
careful carry case catch cause cell center central century certain chair challenge chance
change chapter charge check child choice choose church citizen city civil claim class
clear climate close coach coast cold collect college color column common community
company compare concern condition conference consider contain continue control cost
country couple course court cover create credit crowd culture current customer cycle
daily damage dark data daughter deal debate decade decide deep defense degree deliver
demand design detail develop device difference dinner direction discover discuss disease
distance doctor door double dream drive during early earth east economy edge education
effect effort eight either election energy engine enjoy enough enter entire environment
equal escape evening event evidence exact example expect experience expert explain
factor fail fair fall family farm fast father feature federal field figure film final
finance finger finish fire firm first fish floor flower focus follow food force foreign
forest forget form forward free friend front fruit full function future game garden
general gift glass goal good government great green ground group grow growth guard guess
habit hair half hand happen harbor health hear heart heat heavy help history hold home
hope horse hospital hotel hour house huge human idea image impact improve include income
increase industry inside instead interest island issue item journey judge keep kitchen
knowledge land language large later launch leader learn leave legal lesson letter level
library light limit line list listen little local long machine main maintain major
manage market material matter measure media medical meeting member memory message metal
method middle might mind minute mission model modern moment money month morning mother
motion mountain move movie music nation natural nature near network never news night
north note notice number object ocean offer office often open order organize other
owner page paint paper parent party pass past patient pattern peace people perform
period person picture piece place plan plant player point police policy popular
position power practice prepare present press pressure price private problem process
produce program project property protect prove public purpose quality question quick
quiet radio rain range rate reach read ready reason receive record region remain remember
report research resource respond rest result return reveal rich river road rock role
room round rule safe sample save scene school science score season seat second section
security seek sense series serve service seven shape share shore short show side sign
simple single sister size skill small smile social society soldier solution source
south space speak special speech spend sport spring staff stage standard start state
station step stock stone store story strategy street strong student study style subject
success summer supply support surface system table talent task teach team technology
test theory thing third thought three time today together tonight total touch toward
town trade training travel treat tree trial trip trouble truth turn type under unit
until upon usual valley value various version view village visit voice wait walk wall
watch water wave weather week weight west wheel while white whole wide wind window
winter wish without woman wonder word work world worry write year young
""")

_WORDS_DE = _words("""
aber alle allein alt andere arbeit auch auf aus bald bauen beginnen bei beide berg bild
bleiben brief bringen buch dach dank denken dorf drei dunkel eben ecke ende erde erst
essen fahren fallen farbe feld fenster fest finden fluss frage frei freund frieden
garten geben gehen geld genau gern glas gleich gross gut haben halten hand haus heute
hilfe hoch holen hund immer jahr jetzt kalt kaufen kennen kind klein kommen kopf kraft
kurz land lang laufen leben leicht lernen lesen licht liegen machen markt meer mensch
morgen nacht name neu nehmen oft ort papier platz rat recht regen reise ruhig sache
sagen schnell schreiben sehen sonne spielen sprache stadt stark stein stunde suchen tag
teil tisch tragen turm uhr ufer voll wald wasser weg welt wenig wetter wind wissen wort
zeit zimmer zug
""")

_WORDS_FR = _words("""
abord accord aider aimer aller ami an appeler apprendre arbre argent arriver attendre
avenir avoir besoin bien blanc bois bon bout bras bruit cadre calme campagne carte cause
chaque chemin cher chose ciel clair coeur comprendre connaitre corps cote coup courir
croire demain devenir dire donner dormir droit eau ecole ecrire enfant ensemble entendre
entrer envie espace esprit etat ete etude faire famille femme fenetre fin fleuve fois
force forme fort frere froid gens grand groupe guerre heure histoire homme idee image
jardin jeune jour juste lettre libre lieu livre loin long lumiere main maison matin
mer mesure mettre mois monde montagne mot nature neige noir nouveau nuit oeil ombre
ordre page pain parler partir passer pays pensee perdre petit peur pierre place plaisir
porte prendre prix quitter raison regarder rendre reste retour rue saison savoir
semaine sentir soir soleil sortir suivre table temps terre tete tirer tour travail
trouver vent verre vie ville voir voix vrai
""")

_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")
_SECTIONS = ("news", "sport", "culture", "science", "travel", "business", "opinion", "food")
_STATICS = ("about", "contact", "privacy")
_SORTS = ("newest", "oldest", "popular")
_COLORS = ("red", "blue", "green")
_SIZES = ("s", "m", "l")
_MATERIALS = {"red": "cotton", "blue": "wool", "green": "linen"}
_COLOR_OF = {m: c for c, m in _MATERIALS.items()}
_CATEGORIES = ("shirts", "jackets", "shoes", "bags", "hats", "scarves", "gloves", "socks")
_TOPICS = ("install", "configure", "upgrade", "backup", "accounts", "billing", "privacy",
           "faq", "errors", "support")
_LANGS = ("en", "de", "fr")
_CHAPTERS = ("overview", "installation", "configuration", "troubleshooting", "reference")
_NAMES = ("Northwind Gazette", "Harbor Outfitters", "Civic Portal", "Lantern Docs",
          "Open Atlas", "Riverside Events", "Meridian Times", "Copper Lane")
NOW = (2026, 11)  # the calendar's current month
WINDOW = 6  # months with events: NOW - WINDOW .. NOW + WINDOW
PER_PAGE = 10  # items on a listing page
ALIAS_RATE = 0.35  # share of links written in an alias form where the host has one


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def _title(rng: random.Random, n: int = 0) -> str:
    words = [rng.choice(_WORDS) for _ in range(n or rng.randint(3, 6))]
    return " ".join(w.capitalize() if i == 0 or len(w) > 3 else w for i, w in enumerate(words))


def _sentence(rng: random.Random, words: Sequence[str]) -> str:
    s = " ".join(rng.choice(words) for _ in range(rng.randint(8, 18)))
    return s[0].upper() + s[1:] + "."


def _paragraphs(rng: random.Random, n_words: int, words: Sequence[str] = _WORDS) -> list[str]:
    out, count = [], 0
    while count < n_words:
        para = [_sentence(rng, words) for _ in range(rng.randint(3, 6))]
        count += sum(len(s.split()) for s in para)
        out.append(" ".join(para))
    return out


def _month_add(y: int, m: int, k: int) -> tuple[int, int]:
    i = y * 12 + (m - 1) + k
    return i // 12, i % 12 + 1


# -- one host -------------------------------------------------------------------------------

_ITEM = re.compile(r"/([a-z]+)/(\d+)(?:/([^/]*))?")
_MONTH = re.compile(r"/calendar/(\d{4})/(\d{2})")


@dataclass(slots=True)
class _Article:
    node: Node
    base: str  # "/news/1017"
    slug: str
    alt_slugs: tuple[str, ...]
    section: str


class Host:
    """The pages of one host: nodes, router, links and rendering."""

    def __init__(self, seed: int, h: int, spec: HostSpec, pages: int) -> None:
        self.seed, self.h, self.spec = seed, h, spec
        self.p = spec.patterns
        self.name = spec.name or _NAMES[h % len(_NAMES)]
        rng = random.Random(f"dupsite/{seed}/{h}")
        self.print_form = "query" if rng.random() < 0.5 else "path"
        self.nodes: dict[str, Node] = {}
        self.by_path: dict[str, str] = {}  # canonical path (no query) -> node id
        self.articles: dict[tuple[str, int], _Article] = {}  # (prefix, number) -> article
        self.article_of: dict[str, _Article] = {}
        self.sections: dict[str, list[str]] = {}  # section -> article node ids
        self.pages_of: dict[str, int] = {}  # section -> listing pages
        self.home = self._add("home", "/", (), "Front page")
        for name in _STATICS:
            self._add(f"static:{name}", f"/{name}/", (), name.capitalize())
        budget = pages - 1 - len(_STATICS)
        next_id = 1000 + 1000 * h
        if "calendar" in self.p:
            budget -= self._plan_calendar(rng, max(4, pages // 10))
        if "facets" in self.p:
            cats = max(2, min(len(_CATEGORIES), pages // 100))
            next_id, used = self._plan_shop(rng, cats, next_id)
            budget -= used
        if "rel_loop" in self.p:
            self._add("help:index", "/help/", (), "Help")
            for t in _TOPICS[:7]:
                self._add(f"help:{t}", f"/help/{t}/", (), f"Help: {t}")
            budget -= 8
        if "lang_param" in self.p:
            self._add("docs:index", "/docs/", (), "Documentation")
            self.docs = [_slug(_title(rng, 2)) + f"-{i}" for i in range(max(3, pages // 40))]
            for d in self.docs:
                for lang in _LANGS:
                    q = () if lang == "en" else (("lang", lang),)
                    self._add(f"docs:{d}:{lang}", f"/docs/{d}", q, f"{d} ({lang})",
                              path_key=lang == "en")
            budget -= 1 + 3 * len(self.docs)
        if "case_distinct" in self.p:
            self._plan_wiki(rng, max(6, pages // 12))
            budget -= 1 + len(self.wiki)
        if "slug_distinct" in self.p:
            self._add("guides:index", "/guides/", (), "Guides")
            self.guides: list[tuple[int, list[str]]] = []
            for _ in range(max(2, pages // 60)):
                gid, next_id = next_id, next_id + 1
                chapters = sorted(rng.sample(_CHAPTERS, 3), key=_CHAPTERS.index)
                self.guides.append((gid, chapters))
                for ch in chapters:
                    self._add(f"guide:{gid}:{ch}", f"/guides/{gid}/{ch}", (),
                              f"Guide {gid}: {ch}")
            budget -= 1 + 3 * len(self.guides)
        self._plan_sections(rng, max(6, budget), next_id)

    # -- the plan -----------------------------------------------------------------------------

    def _add(self, key: str, path: str, query: tuple[tuple[str, str], ...], title: str, *,
             content: bool = True, path_key: bool = True) -> Node:
        node = Node(f"h{self.h}:{key}", key.split(":", 1)[0], path, query, title, content)
        self.nodes[node.id] = node
        if path_key and not query:
            self.by_path[path] = node.id
        return node

    def _article(self, key: str, prefix: str, num: int, title: str, rng: random.Random,
                 section: str) -> Node:
        slug = _slug(title)
        node = self._add(key, f"/{prefix}/{num}/{slug}", (), title, path_key=False)
        alts = {_slug(_title(rng)), "-".join(slug.split("-")[:2]), ""} - {slug}
        art = _Article(node, f"/{prefix}/{num}", slug, tuple(sorted(alts)), section)
        self.articles[(prefix, num)] = art
        self.article_of[node.id] = art
        return node

    def _plan_sections(self, rng: random.Random, budget: int, next_id: int) -> None:
        n_sec = 2 if budget < 80 else 3 if budget < 300 else 4
        items = max(n_sec * 3, round(budget * PER_PAGE / (PER_PAGE + 1)))
        names = rng.sample(_SECTIONS, n_sec)
        for i, sec in enumerate(names):
            count = items // n_sec + (1 if i < items % n_sec else 0)
            ids = []
            for _ in range(count):
                num, next_id = next_id, next_id + 1
                ids.append(self._article(f"item:{sec}:{num}", sec, num, _title(rng), rng,
                                         sec).id)
            self.sections[sec] = ids
            pages = math.ceil(count / PER_PAGE)
            self.pages_of[sec] = pages
            for k in range(1, pages + 1):
                q = () if k == 1 else (("page", str(k)),)
                self._add(f"list:{sec}:{k}", f"/{sec}/", q,
                          f"{sec.capitalize()}" + (f", page {k}" if k > 1 else ""))

    def _plan_calendar(self, rng: random.Random, events: int) -> int:
        months = [_month_add(*NOW, k) for k in range(-WINDOW, WINDOW + 1)]
        busy = sorted(rng.sample(months, max(2, round(len(months) * 0.7))))
        self.events: dict[tuple[int, int], list[int]] = {m: [] for m in busy}
        self.event_month: dict[int, tuple[int, int]] = {}
        for i in range(events):
            month = busy[i % len(busy)] if i < len(busy) else rng.choice(busy)
            eid = 100 + 1000 * self.h + i
            self.events[month].append(eid)
            self.event_month[eid] = month
            self._add(f"event:{eid}", f"/event/{eid}", (), f"Event: {_title(rng, 3)}")
        for y, m in busy:
            self._add(f"month:{y:04d}-{m:02d}", f"/calendar/{y:04d}/{m:02d}", (),
                      f"Events in {_MONTHS[m - 1]} {y}")
        return events + len(busy)

    def _plan_shop(self, rng: random.Random, cats: int, next_id: int) -> tuple[int, int]:
        self._add("shop:index", "/shop/", (), "Shop")
        self.shop: dict[str, dict[str, list[str]]] = {}
        used = 1
        for cat in rng.sample(_CATEGORIES, cats):
            colors = list(_COLORS) if rng.random() < 0.5 else rng.sample(_COLORS, 2)
            by_color: dict[str, list[str]] = {c: [] for c in colors}
            for i in range(10):
                color = colors[i % len(colors)]
                num, next_id = next_id, next_id + 1
                node = self._article(f"product:{num}", "product", num,
                                     f"{color.capitalize()} {_title(rng, 2)} {cat[:-1]}",
                                     rng, f"shop:{cat}")
                by_color[color].append(node.id)
            self.shop[cat] = by_color
            self._add(f"shop:{cat}:all", f"/shop/{cat}/", (), f"{cat.capitalize()}")
            for c in colors:
                self._add(f"shop:{cat}:{c}", f"/shop/{cat}/", (("color", c),),
                          f"{c.capitalize()} {cat}")
            missing = [c for c in _COLORS if c not in colors]
            none_q = (("color", missing[0]),) if missing else \
                (("color", "red"), ("material", _MATERIALS["blue"]))
            self._add(f"shop:{cat}:none", f"/shop/{cat}/", none_q, f"No {cat} found",
                      content=False)
            used += 10 + 1 + len(colors)
        return next_id, used

    def _plan_wiki(self, rng: random.Random, n: int) -> None:
        self._add("wiki:index", "/wiki/", (), "All articles")
        titles: list[str] = []
        words = rng.sample(_WORDS, n)
        i = 0
        while len(titles) < n:
            w = words[i]
            i += 1
            titles.append(w.capitalize())
            if len(titles) % 3 == 1 and len(titles) < n:  # a twin: the same word in capitals
                titles.append(w.upper() if rng.random() < 0.5 else w)
        self.wiki = titles
        for t in titles:
            self._add(f"wiki:{t}", f"/wiki/{t}", (), t)

    # -- the router --------------------------------------------------------------------------

    def resolve(self, target: str) -> Served:
        """The node a request target (path and query as sent) gets on this host."""
        path, _, qs = target.partition("?")
        path = unquote(path)
        if not path.startswith("/"):
            return _NOT_FOUND
        q = dict(parse_qsl(qs, keep_blank_values=True))
        if "sid_path" in self.p and (m := re.match(r"/s/[0-9a-f]{8}(/.*)", path)):
            path = m[1]
        if "jsessionid" in self.p:
            path = re.sub(r";jsessionid=[^/]*", "", path)
        printed = False
        if "print_view" in self.p:
            if self.print_form == "path" and path.startswith("/print/"):
                printed, path = True, path[len("/print"):]
            elif self.print_form == "query" and q.get("print") == "1":
                printed = True
        if "case_alias" in self.p:
            path = path.lower()
        if "index_html" in self.p and path.endswith("/index.html"):
            path = path[:-len("index.html")]
        node = self._match(path, q)
        if node is None and "trailing_slash" in self.p and path != "/":
            node = self._match(path[:-1] if path.endswith("/") else path + "/", q)
        if node is None or (printed and node.kind not in ("item", "event", "guide")):
            return _NOT_FOUND
        return Served(200, self.h, node, printed)

    def _match(self, path: str, q: dict[str, str]) -> Node | None:
        nid = self.by_path.get(path)
        if nid is not None:
            node = self.nodes[nid]
            if node.kind == "list":
                return self._listing(nid, q)
            if node.kind == "docs" and node.id.endswith(":en"):
                lang = q.get("lang", "en")
                return self.nodes.get(node.id[:-2] + lang)
            if node.kind == "shop" and not node.id.endswith(":index"):
                return self._facet(path, q)
            return node
        if (m := _ITEM.fullmatch(path)) and (art := self.articles.get((m[1], int(m[2])))):
            slug = m[3]
            if slug == art.slug and m[2] == str(int(m[2])):
                return art.node
            if "ignored_slug" in self.p and m[2] == str(int(m[2])) and \
                    (slug is None or re.fullmatch(r"[a-z0-9-]*", slug)):
                return art.node
            return None
        if "calendar" in self.p and (m := _MONTH.fullmatch(path)):
            y, mo = int(m[1]), int(m[2])
            if 1000 <= y <= 9999 and 1 <= mo <= 12:
                return self._month(y, mo)
            return None
        if "rel_loop" in self.p and path.startswith("/help/") and path.endswith("/"):
            segs = path[len("/help/"):-1].split("/")
            if all(s in _TOPICS[:7] for s in segs):
                return self.nodes[f"h{self.h}:help:{segs[-1]}"]
        return None

    def _listing(self, first: str, q: dict[str, str]) -> Node | None:
        page = q.get("page", "1")
        sec = first.split(":")[2]
        if not page.isdigit() or page != str(int(page)) or \
                not 1 <= int(page) <= self.pages_of[sec]:
            return None
        return self.nodes[f"h{self.h}:list:{sec}:{page}"]

    def _facet(self, path: str, q: dict[str, str]) -> Node | None:
        cat = path.strip("/").split("/")[1]
        color, size, material = q.get("color"), q.get("size"), q.get("material")
        if (color is not None and color not in _COLORS) or \
                (size is not None and size not in _SIZES) or \
                (material is not None and material not in _COLOR_OF):
            return None
        want = color if color is not None else _COLOR_OF.get(material or "")
        if material is not None and want != _COLOR_OF[material]:
            return self.nodes[f"h{self.h}:shop:{cat}:none"]
        if want is None:
            return self.nodes[f"h{self.h}:shop:{cat}:all"]
        if want not in self.shop[cat]:
            return self.nodes[f"h{self.h}:shop:{cat}:none"]
        return self.nodes[f"h{self.h}:shop:{cat}:{want}"]

    def _month(self, y: int, m: int) -> Node:
        nid = f"h{self.h}:month:{y:04d}-{m:02d}"
        node = self.nodes.get(nid)
        if node is not None:
            return node
        first, last = _month_add(*NOW, -WINDOW), _month_add(*NOW, WINDOW)
        inside = first <= (y, m) <= last
        return Node(f"h{self.h}:trap:month:{y:04d}-{m:02d}", "month",
                    f"/calendar/{y:04d}/{m:02d}", (), f"Events in {_MONTHS[m - 1]} {y}",
                    content=False, expand=inside)

    # -- links -------------------------------------------------------------------------------

    def aliases(self, node: Node) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
        """The other spellings of ``node`` the host's patterns allow (query kept)."""
        p, path, q = self.p, node.path, node.query
        out: list[tuple[str, tuple[tuple[str, str], ...]]] = []
        if "index_html" in p and path.endswith("/"):
            out.append((path + "index.html", q))
        if "trailing_slash" in p and path != "/":
            out.append((path[:-1] if path.endswith("/") else path + "/", q))
        if "case_alias" in p and path != "/":
            out.append(("/".join(s.capitalize() for s in path.split("/")), q))
            out.append((path.upper(), q))
        if "ignored_slug" in p and node.id in self.article_of:
            art = self.article_of[node.id]
            out.extend((f"{art.base}/{s}" if s else art.base, q) for s in art.alt_slugs)
        if "default_param" in p and node.kind == "list":
            if not q:
                out.append((path, (("page", "1"),)))
            out.append((path, (*q, ("per_page", str(PER_PAGE)))))
        return out

    def href(self, nid: str, rng: random.Random, ref: str | None = None) -> str:
        """``nid`` written as a link: canonical, or now and then one of its aliases, with
        the ignored parameters the host uses."""
        node = self.nodes[nid]
        path, q = node.path, node.query
        aliases = self.aliases(node)
        if aliases and rng.random() < ALIAS_RATE:
            path, q = rng.choice(aliases)
        params = list(q)
        if "sort_param" in self.p and node.kind in ("list", "item", "shop") and \
                rng.random() < 0.25:
            params.append(("sort", rng.choice(_SORTS)))
        if "ref_param" in self.p and ref and rng.random() < 0.3:
            params.append(("ref", ref))
        return path + ("?" + urlencode(params) if params else "")

    @cached_property
    def nav(self) -> list[tuple[str, str]]:
        """(href, text) of the header navigation: the same on every page of the host."""
        rng = random.Random(f"dupsite/{self.seed}/{self.h}/nav")
        out = [(self.href(self.home.id, rng, "nav"), "Home")]
        for sec in self.sections:
            out.append((self.href(f"h{self.h}:list:{sec}:1", rng, "nav"), sec.capitalize()))
        for nid, text in ((f"h{self.h}:shop:index", "Shop"), (f"h{self.h}:help:index", "Help"),
                          (f"h{self.h}:docs:index", "Docs"), (f"h{self.h}:wiki:index", "Wiki"),
                          (f"h{self.h}:guides:index", "Guides")):
            if nid in self.nodes:
                out.append((self.href(nid, rng, "nav"), text))
        if "calendar" in self.p:
            out.append((f"/calendar/{NOW[0]:04d}/{NOW[1]:02d}", "Calendar"))
        return out

    @cached_property
    def footer(self) -> list[tuple[str, str]]:
        rng = random.Random(f"dupsite/{self.seed}/{self.h}/footer")
        return [(self.href(f"h{self.h}:static:{s}", rng, "footer"), s.capitalize())
                for s in _STATICS] + [(self.href(self.home.id, rng, "footer"), "Front page")]

    def body_links(self, node: Node, path: str, q: dict[str, str],
                   others: Sequence[str]) -> list[tuple[str, str]]:
        """(href, text) of the links in a page's body (nav and footer apart). ``path``/``q``:
        the request's path and query after the router took sessions and printing out;
        ``others``: the other hosts' origins."""
        rng = random.Random(f"dupsite/{self.seed}/{node.id}/links")
        out: list[tuple[str, str]] = []
        h = self.h

        def link(nid: str, ref: str | None = None) -> None:
            out.append((self.href(nid, rng, ref), self.nodes[nid].title))

        kind = node.kind
        if kind == "home":
            for sec, ids in self.sections.items():
                link(f"h{h}:list:{sec}:1", "home")
                for nid in ids[-3:]:
                    link(nid, "home")
            if "calendar" in self.p:
                for month in sorted(self.events)[:3]:
                    link(f"h{h}:month:{month[0]:04d}-{month[1]:02d}", "home")
            if "facets" in self.p:
                for cat in self.shop:
                    link(f"h{h}:shop:{cat}:all", "home")
            if "slug_distinct" in self.p:
                link(f"h{h}:guides:index", "home")
            for i, origin in enumerate(others):
                out.append((origin + "/", f"Partner site {i + 1}"))
        elif kind == "list":
            sec, k = node.id.split(":")[2], int(node.id.split(":")[3])
            ids = self.sections[sec]
            for nid in ids[(k - 1) * PER_PAGE:k * PER_PAGE]:
                link(nid, "list")
            last = self.pages_of[sec]
            for j in sorted({1, k - 1, k - 2, k + 1, k + 2, last} - {k}):
                if 1 <= j <= last:
                    link(f"h{h}:list:{sec}:{j}", "list")
        elif kind == "item":
            art = self.article_of[node.id]
            ids = self.sections[art.section]
            i = ids.index(node.id)
            link(f"h{h}:list:{art.section}:{i // PER_PAGE + 1}")
            for j in (i - 1, i + 1):
                if 0 <= j < len(ids):
                    link(ids[j], "related")
            for nid in rng.sample(ids, min(3, len(ids))):
                link(nid, "related")
            if "page_param" in self.p:
                out.append((f"{path}?page=2", "Older comments"))
            if others and rng.random() < 0.1:
                out.append((others[rng.randrange(len(others))] + "/", "Elsewhere"))
        elif kind == "static":
            link(self.home.id)
        elif kind == "month":
            if node.content:
                y, m = (int(x) for x in node.id.rsplit(":", 1)[1].split("-"))
                for eid in self.events[(y, m)]:
                    link(f"h{h}:event:{eid}")
            else:
                y, m = int(node.path[10:14]), int(node.path[15:17])
            for k, text in ((-12, "Previous year"), (-1, "Previous month"),
                            (1, "Next month"), (12, "Next year")):
                py, pm = _month_add(y, m, k)
                if 1000 <= py <= 9999:
                    out.append((f"/calendar/{py:04d}/{pm:02d}", text))
        elif kind == "event":
            eid = int(node.id.rsplit(":", 1)[1])
            y, m = self.event_month[eid]
            link(f"h{h}:month:{y:04d}-{m:02d}")
        elif kind == "shop":
            out.extend(self._shop_links(node, path, q, rng))
        elif kind == "product":
            art = self.article_of[node.id]
            cat = art.section.split(":")[1]
            link(f"h{h}:shop:{cat}:all")
            color = node.title.split()[0].lower()
            link(f"h{h}:shop:{cat}:{color}")
            for nid in rng.sample(self.shop[cat][color], min(2, len(self.shop[cat][color]))):
                link(nid, "related")
        elif kind == "help":
            topics = _TOPICS[:7]
            if node.id.endswith(":index"):
                out.extend((f"/help/{t}/", f"Help: {t}") for t in topics)
            else:  # written as if the page were /help/: one level deeper from a topic
                t = node.id.rsplit(":", 1)[1]
                for other in rng.sample([x for x in topics if x != t], 3):
                    out.append((f"{other}/", f"See also: {other}"))
                out.append(("/help/", "All help topics"))
        elif kind == "docs":
            if node.id.endswith(":index"):
                for d in self.docs:
                    link(f"h{h}:docs:{d}:en")
            else:
                d = node.id.split(":")[2]
                for other in rng.sample(self.docs, min(2, len(self.docs))):
                    if other != d:
                        link(f"h{h}:docs:{other}:en")
                link(f"h{h}:docs:index")
        elif kind == "wiki":
            if node.id.endswith(":index"):
                for t in self.wiki:
                    link(f"h{h}:wiki:{t}")
            else:
                for t in rng.sample(self.wiki, min(4, len(self.wiki))):
                    link(f"h{h}:wiki:{t}")
                link(f"h{h}:wiki:index")
        elif kind == "guides":
            if node.id.endswith(":index"):
                for gid, chapters in self.guides:
                    for ch in chapters:
                        link(f"h{h}:guide:{gid}:{ch}")
            else:
                gid = int(node.id.split(":")[2])
                for ch in dict(self.guides)[gid]:
                    link(f"h{h}:guide:{gid}:{ch}")
                link(f"h{h}:guides:index")
        if "print_view" in self.p and kind in ("item", "event", "guide"):
            canon = node.path
            out.append((f"/print{canon}" if self.print_form == "path" else f"{canon}?print=1",
                        "Print this page"))
        if "lang_param" in self.p:
            for lang in _LANGS:
                out.append((f"{path}?lang={lang}", {"en": "English", "de": "Deutsch",
                                                    "fr": "Français"}[lang]))
        return out

    def _shop_links(self, node: Node, path: str, q: dict[str, str], rng: random.Random
                    ) -> list[tuple[str, str]]:
        h = self.h
        if node.id.endswith(":index"):
            return [(self.href(f"h{h}:shop:{c}:all", rng, "list"), c.capitalize())
                    for c in self.shop]
        cat = node.id.split(":")[2]
        out: list[tuple[str, str]] = []
        if node.content:
            color = node.id.rsplit(":", 1)[1]
            products = [nid for c, ids in self.shop[cat].items() if color in ("all", c)
                        for nid in ids]
            for nid in products:
                out.append((self.href(nid, rng, "list"), self.nodes[nid].title))
        # refinements: the request's filters, in the order they came, plus or minus one
        current = [(k, v) for k, v in q.items() if k in ("color", "size", "material")]
        values = {"color": _COLORS, "size": _SIZES, "material": tuple(_COLOR_OF)}
        base = f"/shop/{cat}/"
        for facet, choices in values.items():
            have = dict(current).get(facet)
            for v in choices:
                if v != have:
                    params = [(k, x) for k, x in current if k != facet] + [(facet, v)]
                    out.append((base + "?" + urlencode(params), f"{facet}: {v}"))
            if have is not None:
                params = [(k, x) for k, x in current if k != facet]
                out.append((base + ("?" + urlencode(params) if params else ""),
                            f"Remove {facet}"))
        out.append((self.href(f"h{h}:shop:index", rng), "All categories"))
        return out

    # -- text --------------------------------------------------------------------------------

    def text(self, node: Node) -> list[str]:
        """The main text's paragraphs: a function of the node alone. A listing's is an
        introduction and, per article on it, its title and first sentence."""
        paras = list(_text(self.seed, node.id, node.kind, node.content))
        if node.kind == "list":
            sec, k = node.id.split(":")[2], int(node.id.split(":")[3])
            for nid in self.sections[sec][(k - 1) * PER_PAGE:k * PER_PAGE]:
                item = self.nodes[nid]
                first = _text(self.seed, nid, "item", True)[0].split(".")[0]
                paras.append(f"{item.title}: {first}.")
        return paras

    def related_box(self, rng: random.Random) -> list[tuple[str, str]]:
        """Three articles drawn anew on every response (the "noise" pattern)."""
        ids = [nid for ids in self.sections.values() for nid in ids]
        return [(self.nodes[nid].path, self.nodes[nid].title)
                for nid in rng.sample(ids, min(3, len(ids)))]


@lru_cache(maxsize=65536)
def _text(seed: int, nid: str, kind: str, content: bool) -> tuple[str, ...]:
    rng = random.Random(f"dupsite/{seed}/{nid}/text")
    if not content:  # trap pages: the same few sentences but for the name of the place
        what = "events are scheduled" if kind == "month" else "products match these filters"
        return (f"No {what} here yet. Please check back later, or browse the other sections "
                "of the site from the navigation above.",)
    if kind == "docs" and not nid.endswith(":index"):
        lang = nid.rsplit(":", 1)[1]
        words = {"en": _WORDS, "de": _WORDS_DE, "fr": _WORDS_FR}[lang]
        return tuple(_paragraphs(rng, rng.randint(180, 320), words))
    size = {"item": (200, 400), "guide": (200, 350), "wiki": (150, 300), "event": (100, 200),
            "product": (100, 180), "static": (150, 250), "home": (150, 250),
            "month": (60, 120), "help": (150, 250)}.get(kind, (60, 120))
    return tuple(_paragraphs(rng, rng.randint(*size)))


# -- the site -------------------------------------------------------------------------------

def _origin_of(url: str) -> tuple[str, str]:
    """(``scheme://host:port`` lowercased, path and query) of an absolute URL."""
    parts = urlsplit(url)
    target = (parts.path or "/") + ("?" + parts.query if parts.query else "")
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}", target


class Site:
    """The hosts of one seed, at given origins (``Site.at`` moves them)."""

    def __init__(self, seed: int, hosts: Sequence[HostSpec], pages: int,
                 origins: Sequence[str] | None = None) -> None:
        if not hosts:
            raise ValueError("a site needs at least one host")
        self.seed = seed
        self.specs = tuple(hosts)
        self.pages = pages
        share = max(20, pages // len(hosts))
        self.hosts = [Host(seed, h, spec, spec.pages or share)
                      for h, spec in enumerate(hosts)]
        self.origins = list(origins) if origins is not None else [
            f"http://h{h}.dupsite.test" for h in range(len(hosts))]
        if len(self.origins) != len(self.hosts):
            raise ValueError(f"{len(self.hosts)} hosts need as many origins, "
                             f"got {len(self.origins)}")
        self._index = {o.lower(): h for h, o in enumerate(self.origins)}

    def at(self, origins: Sequence[str]) -> Site:
        """The same site served at ``origins`` (ground truth and pages unchanged)."""
        site = Site.__new__(Site)
        site.seed, site.specs, site.pages, site.hosts = self.seed, self.specs, self.pages, \
            self.hosts
        site.origins = list(origins)
        if len(site.origins) != len(self.hosts):
            raise ValueError(f"{len(self.hosts)} hosts need as many origins")
        site._index = {o.lower(): h for h, o in enumerate(site.origins)}
        return site

    @property
    def seeds(self) -> list[str]:
        return [o + "/" for o in self.origins]

    # -- ground truth ------------------------------------------------------------------------

    def resolve(self, url: str) -> Served:
        """What the site answers for an absolute URL (404 for other hosts' URLs too)."""
        origin, target = _origin_of(url)
        h = self._index.get(origin)
        if h is None:
            return _NOT_FOUND
        return self.hosts[h].resolve(target)

    def content_of(self, url: str) -> str | None:
        """The content id ``url`` returns; None for a trap page, a 404 or another site."""
        return self.resolve(url).content

    @cached_property
    def _reach(self) -> tuple[frozenset[str], dict[str, int], frozenset[str]]:
        depth: dict[str, int] = {}
        traps: set[str] = set()
        queue: deque[tuple[int, Node]] = deque()
        for h, host in enumerate(self.hosts):
            depth[host.home.id] = 0
            queue.append((h, host.home))
        while queue:
            h, node = queue.popleft()
            base = self.origins[h] + node.target
            for href, _ in self.links(h, node, node.target):
                served = self.resolve(urljoin(base, href))
                if served.node is None:
                    raise AssertionError(f"{base} links {href!r}, which is not served")
                nxt = served.node
                if nxt.id in depth:
                    continue
                depth[nxt.id] = depth[node.id] + 1
                if not nxt.content:
                    traps.add(nxt.id)
                if nxt.expand:
                    queue.append((served.host, nxt))  # type: ignore[arg-type]
        truth = frozenset(n for n in depth if n not in traps)
        return truth, depth, frozenset(traps)

    @property
    def truth(self) -> frozenset[str]:
        """Content ids of the distinct pages reachable from the seeds."""
        return self._reach[0]

    def truth_of(self, h: int) -> frozenset[str]:
        return frozenset(c for c in self.truth if c.startswith(f"h{h}:"))

    @property
    def depth(self) -> dict[str, int]:
        """Fewest links from a seed to each reachable node (content or trap)."""
        return self._reach[1]

    @property
    def traps(self) -> frozenset[str]:
        """The trap pages the ground truth walked through (empty months, empty facets)."""
        return self._reach[2]

    def node(self, nid: str) -> Node:
        return self.hosts[int(nid[1:nid.index(":")])].nodes[nid]

    def url_of(self, nid: str) -> str:
        """The canonical URL of a content id."""
        h = int(nid[1:nid.index(":")])
        return self.origins[h] + self.hosts[h].nodes[nid].target

    # -- pages -------------------------------------------------------------------------------

    def links(self, h: int, node: Node, target: str) -> list[tuple[str, str]]:
        """Every (href, text) of ``node``'s page requested as ``target`` (no session ids,
        no rotating box: the links the ground truth follows)."""
        host = self.hosts[h]
        path, _, qs = target.partition("?")
        q = dict(parse_qsl(qs, keep_blank_values=True))
        others = [o for i, o in enumerate(self.origins) if i != h]
        return [*host.nav, *host.body_links(node, path, q, others), *host.footer]

    def respond(self, h: int, target: str, n: int = 0) -> tuple[int, str, str, Served]:
        """(status, content type, body, what was served) of host ``h``'s answer to its
        ``n``-th request, ``target`` (path and query as sent). ``n`` draws the session id
        and the noise."""
        if target == "/robots.txt":
            return 200, "text/plain", "User-agent: *\nDisallow:\n", _NOT_FOUND
        served = self.hosts[h].resolve(target)
        if served.node is None:
            return (404, "text/html",
                    "<!DOCTYPE html><html><body><h1>Not found</h1></body></html>", served)
        return 200, "text/html", _Page(self, h, served, target, n).html(), served

    def serve(self, *, ips: list[str] | None = None
              ) -> contextlib.AbstractAsyncContextManager[RunningDupSite]:
        """``async with site.serve() as running:``: real aiohttp.web servers (``serve``)."""
        return serve(self, ips=ips)


@dataclass(slots=True)
class _Page:
    site: Site
    h: int
    served: Served
    target: str
    n: int

    @property
    def sid(self) -> str:
        """This response's session id: 8 hex digits, new on every response."""
        return hashlib.blake2b(f"{self.site.seed}/{self.h}/{self.n}".encode(),
                               digest_size=4).hexdigest()

    def _session(self, href: str, sid: str) -> str:
        """``href`` with this response's session id, as the host writes its links."""
        p = self.site.hosts[self.h].p
        if href.startswith(("http://", "https://")) or not sid:
            return href
        if "sid_path" in p and href.startswith("/"):
            href = f"/s/{sid}{href}"
        if "jsessionid" in p:
            path, sep, query = href.partition("?")
            href = f"{path};jsessionid={sid}{sep}{query}"
        if "sid_query" in p:
            href += ("&" if "?" in href else "?") + f"sid={sid}"
        return href

    def html(self) -> str:
        site, host, node = self.site, self.site.hosts[self.h], self.served.node
        assert node is not None
        noise = "noise" in host.p
        sid = self.sid if any(s in host.p for s in _SESSIONS) else ""
        rng = random.Random(f"dupsite/{site.seed}/{self.h}/noise/{self.n}")
        paras = "".join(f"<p>{escape(t)}</p>" for t in host.text(node))
        title = escape(node.title)
        stamp = f"2026-11-24T{(self.n // 3600) % 24:02d}:{(self.n // 60) % 60:02d}:" \
                f"{self.n % 60:02d}Z"
        if self.served.printed:
            back = self._session(node.path, sid)
            return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
                    f"<title>{title} (print) | {escape(host.name)}</title></head>"
                    f'<body class="print"><p class="print-head">{escape(host.name)}: '
                    f"printer-friendly version</p><main><article><h1>{title}</h1>{paras}"
                    f'</article></main><p class="print-foot">'
                    + (f"Printed {stamp}. " if noise else "")
                    + f'Original article: <a href="{escape(back)}">{title}</a></p>'
                    "</body></html>")
        path, _, qs = self.target.partition("?")
        clean = re.sub(r";jsessionid=[^/]*", "", path)
        if "sid_path" in host.p and (m := re.match(r"/s/[0-9a-f]{8}(/.*)", clean)):
            clean = m[1]
        q = dict(parse_qsl(qs, keep_blank_values=True))
        others = [o for i, o in enumerate(site.origins) if i != self.h]
        body = host.body_links(node, clean, q, others)

        def items(links: Iterable[tuple[str, str]]) -> str:
            return "".join(f'<li><a href="{escape(self._session(href, sid))}">{escape(text)}</a>'
                           "</li>" for href, text in links)

        head = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
                f'<meta name="viewport" content="width=device-width, initial-scale=1">'
                f"<title>{title} | {escape(host.name)}</title></head><body>"
                f'<header class="site-header"><p class="logo">{escape(host.name)}</p>'
                f'<p class="tagline">Independent reporting and resources since 1998</p>'
                f"<nav><ul>{items(host.nav)}</ul></nav>")
        if noise:
            ad = hashlib.blake2b(f"ad/{site.seed}/{self.h}/{self.n}".encode(),
                                 digest_size=6).hexdigest()
            head += (f'<p class="stamp">Page generated {stamp} in '
                     f"0.{rng.randrange(10, 99)} s</p></header>"
                     f'<div class="ad" id="ad-{ad}" data-slot="{ad}">Advertisement</div>')
        else:
            head += "</header>"
        main = f"<main><article><h1>{title}</h1>{paras}</article>"
        main += f'<section class="links"><ul>{items(body)}</ul></section></main>'
        aside = ""
        if noise:
            aside = (f'<aside class="related"><h2>You may also like</h2>'
                     f"<ul>{items(host.related_box(rng))}</ul></aside>")
        foot = (f"<footer><ul>{items(host.footer)}</ul><p>© 1998-2026 {escape(host.name)}. "
                "All rights reserved. Reproduction without permission is prohibited. "
                "Our journalism is supported by readers like you: subscribe to receive "
                "the weekly newsletter, follow us on social media, or send us a tip."
                "</p></footer></body></html>")
        return head + main + aside + foot


# -- building and serving ---------------------------------------------------------------------

def build(seed: int = 0, hosts: Sequence[HostSpec | Iterable[str]] | None = None, *,
          pages: int = 200, origins: Sequence[str] | None = None) -> Site:
    """The site of ``seed``: ``hosts`` (HostSpecs, or pattern sets; default the six of
    ``DEFAULT_HOSTS``) sharing about ``pages`` content pages."""
    specs = [h if isinstance(h, HostSpec) else HostSpec(frozenset(h))
             for h in (hosts if hosts is not None else DEFAULT_HOSTS)]
    return Site(seed, specs, pages, origins)


@dataclass(slots=True)
class HostLog:
    """What one host's server answered, request by request."""

    requests: Counter[str] = field(default_factory=Counter)  # raw target -> count
    served: Counter[str] = field(default_factory=Counter)  # node id -> 200 responses
    content: Counter[str] = field(default_factory=Counter)  # content id -> 200 responses
    statuses: Counter[int] = field(default_factory=Counter)
    robots: int = 0  # requests for /robots.txt (in ``n`` too)
    n: int = 0  # requests answered: also what draws session ids and noise

    def clear(self) -> None:
        self.requests.clear()
        self.served.clear()
        self.content.clear()
        self.statuses.clear()
        self.robots = self.n = 0


@dataclass(slots=True)
class RunningDupSite:
    """A served site: the site at its live origins, and what each host answered."""

    site: Site
    logs: list[HostLog]

    @property
    def seeds(self) -> list[str]:
        return self.site.seeds

    @property
    def origins(self) -> list[str]:
        return self.site.origins

    @property
    def truth(self) -> frozenset[str]:
        return self.site.truth

    def content_of(self, url: str) -> str | None:
        return self.site.content_of(url)

    def _logs(self, h: int | None) -> list[HostLog]:
        return self.logs if h is None else [self.logs[h]]

    def fetches(self, h: int | None = None) -> int:
        """Requests answered (robots.txt included), by host ``h`` or by all."""
        return sum(log.n for log in self._logs(h))

    def found(self, h: int | None = None) -> set[str]:
        """Content ids served with a 200 so far, by host ``h`` or by all."""
        return {cid for log in self._logs(h) for cid in log.content}

    def reset(self) -> None:
        """Forget what was served: the next crawl is counted from zero and sees the same
        session ids and noise as the first."""
        for log in self.logs:
            log.clear()


def make_app(site: Site, h: int, log: HostLog) -> web.Application:
    """Host ``h``'s aiohttp application, counting every request in ``log``."""

    async def handler(request: web.Request) -> web.Response:
        target = request.raw_path
        n = log.n
        log.n += 1
        log.requests[target] += 1
        if target == "/robots.txt":
            log.robots += 1
        status, ctype, body, served = site.respond(h, target, n)
        log.statuses[status] += 1
        if served.node is not None:
            log.served[served.node.id] += 1
            if served.node.content:
                log.content[served.node.id] += 1
        return web.Response(status=status, text=body, content_type=ctype)

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handler)
    return app


@contextlib.asynccontextmanager
async def serve(site: Site, *, ips: list[str] | None = None) -> AsyncIterator[RunningDupSite]:
    """Serve every host of ``site`` on 127.0.0.1 (one port each), or on one port of each of
    ``ips``, until the block exits; yields the site moved to those origins and its logs."""
    from crawler.demo.serve import bind_hosts

    socks = bind_hosts(ips, len(site.hosts))
    here = site.at([f"http://{s.getsockname()[0]}:{s.getsockname()[1]}" for s in socks])
    logs = [HostLog() for _ in here.hosts]
    runners: list[web.AppRunner] = []
    try:
        for h, sock in enumerate(socks):
            runner = web.AppRunner(make_app(here, h, logs[h]), access_log=None,
                                   handler_cancellation=True, shutdown_timeout=0.5)
            await runner.setup()
            runners.append(runner)
            await web.SockSite(runner, sock).start()
        yield RunningDupSite(here, logs)
    finally:
        for runner in runners:
            await runner.cleanup()
        for s in socks:
            s.close()
