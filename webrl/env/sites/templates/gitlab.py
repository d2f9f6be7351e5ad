"""Templates of GitLab (site "gitlab"): issue counts, assignees, roles, stars, new and closed issues."""

from __future__ import annotations

import re

from webrl.env.sites import vocab
from webrl.env.sites.moves import Answer, Choose, Click, Done, Fill
from webrl.env.sites.pages.gitlab import project_issues, project_members, project_merges
from webrl.env.sites.store import EpisodeView
from webrl.env.sites.templates.base import Template, at_url, exact, page_check, text_of, values_rng


def _projects(v: EpisodeView) -> list:
    return sorted(v.rows("projects"), key=lambda p: p["path"])


def _open(d: dict) -> list:
    return [Fill("Search projects", d["project"], submit=True), Click(d["project"])]


def _open_issues(v: EpisodeView):
    return [({"project": p["path"]}, exact(len(project_issues(v, p["path"])))) for p in _projects(v)]


def _open_merges(v: EpisodeView):
    return [({"project": p["path"]}, exact(len(project_merges(v, p["path"])))) for p in _projects(v)]


def _assignee(v: EpisodeView):
    return [
        ({"issue": i["title"], "project": p["path"]}, exact(i["assignee"]))
        for p in _projects(v)
        for i in project_issues(v, p["path"])
        if i["assignee"]
    ]


def _role(v: EpisodeView):
    return [
        ({"user": m["username"], "project": p["path"]}, exact(m["role"]))
        for p in _projects(v)
        for m in project_members(v, p["path"])
    ]


def _star(v: EpisodeView):
    return [
        ({"project": p["path"]}, page_check(f"__GITLAB__/{p['path']}", "", include=["Unstar"])) for p in _projects(v)
    ]


def _new_issue(v: EpisodeView):
    out = []
    for p in _projects(v):
        title = "Question about " + values_rng(405, p["path"]).choice(vocab.ISSUE_SUBJECTS)
        out.append(
            ({"title": title, "project": p["path"]}, page_check(f"__GITLAB__/{p['path']}/issues", "", include=[title]))
        )
    return out


def _close(v: EpisodeView):
    return [
        (
            {"issue": i["title"], "project": p["path"]},
            page_check(f"__GITLAB__/{p['path']}/issues/{i['number']}", text_of("#issue-state"), exact="Status: closed"),
        )
        for p in _projects(v)
        for i in project_issues(v, p["path"])
    ]


def _language(v: EpisodeView):
    return [({"project": p["path"]}, exact(p["language"])) for p in _projects(v)]


def _merges_url(v: EpisodeView):
    return [({"project": p["path"]}, at_url(f"__GITLAB__/{p['path']}/merge_requests")) for p in _projects(v)]


def _add_member(v: EpisodeView):
    out = []
    users = sorted(u["username"] for u in v.rows("gl_users"))
    for p in _projects(v):
        rng = values_rng(409, p["path"])
        members = {m["username"] for m in project_members(v, p["path"])}
        user = rng.choice([u for u in users if u not in members])
        role = rng.choice(vocab.ROLES)
        check = page_check(f"__GITLAB__/{p['path']}/members", text_of("#members"), include=[f"(@{user}) | {role}"])
        out.append(({"user": user, "project": p["path"], "role": role}, check))
    return out


TEMPLATES = [
    Template(
        401,
        "gitlab",
        "How many open issues does the project {project} have?",
        _open_issues,
        lambda d: [*_open(d), Answer(r"^Issues \| (\d+) open$")],
    ),
    Template(
        402,
        "gitlab",
        'Who is assigned to the issue "{issue}" in {project}?',
        _assignee,
        lambda d: [
            *_open(d),
            Click("Issues"),
            Answer(rf"^#\d+ {re.escape(d['issue'])} \| open \| .* \| assignee: (\S+)$", paged=True),
        ],
    ),
    Template(
        403,
        "gitlab",
        "What is the role of {user} in the project {project}?",
        _role,
        lambda d: [*_open(d), Click("Members"), Answer(rf"\(@{re.escape(d['user'])}\) \| (\w+)$")],
    ),
    Template(404, "gitlab", "Star the project {project}.", _star, lambda d: [*_open(d), Click("Star"), Done()]),
    Template(
        405,
        "gitlab",
        'Open a new issue titled "{title}" in this project ({project}).',
        _new_issue,
        lambda d: [Click("New issue"), Fill("Title", d["title"]), Click("Create issue"), Done()],
        start="__GITLAB__/{project}",
    ),
    Template(
        406,
        "gitlab",
        'Close the issue "{issue}" of this project ({project}).',
        _close,
        lambda d: [Click("Issues"), Click(d["issue"], paged=True, partial=True), Click("Close issue"), Done()],
        start="__GITLAB__/{project}",
    ),
    Template(
        407,
        "gitlab",
        "Which programming language is the project {project} written in?",
        _language,
        lambda d: [
            Fill("Search projects", d["project"], True),
            Answer(rf"^{re.escape(d['project'])} \| (.+?) \| \d+ stars$"),
        ],
    ),
    Template(
        408,
        "gitlab",
        "Open the merge requests of the project {project}.",
        _merges_url,
        lambda d: [*_open(d), Click("Merge requests"), Done()],
    ),
    Template(
        409,
        "gitlab",
        "Add {user} to this project ({project}) with the role {role}.",
        _add_member,
        lambda d: [
            Click("Members"),
            Fill("Username", d["user"]),
            Choose("role", d["role"]),
            Click("Add member"),
            Done(),
        ],
        start="__GITLAB__/{project}",
        held_out=True,
    ),
    Template(
        410,
        "gitlab",
        "How many open merge requests does the project {project} have?",
        _open_merges,
        lambda d: [*_open(d), Answer(r"^Merge requests \| (\d+) open$")],
        held_out=True,
    ),
]
