"""GitLab: a code-hosting site (projects, stars, issues, merge requests, members).

Projects live at /gitlab/<owner>/<name> like on GitLab. Issue rows read
"#N title | state | labels | assignee: user" so that questions about an issue can be answered
from the list; the project page links Issues, Merge requests, Members and New issue.
"""

from __future__ import annotations

from webrl.env.sites import vocab
from webrl.env.sites.data import Record
from webrl.env.sites.html import (
    esc,
    items,
    layout,
    link,
    pager,
    paginate,
    post_button,
    post_form,
    search_form,
    select,
    text_input,
    textarea,
)
from webrl.env.sites.routing import HttpError, Redirect, Request, Routes, not_found
from webrl.env.sites.store import EpisodeView

routes = Routes("/gitlab", "GitLab", [("/", "Projects")])
PROJECT = r"/([a-z]+)/([a-z]+-[a-z]+)"
STATES = {"open": "Open", "closed": "Closed", "all": "All"}
NO_LABEL = "No label"


def find_projects(view: EpisodeView, query: str) -> list[Record]:
    words = query.lower().split()
    found = [p for p in view.rows("projects") if all(w in f"{p['path']} {p['description']}".lower() for w in words)]
    return sorted(found, key=lambda p: p["name"])


def stars(view: EpisodeView, project: Record) -> int:
    return project["stars"] + (1 if view.get("stars", project["path"]) else 0)


def project_issues(view: EpisodeView, path: str, state: str = "open") -> list[Record]:
    """A project's issues in one state ("all" for every state), newest (highest number) first."""
    found = [i for i in view.rows("issues") if i["project"] == path and state in ("all", i["state"])]
    return sorted(found, key=lambda i: -i["number"])


def project_merges(view: EpisodeView, path: str, state: str = "open") -> list[Record]:
    found = [m for m in view.rows("merge_requests") if m["project"] == path and state in ("all", m["state"])]
    return sorted(found, key=lambda m: -m["number"])


def project_members(view: EpisodeView, path: str) -> list[Record]:
    return [m for m in view.rows("members") if m["project"] == path]


def _project(req: Request, owner: str, name: str) -> Record:
    found = req.view.get("projects", f"{owner}/{name}")
    if found is None:
        raise not_found(f"project {owner}/{name}")
    return found


@routes.get(r"/?")
def home(req: Request) -> str:
    query = req.arg("q")
    found = find_projects(req.view, query)
    shown, pages = paginate(found, req.page_number())
    rows = [
        f"{link(req.url('/' + p['path']), p['path'])} | {esc(p['language'])} | {stars(req.view, p)} stars"
        for p in shown
    ]
    body = (
        search_form(req.url("/"), "Search projects", query)
        + items(rows, "No projects match.")
        + pager(req, "/", req.page_number(), pages, q=query)
    )
    return layout(req, "Projects", body)


@routes.get(PROJECT)
def project(req: Request, owner: str, name: str) -> str:
    p = _project(req, owner, name)
    base = f"/{p['path']}"
    starred = req.view.get("stars", p["path"]) is not None
    n_issues, n_merges = len(project_issues(req.view, p["path"])), len(project_merges(req.view, p["path"]))
    rows = [
        f"{link(req.url(base + '/issues'), 'Issues')} | {n_issues} open",
        f"{link(req.url(base + '/merge_requests'), 'Merge requests')} | {n_merges} open",
        f"{link(req.url(base + '/members'), 'Members')} | {len(project_members(req.view, p['path']))} members",
        link(req.url(base + "/issues/new"), "New issue"),
    ]
    body = (
        f"<p>{esc(p['description'])}</p>"
        f'<p id="stars">Language: {esc(p["language"])} | Stars: {stars(req.view, p)}</p>'
        + post_button(req.url(base + "/star"), "Unstar" if starred else "Star")
        + items(rows)
    )
    return layout(req, p["path"], body)


@routes.post(PROJECT + r"/star")
def star(req: Request, owner: str, name: str) -> Redirect:
    p = _project(req, owner, name)
    if req.view.get("stars", p["path"]) is None:
        req.view.put("stars", p["path"], {"project": p["path"]})
    else:
        req.view.delete("stars", p["path"])
    return Redirect(req.url("/" + p["path"]))


def issue_row(req: Request, issue: Record) -> str:
    title = link(req.url(f"/{issue['project']}/issues/{issue['number']}"), f"#{issue['number']} {issue['title']}")
    labels = ", ".join(issue["labels"]) or "no labels"
    assignee = f"assignee: {issue['assignee']}" if issue["assignee"] else "unassigned"
    return f"{title} | {issue['state']} | {esc(labels)} | {esc(assignee)}"


def _state_links(req: Request, path: str, state: str) -> str:
    return " ".join(
        esc(text) if key == state else link(req.url(path, state=None if key == "open" else key), text)
        for key, text in STATES.items()
    )


@routes.get(PROJECT + r"/issues")
def issues(req: Request, owner: str, name: str) -> str:
    p = _project(req, owner, name)
    state = req.query.get("state", "open")
    state = state if state in STATES else "open"
    found = project_issues(req.view, p["path"], state)
    shown, pages = paginate(found, req.page_number())
    path = f"/{p['path']}/issues"
    body = (
        f"<p>State: {_state_links(req, path, state)} | {link(req.url(path + '/new'), 'New issue')}</p>"
        + items([issue_row(req, i) for i in shown], "No issues.")
        + pager(req, path, req.page_number(), pages, state=None if state == "open" else state)
    )
    return layout(req, f"Issues of {p['path']}", body)


