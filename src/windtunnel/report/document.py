"""A tiny document model rendered to both Markdown and self-contained HTML, so the two never drift apart."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path

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


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Paragraph:
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
            elif isinstance(b, Bullets):
                out += [f"- {esc(item)}" for item in b.items] + [""]
            elif isinstance(b, Table):
                out += [_row(b.header), "|" + "---|" * len(b.header)] + [_row(r) for r in b.rows]
                out += (["", f"*{esc(b.caption)}*"] if b.caption else []) + [""]
            elif isinstance(b, Figure):
                rel = b.path.relative_to(base) if b.path.is_relative_to(base) else b.path
                out += [f"![{esc(b.caption)}]({rel.as_posix()})", "", f"*{esc(b.caption)}*", ""]
        return "\n".join(out)

    def html(self) -> str:
        """One self-contained HTML page: figures are embedded as base64 PNG."""
        esc = html.escape
        parts = [
            "<!doctype html><html><head><meta charset='utf-8'>",
            f"<title>{esc(self.title)}</title><style>",
            "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}",
            "table{border-collapse:collapse;margin:1em 0;font-size:0.9em}",
            "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}th{background:#f3f3f3}",
            "img{max-width:100%}figcaption,.cap{color:#555;font-size:0.9em}code{background:#f5f5f5}",
            "</style></head><body>",
            f"<h1>{esc(self.title)}</h1>",
        ]
        for b in self.blocks:
            if isinstance(b, Heading):
                parts.append(f"<h{b.level}>{esc(b.text)}</h{b.level}>")
            elif isinstance(b, Paragraph):
                parts.append(f"<p>{esc(b.text)}</p>")
            elif isinstance(b, Bullets):
                parts.append("<ul>" + "".join(f"<li>{esc(i)}</li>" for i in b.items) + "</ul>")
            elif isinstance(b, Table):
                head = "".join(f"<th>{esc(h)}</th>" for h in b.header)
                body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in b.rows)
                cap = f"<div class='cap'>{esc(b.caption)}</div>" if b.caption else ""
                parts.append(f"<table><tr>{head}</tr>{body}</table>{cap}")
            elif isinstance(b, Figure):
                data = base64.b64encode(b.path.read_bytes()).decode("ascii")
                parts.append(
                    f"<figure><img src='data:image/png;base64,{data}' alt='{esc(b.caption)}'>"
                    f"<figcaption>{esc(b.caption)}</figcaption></figure>"
                )
        parts.append("</body></html>")
        return "\n".join(parts)
