"""A tiny document model rendered to both Markdown and self-contained HTML, so the two never drift apart."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path

from windtunnel.marks import MARK

# Markdown has no raw-text mode, so every string is escaped on the way out (as `html.escape` does for report.html):
# run names, arch and task names and eval names come from run directories and may carry HTML or break a table.
# Entities keep the rendered text unchanged; a backslash is doubled so that it cannot escape what follows it.
_MD_TEXT = str.maketrans({"\\": "\\\\", "&": "&amp;", "<": "&lt;", ">": "&gt;", "\r": " ", "\n": " "})
_MD_CELL = str.maketrans({**_MD_TEXT, ord("|"): "&#124;"})


def md_escape(text: object, cell: bool = False) -> str:
    """`text` as inert Markdown on one line: no raw HTML, and in a table cell (`cell=True`) no `|` that ends it."""
    return str(text).translate(_MD_CELL if cell else _MD_TEXT)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(md_escape(c, cell=True) for c in cells) + " |"


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
)


def html_text(text: object) -> str:
    """`text` escaped for HTML, with each mark (✓ ◐ ✗ ⚠) wrapped in a span coloured by its level."""
    return html.escape(str(text)).translate(_HTML_MARKS)


@dataclass
class Heading:
    text: str
    level: int = 2


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
    rows: list[list[str]]
    caption: str = ""


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

    def markdown(self, base: Path) -> str:
        """Markdown with figure links relative to `base` (the report directory)."""
        esc = md_escape
        out = [f"# {esc(self.title)}", ""]
        for b in self.blocks:
            if isinstance(b, Heading):
                out += ["#" * b.level + " " + esc(b.text), ""]
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
                out += [_row(b.header), "|" + "---|" * len(b.header)] + [_row(r) for r in b.rows]
                out += (["", f"*{esc(b.caption)}*"] if b.caption else []) + [""]
            elif isinstance(b, Figure):
                rel = b.path.relative_to(base) if b.path.is_relative_to(base) else b.path
                out += [f"![{esc(b.caption)}]({rel.as_posix()})", "", f"*{esc(b.caption)}*", ""]
        return "\n".join(out)

    def html(self) -> str:
        """One self-contained HTML page: figures are embedded as base64 PNG."""
        esc = html_text
        parts = [
            "<!doctype html><html><head><meta charset='utf-8'>",
            f"<title>{html.escape(self.title)}</title><style>{_CSS}</style></head><body>",
            f"<h1>{esc(self.title)}</h1>",
        ]
        for b in self.blocks:
            if isinstance(b, Heading):
                parts.append(f"<h{b.level}>{esc(b.text)}</h{b.level}>")
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
                body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in b.rows)
                cap = f"<div class='cap'>{esc(b.caption)}</div>" if b.caption else ""
                parts.append(f"<div class='tw'><table><tr>{head}</tr>{body}</table></div>{cap}")
            elif isinstance(b, Figure):
                data = base64.b64encode(b.path.read_bytes()).decode("ascii")
                parts.append(
                    f"<figure><img src='data:image/png;base64,{data}' alt='{html.escape(b.caption)}'>"
                    f"<figcaption>{esc(b.caption)}</figcaption></figure>"
                )
        parts.append("</body></html>")
        return "\n".join(parts)
