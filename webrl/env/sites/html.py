"""HTML building blocks for the embedded sites: plain server-rendered markup, nothing else.

The agent reads every page as simplified HTML inside a small model's context window, so pages
are compact on purpose: one short navigation bar, a heading, short lists of ten rows with
"Label: value" text, explicit "Previous page" / "Next page" links, and forms whose inputs carry a
placeholder that names them. No scripts, a few lines of CSS.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import TypeVar

from webrl.env.sites.routing import HttpError, Request

PER_PAGE = 10
T = TypeVar("T")

_CSS = (
    "body{font-family:sans-serif;max-width:780px;margin:10px auto;padding:0 10px}"
    "nav a,nav b{margin-right:10px}li{margin:3px 0}input,select,textarea,button{margin:2px}"
)


def esc(value: object) -> str:
    return escape(str(value), quote=True)


def link(href: str, text: object) -> str:
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def layout(req: Request, title: str, body: str, status: str = "") -> str:
    """A whole page: site navigation, an optional status line (e.g. "Saved."), the heading, the body."""
    nav = "".join(link(href, text) for href, text in req.nav)
    note = f'<p role="status">{esc(status)}</p>' if status else ""
    return (
        # An empty data: icon stops the browser from requesting /favicon.ico on every page.
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">'
        f"<title>{esc(title)} | {esc(req.site)}</title>"
        f"<style>{_CSS}</style></head><body><nav><b>{esc(req.site)}</b>{nav}</nav>{note}"
        f"<h1>{esc(title)}</h1>{body}</body></html>"
    )


def paginate(items: Sequence[T], page: int, per_page: int = PER_PAGE) -> tuple[list[T], int]:
    """The `page`-th slice of `items` and the page count; a page past the end is a 404."""
    pages = max(1, -(-len(items) // per_page))
    if page > pages:
        raise HttpError(404, f"Not found: page {page} (there are {pages})")
    return list(items[(page - 1) * per_page : page * per_page]), pages


def pager(req: Request, path: str, page: int, pages: int, **params: object) -> str:
    """'Page i of n' with Previous/Next links that keep the other query parameters."""
    if pages <= 1:
        return ""
    parts = [f"Page {page} of {pages}"]
    if page > 1:
        parts.append(link(req.url(path, **params, page=page - 1 if page > 2 else None), "Previous page"))
    if page < pages:
        parts.append(link(req.url(path, **params, page=page + 1), "Next page"))
    return "<p>" + " ".join(parts) + "</p>"


def items(rows: Sequence[str], empty: str = "Nothing here.") -> str:
    """A list of pre-rendered rows, or a one-line note when there are none."""
    if not rows:
        return f"<p>{esc(empty)}</p>"
    return "<ul>" + "".join(f"<li>{row}</li>" for row in rows) + "</ul>"


def search_form(action: str, placeholder: str, value: str = "", name: str = "q", button: str = "Search") -> str:
    """A GET form with one text box: the agent's Search action (type + Enter) submits it."""
    return (
        f'<form action="{esc(action)}"><input name="{name}" type="text" placeholder="{esc(placeholder)}" '
        f'value="{esc(value)}"><button>{esc(button)}</button></form>'
    )


def post_button(action: str, text: str) -> str:
    """A single-button POST form (add to cart, upvote, star, close issue...)."""
    return f'<form method="post" action="{esc(action)}"><button>{esc(text)}</button></form>'


def text_input(name: str, placeholder: str, value: object = "") -> str:
    return f'<input name="{name}" type="text" placeholder="{esc(placeholder)}" value="{esc(value)}">'


def textarea(name: str, placeholder: str) -> str:
    return f'<textarea name="{name}" placeholder="{esc(placeholder)}"></textarea>'


def select(name: str, options: Sequence[str], selected: str = "") -> str:
    opts = "".join(f"<option{' selected' if opt == selected else ''}>{esc(opt)}</option>" for opt in options)
    return f'<select name="{name}">{opts}</select>'


def post_form(action: str, fields: Sequence[str], button: str) -> str:
    return f'<form method="post" action="{esc(action)}">{"".join(fields)}<button>{esc(button)}</button></form>'


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def money(value: float) -> str:
    return f"${value:,.2f}"
