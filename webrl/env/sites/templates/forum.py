"""Templates of the Forum (site "reddit"): authors, comments, top posts, votes, replies, new posts, users."""

from __future__ import annotations

import re

from webrl.env.sites import vocab
from webrl.env.sites.moves import Answer, Choose, Click, Done, Fill
from webrl.env.sites.pages.forum import comments_of, forum_posts, me, user_posts
from webrl.env.sites.store import EpisodeView
from webrl.env.sites.templates.base import Template, at_url, exact, include, page_check, text_of, values_rng

NEW_COMMENTS = ["Thanks for the tips!", "I tried this last week and loved it.", "Which one would you pick?"]


def _posts(v: EpisodeView) -> list:
    return sorted(v.rows("posts"), key=lambda p: p["id"])


def _forums(v: EpisodeView) -> list[str]:
    return [f["name"] for f in v.rows("forums")]


def _users(v: EpisodeView) -> list[str]:
    return sorted(u["username"] for u in v.rows("users"))


def _row(title: str, capture: str) -> str:
    """Pattern of a listing row "Title | N points | by user | N comments" capturing one field."""
    points = r"(-?\d+)" if capture == "points" else r"-?\d+"
    author = r"(\S+)" if capture == "author" else r"\S+"
    comments = r"(\d+)" if capture == "comments" else r"\d+"
    return rf"^{re.escape(title)} \| {points} points \| by {author} \| {comments} comments?$"


def _post_url(p: dict) -> str:
    return f"__REDDIT__/post/{p['id']}"


def _author(v: EpisodeView):
    return [({"title": p["title"], "forum": p["forum"]}, exact(p["author"])) for p in _posts(v)]


def _comments(v: EpisodeView):
    return [({"title": p["title"], "forum": p["forum"]}, exact(len(comments_of(v, p["id"])))) for p in _posts(v)]


def _points(v: EpisodeView):
    return [({"title": p["title"], "forum": p["forum"]}, exact(p["score"])) for p in _posts(v)]


def _top(v: EpisodeView):
    return [({"forum": f}, include(forum_posts(v, f, "top")[0]["title"])) for f in _forums(v)]


def _vote(message: str):
    def instances(v: EpisodeView):
        return [({"title": p["title"]}, page_check(_post_url(p), "", include=[message])) for p in _posts(v)]

    return instances


def _reply(v: EpisodeView):
    out = []
    for p in _posts(v):
        text = values_rng(305, p["id"]).choice(NEW_COMMENTS)
        check = page_check(_post_url(p), text_of("#comments"), include=[f"{text} | by {me(v)}"])
        out.append(({"title": p["title"], "text": text}, check))
    return out


def _new_post(v: EpisodeView):
    return [
        (
            {"forum": forum, "title": f"Looking for advice on {subject}"},
            page_check(f"__REDDIT__/f/{forum}", "", include=[f"Looking for advice on {subject}"]),
        )
        for forum, subjects in vocab.FORUMS.items()
        for subject in subjects
    ]


def _post_count(v: EpisodeView):
    return [({"user": u}, exact(len(user_posts(v, u)))) for u in _users(v)]


def _forum_url(v: EpisodeView):
    return [({"forum": f}, at_url(f"__REDDIT__/f/{f}")) for f in _forums(v)]


def _user_url(v: EpisodeView):
    return [({"user": u}, at_url(f"__REDDIT__/u/{u}")) for u in _users(v)]


def _open_post(d: dict) -> list:
    return [Fill("Search posts", d["title"], submit=True), Click(d["title"], paged=True)]


def _listing(d: dict, capture: str) -> list:
    return [Click(f"f/{d['forum']}"), Answer(_row(d["title"], capture), paged=True)]


TEMPLATES = [
    Template(301, "reddit", 'Who posted "{title}" in f/{forum}?', _author, lambda d: _listing(d, "author")),
    Template(
        302,
        "reddit",
        'How many comments does the post "{title}" in f/{forum} have?',
        _comments,
        lambda d: _listing(d, "comments"),
    ),
    Template(
        303,
        "reddit",
        "What is the title of the top post in f/{forum}?",
        _top,
        lambda d: [Click(f"f/{d['forum']}"), Click("Top"), Answer(r"^(.+?) \| -?\d+ points \|")],
    ),
    Template(
        304,
        "reddit",
        'Upvote the post "{title}".',
        _vote("You upvoted this post."),
        lambda d: [*_open_post(d), Click("Upvote"), Done()],
    ),
    Template(
        305,
        "reddit",
        'Reply to the post "{title}" with the comment "{text}".',
        _reply,
        lambda d: [*_open_post(d), Fill("Write a comment", d["text"]), Click("Post comment"), Done()],
    ),
    Template(
        306,
        "reddit",
        'Create a post titled "{title}" in f/{forum}.',
        _new_post,
        lambda d: [
            Click("Submit a post"),
            Choose("forum", d["forum"]),
            Fill("Title", d["title"]),
            Click("Create post"),
            Done(),
        ],
    ),
    Template(
        307,
        "reddit",
        "How many posts has the user {user} made?",
        _post_count,
        lambda d: [Click("Users"), Answer(rf"^{re.escape(d['user'])} \| (\d+) posts?$", paged=True)],
    ),
    Template(308, "reddit", "Open the f/{forum} forum.", _forum_url, lambda d: [Click(f"f/{d['forum']}"), Done()]),
    Template(
        309,
        "reddit",
        "Go to the profile page of the user {user}.",
        _user_url,
        lambda d: [Click("Users"), Click(d["user"], paged=True), Done()],
    ),
    Template(
        310,
        "reddit",
        'Downvote the post "{title}".',
        _vote("You downvoted this post."),
        lambda d: [*_open_post(d), Click("Downvote"), Done()],
        held_out=True,
    ),
    Template(
        311,
        "reddit",
        'What is the score of the post "{title}" in f/{forum}?',
        _points,
        lambda d: _listing(d, "points"),
        held_out=True,
    ),
]