def _issue(req: Request, owner: str, name: str, number: str) -> Record:
    found = req.view.get("issues", (f"{owner}/{name}", int(number)))
    if found is None:
        raise not_found(f"issue #{number} of {owner}/{name}")
    return found


@routes.get(PROJECT + r"/issues/(\d+)")
def issue(req: Request, owner: str, name: str, number: str) -> str:
    i = _issue(req, owner, name, number)
    action = "Reopen issue" if i["state"] == "closed" else "Close issue"
    verb = "reopen" if i["state"] == "closed" else "close"
    body = (
        f'<p id="issue-state">Status: {i["state"]}</p>'
        f"<p>Author: {esc(i['author'])} | Assignee: {esc(i['assignee'] or 'none')}</p>"
        f"<p>Labels: {esc(', '.join(i['labels']) or 'none')}</p>"
        + (f"<p>{esc(i['description'])}</p>" if i.get("description") else "")
        + post_button(req.url(f"/{i['project']}/issues/{i['number']}/{verb}"), action)
        + f"<p>{link(req.url('/' + i['project'] + '/issues'), 'Back to issues')}</p>"
    )
    return layout(req, f"#{i['number']} {i['title']}", body)


@routes.post(PROJECT + r"/issues/(\d+)/(close|reopen)")
def set_state(req: Request, owner: str, name: str, number: str, verb: str) -> Redirect:
    i = _issue(req, owner, name, number)
    req.view.put("issues", (i["project"], i["number"]), {**i, "state": "closed" if verb == "close" else "open"})
    return Redirect(req.url(f"/{i['project']}/issues/{i['number']}"))


@routes.get(PROJECT + r"/issues/new")
def new_issue_form(req: Request, owner: str, name: str) -> str:
    p = _project(req, owner, name)
    form = post_form(
        req.url(f"/{p['path']}/issues"),
        [
            f"<p>{text_input('title', 'Title')}</p>",
            f"<p>{textarea('description', 'Description')}</p>",
            f"<p>Label: {select('label', [NO_LABEL, *vocab.LABELS])}</p>",
        ],
        "Create issue",
    )
    return layout(req, f"New issue in {p['path']}", form)


@routes.post(PROJECT + r"/issues")
def create_issue(req: Request, owner: str, name: str) -> Redirect:
    p = _project(req, owner, name)
    title = req.arg("title")
    label = req.arg("label") or NO_LABEL
    if not title:
        raise HttpError(400, "an issue needs a title")
    if label != NO_LABEL and label not in vocab.LABELS:
        raise HttpError(400, f"label must be one of {vocab.LABELS}, got {label!r}")
    number = 1 + max((i["number"] for i in project_issues(req.view, p["path"], "all")), default=0)
    new = {"project": p["path"], "number": number, "title": title, "state": "open", "author": p["owner"]}
    labels = () if label == NO_LABEL else (label,)
    req.view.put(
        "issues", (p["path"], number), {**new, "labels": labels, "assignee": "", "description": req.arg("description")}
    )
    return Redirect(req.url(f"/{p['path']}/issues/{number}"))


@routes.get(PROJECT + r"/merge_requests")
def merges(req: Request, owner: str, name: str) -> str:
    p = _project(req, owner, name)
    state = req.query.get("state", "open")
    state = state if state in (*STATES, "merged") else "open"
    found = project_merges(req.view, p["path"], state)
    shown, pages = paginate(found, req.page_number())
    path = f"/{p['path']}/merge_requests"
    rows = [f"{_merge_link(req, path, m)} | {m['state']} | by {esc(m['author'])}" for m in shown]
    body = (
        f"<p>State: {_state_links(req, path, state)}</p>"
        + items(rows, "No merge requests.")
        + pager(req, path, req.page_number(), pages, state=None if state == "open" else state)
    )
    return layout(req, f"Merge requests of {p['path']}", body)


def _merge_link(req: Request, path: str, m: Record) -> str:
    return link(req.url(f"{path}/{m['number']}"), f"!{m['number']} {m['title']}")


@routes.get(PROJECT + r"/merge_requests/(\d+)")
def merge(req: Request, owner: str, name: str, number: str) -> str:
    m = req.view.get("merge_requests", (f"{owner}/{name}", int(number)))
    if m is None:
        raise not_found(f"merge request !{number} of {owner}/{name}")
    body = f"<p>Status: {m['state']}</p><p>Author: {esc(m['author'])}</p>"
    return layout(req, f"!{m['number']} {m['title']}", body)


@routes.get(PROJECT + r"/members")
def members(req: Request, owner: str, name: str) -> str:
    p = _project(req, owner, name)
    names = {u["username"]: u["name"] for u in req.view.rows("gl_users")}
    rows = [
        f"{esc(names[m['username']])} (@{esc(m['username'])}) | {m['role']}"
        for m in project_members(req.view, p["path"])
    ]
    form = post_form(
        req.url(f"/{p['path']}/members"),
        [text_input("username", "Username"), select("role", vocab.ROLES)],
        "Add member",
    )
    body = f'<div id="members">{items(rows)}</div><h2>Add a member</h2>{form}'
    return layout(req, f"Members of {p['path']}", body)


@routes.post(PROJECT + r"/members")
def add_member(req: Request, owner: str, name: str) -> Redirect:
    p = _project(req, owner, name)
    username = req.arg("username").lstrip("@")
    role = req.arg("role")
    if req.view.get("gl_users", username) is None:
        raise HttpError(400, f"no user named {username!r}")
    if role not in vocab.ROLES:
        raise HttpError(400, f"role must be one of {vocab.ROLES}, got {role!r}")
    req.view.put("members", (p["path"], username), {"project": p["path"], "username": username, "role": role})
    return Redirect(req.url(f"/{p['path']}/members"))
