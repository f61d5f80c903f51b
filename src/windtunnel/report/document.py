"""A tiny document model rendered to both Markdown and HTML, so the two never drift apart.

Every heading has an anchor (`Heading.anchor`, else a slug of its text, made unique), which the table of contents
(`Contents`) and links from table cells (`Cell.href`) point at, in report.md (an explicit `<a id>` before the
heading) and report.html alike. Long definitions fold away (`Details`: a `<details>` element in both) behind one
sentence in view. report.html refers to its figures as files beside it (`figures/….png`, loaded lazily) rather than
embedding them, so the page opens quickly; a figure outside the report's folder is embedded instead.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from windtunnel.evaluation.marks import MARK

# Markdown has no raw-text mode, so every string is escaped on the way out (as `html.escape` does for report.html):
# run names, arch and task names and eval names come from run directories and may carry HTML or break a table.
# Entities keep the rendered text unchanged; a backslash is doubled so that it cannot escape what follows it.
_MD_TEXT = str.maketrans({"\\": "\\\\", "&": "&amp;", "<": "&lt;", ">": "&gt;", "\r": " ", "\n": " "})
_MD_CELL = str.maketrans({**_MD_TEXT, ord("|"): "&#124;"})


def md_escape(text: object, cell: bool = False) -> str:
    """`text` as inert Markdown on one line: no raw HTML, and in a table cell (`cell=True`) no `|` that ends it."""
    return str(text).translate(_MD_CELL if cell else _MD_TEXT)


def slug(text: object) -> str:
    """An anchor id from `text`: lower-case letters, digits and single hyphens ("Table 1: architecture" ->
    "table-1-architecture"); "section" where nothing is left."""
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "section"


@dataclass
class Cell:
    """A table cell that is more than text: `href` makes it a link (to "#anchor" in the same document), `anchor` gives
    it an id a link can point at, `level` (a mark's level: "exact", "approximate", "fail", "invalid") colours it in
    HTML."""

    text: str
    href: str = ""  # "#anchor": a link within the document
    anchor: str = ""
    level: str = ""


def _link_text(text: object, cell: bool = False) -> str:
    """`md_escape`d text that can stand inside a link's brackets (its own brackets escaped)."""
    return md_escape(text, cell).replace("[", "\\[").replace("]", "\\]")


def _href(href: str) -> str:
    """A link target: "#" and an anchor, slugged as every anchor is (`slug`)."""
    return "#" + slug(href.removeprefix("#"))


def _md_cell(c: str | Cell) -> str:
    if not isinstance(c, Cell):
        return md_escape(c, cell=True)
    text = f"[{_link_text(c.text, cell=True)}]({_href(c.href)})" if c.href else md_escape(c.text, cell=True)
    return (f'<a id="{slug(c.anchor)}"></a>' if c.anchor else "") + text


def _html_cell(c: str | Cell) -> str:
    if not isinstance(c, Cell):
        return f"<td>{html_text(c)}</td>"
    attrs = (f" id='{slug(c.anchor)}'" if c.anchor else "") + (f" class='cell {slug(c.level)}'" if c.level else "")
    text = html_text(c.text)
    if c.href:
        text = f"<a href='{_href(c.href)}'>{text}</a>"
    return f"<td{attrs}>{text}</td>"


def _row(cells: list[str | Cell]) -> str:
    return "| " + " | ".join(_md_cell(c) for c in cells) + " |"


# In HTML every mark is coloured by its level (class "mark exact" ...), the symbol kept as text so it reads without
# colour; the verdict words of the at-a-glance list likewise.
_HTML_MARKS = str.maketrans({sym: f"<span class='mark {level}'>{sym}</span>" for level, sym in MARK.items()})
_CSS = (
    "body{font-family:system-ui,sans-serif;max-width:1400px;margin:2em auto;padding:0 1em;color:#222}"
    ".tw{overflow-x:auto;max-width:100%;margin:1em 0}"
    "table{border-collapse:collapse;table-layout:auto;width:100%;font-size:0.85em}"  # columns shrink to the page,
    "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top;min-width:5em;max-width:40em;"
    "overflow-wrap:anywhere;word-wrap:break-word}th{background:#f3f3f3}"  # down to 5em; beyond, the wrapper scrolls
    "img{max-width:100%}figcaption,.cap{color:#555;font-size:0.9em}code{background:#f5f5f5}"
    ".mark{font-weight:bold}.mark.exact{color:#1a7f37}.mark.approximate{color:#9a6700}.mark.fail{color:#cf222e}"
    ".mark.invalid{color:#8250df}"
    ".banner{font-weight:bold;background:#fff8c5;border-left:4px solid #9a6700;padding:0.6em 1em}"
    ".verdicts li{margin:0.3em 0}.verdict{font-weight:bold;padding:0 0.3em;border-radius:3px}"
    ".verdict.reproduced{color:#1a7f37;background:#dafbe1}.verdict.refuted{color:#cf222e;background:#ffebe9}"
    ".verdict.undecided{color:#6e5600;background:#fff8c5}.why{color:#555}"
    "nav.toc{background:#f8f8f8;border:1px solid #ddd;padding:0.4em 1em;font-size:0.9em}"
    "nav.toc>ul{columns:2 22em;margin:0.3em 0}nav.toc ul{padding-left:1.2em}nav.toc li{break-inside:avoid}"
    "details{margin:0.6em 0}summary{cursor:pointer;color:#333}details>summary::marker{color:#0969da}"
    "table.glance{width:auto}table.glance td{text-align:center;white-space:nowrap}"
    "td.cell a{text-decoration:none;color:inherit;display:block}"
    "td.cell.exact{background:#dafbe1}td.cell.approximate{background:#fff8c5}td.cell.fail{background:#ffebe9}"
    "td.cell.invalid{background:#fbefff}:target{outline:2px solid #0969da}"
    "h2,h3{scroll-margin-top:0.5em}.top{font-size:0.8em;font-weight:normal;margin-left:0.6em}"
)


def html_text(text: object) -> str:
    """`text` escaped for HTML, with each mark (✓ ◐ ✗ ⚠) wrapped in a span coloured by its level."""
    return html.escape(str(text)).translate(_HTML_MARKS)


@dataclass
class Heading:
    text: str
    level: int = 2
    anchor: str = ""  # its id; "" = `slug(text)` (made unique in the document)


@dataclass
class Contents:
    """The table of contents: every heading of the document down to `depth`, each a link to its anchor."""

    depth: int = 3


@dataclass
class Details:
    """Definitions folded away: `summary` (one sentence) in view, `blocks` shown when it is opened."""

    summary: str
    blocks: list = field(default_factory=list)


@dataclass
class Paragraph:
    text: str


@dataclass
class Banner:
    """A caveat the reader must see before anything else (a plumbing tier's numbers mean nothing)."""

    text: str


@dataclass
class Bullets:
    items: list[str]


@dataclass
class Table:
    header: list[str]
    rows: list[list[Any]]  # str, or a `Cell`
    caption: str = ""
    css: str = ""  # an HTML class of the table ("glance": compact, centred)


@dataclass
class Verdicts:
    """The at-a-glance list: one line per claim, each a dict with "claim", "verdict", "evidence" and "why"."""

    items: list[dict[str, str]]


@dataclass
class Figure:
    path: Path  # absolute path of the PNG
    caption: str


@dataclass
class Document:
    title: str
    blocks: list = field(default_factory=list)

    def add(self, block) -> None:
        self.blocks.append(block)

    def headings(self) -> list[tuple[Heading, str]]:
        """Every heading (inside folded blocks too) with its anchor: its own, else the slug of its text, made unique
        by a numeric suffix."""
        seen: set[str] = set()
        out = []
        for b in _walk(self.blocks):
            if isinstance(b, Heading):
                base = slug(b.anchor or b.text)
                anchor, n = base, 2
                while anchor in seen:
                    anchor, n = f"{base}-{n}", n + 1
                seen.add(anchor)
                out.append((b, anchor))
        return out

    def anchors(self) -> set[str]:
        """Every id a link in this document can point at: the headings' and the table cells' anchors."""
        tables = [b for b in _walk(self.blocks) if isinstance(b, Table)]
        cells = {slug(c.anchor) for b in tables for r in b.rows for c in r if isinstance(c, Cell) and c.anchor}
        return {a for _, a in self.headings()} | cells

    def markdown(self, base: Path) -> str:
        """Markdown with figure links relative to `base` (the report directory)."""
        anchors = {id(h): a for h, a in self.headings()}
        return "\n".join([f"# {md_escape(self.title)}", "", *self._md(self.blocks, base, anchors)])

    def _md(self, blocks: list, base: Path, anchors: dict[int, str]) -> list[str]:
        esc = md_escape
        out: list[str] = []
        for b in blocks:
            if isinstance(b, Heading):
                out += [f'<a id="{anchors[id(b)]}"></a>', "", "#" * b.level + " " + esc(b.text), ""]
            elif isinstance(b, Contents):
                out += [
                    "  " * (h.level - 2) + f"- [{_link_text(h.text)}](#{a})"
                    for h, a in self.headings()
                    if 2 <= h.level <= b.depth
                ] + [""]
            elif isinstance(b, Details):
                out += [f"<details><summary>{esc(b.summary)}</summary>", "", *self._md(b.blocks, base, anchors)]
                out += ["</details>", ""]
            elif isinstance(b, Paragraph):
                out += [esc(b.text), ""]
            elif isinstance(b, Banner):
                out += [f"> **{esc(b.text)}**", ""]
            elif isinstance(b, Bullets):
                out += [f"- {esc(item)}" for item in b.items] + [""]
            elif isinstance(b, Verdicts):
                out += [
                    f"- **{esc(v['verdict'])}** · {esc(v['claim'])}"
                    + (f": {esc(v['evidence'])}" if v["evidence"] else "")
                    + (f" — {esc(v['why'])}" if v["why"] else "")
                    for v in b.items
                ] + [""]
            elif isinstance(b, Table):
                out += [_row(list(b.header)), "|" + "---|" * len(b.header)] + [_row(r) for r in b.rows]
                out += (["", f"*{esc(b.caption)}*"] if b.caption else []) + [""]
            elif isinstance(b, Figure):
                rel = b.path.relative_to(base) if b.path.is_relative_to(base) else b.path
                out += [f"![{esc(b.caption)}]({rel.as_posix()})", "", f"*{esc(b.caption)}*", ""]
        return out

    def html(self, base: Path | None = None) -> str:
        """One HTML page. Figures under `base` (the report directory) are referred to by their path relative to it
        and loaded lazily; any other figure (or every one, where `base` is None) is embedded as base64 PNG."""
        anchors = {id(h): a for h, a in self.headings()}
        parts = [
            "<!doctype html><html><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>",
            f"<title>{html.escape(self.title)}</title><style>{_CSS}</style></head><body>",
            f"<h1 id='top'>{html_text(self.title)}</h1>",
            *self._html(self.blocks, base, anchors),
            "</body></html>",
        ]
        return "\n".join(parts)

    def _html(self, blocks: list, base: Path | None, anchors: dict[int, str]) -> list[str]:
        esc = html_text
        parts: list[str] = []
        for b in blocks:
            if isinstance(b, Heading):
                top = "<a class='top' href='#top'>↑ top</a>" if b.level == 2 else ""
                parts.append(f"<h{b.level} id='{anchors[id(b)]}'>{esc(b.text)}{top}</h{b.level}>")
            elif isinstance(b, Contents):
                parts.append("<nav class='toc'><strong>Contents</strong>" + self._toc(b.depth) + "</nav>")
            elif isinstance(b, Details):
                parts.append(f"<details><summary>{esc(b.summary)}</summary>")
                parts += self._html(b.blocks, base, anchors)
                parts.append("</details>")
            elif isinstance(b, Paragraph):
                parts.append(f"<p>{esc(b.text)}</p>")
            elif isinstance(b, Banner):
                parts.append(f"<p class='banner'>{esc(b.text)}</p>")
            elif isinstance(b, Bullets):
                parts.append("<ul>" + "".join(f"<li>{esc(i)}</li>" for i in b.items) + "</ul>")
            elif isinstance(b, Verdicts):
                parts.append(
                    "<ul class='verdicts'>"
                    + "".join(
                        f"<li><span class='verdict {html.escape(v['verdict'])}'>{esc(v['verdict'])}</span> "
                        + esc(v["claim"])
                        + (f": {esc(v['evidence'])}" if v["evidence"] else "")
                        + (f" <span class='why'>— {esc(v['why'])}</span>" if v["why"] else "")
                        + "</li>"
                        for v in b.items
                    )
                    + "</ul>"
                )
            elif isinstance(b, Table):
                head = "".join(f"<th>{esc(h)}</th>" for h in b.header)
                body = "".join("<tr>" + "".join(_html_cell(c) for c in r) + "</tr>" for r in b.rows)
                cap = f"<div class='cap'>{esc(b.caption)}</div>" if b.caption else ""
                css = f" class='{html.escape(b.css, quote=True)}'" if b.css else ""
                parts.append(f"<div class='tw'><table{css}><tr>{head}</tr>{body}</table></div>{cap}")
            elif isinstance(b, Figure):
                if base is not None and b.path.is_relative_to(base):
                    src = html.escape(b.path.relative_to(base).as_posix(), quote=True)
                    img = f"<img src='{src}' loading='lazy' alt='{html.escape(b.caption, quote=True)}'>"
                else:
                    data = base64.b64encode(b.path.read_bytes()).decode("ascii")
                    img = f"<img src='data:image/png;base64,{data}' alt='{html.escape(b.caption, quote=True)}'>"
                parts.append(f"<figure>{img}<figcaption>{esc(b.caption)}</figcaption></figure>")
        return parts

    def _toc(self, depth: int) -> str:
        """The nested list of the headings of levels 2..`depth`, each a link to its anchor."""
        out, level = "", 1
        for h, a in self.headings():
            if not 2 <= h.level <= depth:
                continue
            if h.level > level:
                out += "<ul>" * (h.level - level)
            elif h.level < level:
                out += "</li></ul>" * (level - h.level) + "</li>"
            elif out:
                out += "</li>"
            level = h.level
            out += f"<li><a href='#{a}'>{html_text(h.text)}</a>"
        return out + "</li></ul>" * (level - 1)


def _walk(blocks: list):
    """Every block, those folded in `Details` included, in document order."""
    for b in blocks:
        yield b
        if isinstance(b, Details):
            yield from _walk(b.blocks)
