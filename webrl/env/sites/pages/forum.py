"""Forum: a reddit-like site (forums, posts, comments, votes, users, new posts).

The visitor is signed in as the first seeded user (`me`), who has no posts in the base data.
Listing rows read "title | N points | by user | N comments" so that an agent (and the reference
solver) can answer questions about a post from the listing alone.
"""

from __future__ import annotations

from webrl.env.sites.data import Record
from webrl.env.sites.html import (
    esc,
    items,
    layout,
    link,
    pager,
    paginate,
    plural,
    post_button,
    post_form,
    search_form,
    select,
    text_input,
    textarea,
)
from webrl.env.sites.routing import HttpError, Redirect, Request, Routes, not_found
from webrl.env.sites.store import EpisodeView

routes = Routes("/forum", "Forum", [("/", "Forums"), ("/users", "Users"), ("/submit", "Submit a post")])
SORTS = {"new": "New", "top": "Top"}


def me(view: EpisodeView) -> str:
    return view.rows("users")[0]["username"]


def score(view: EpisodeView, post: Record) -> int:
    """The post's score including this episode's own vote."""
    vote = view.get("votes", post["id"])
    return post["score"] + (vote["value"] if vote else 0)


def comments_of(view: EpisodeView, post_id: int) -> list[Record]:
    return [c for c in view.rows("comments") if c["post_id"] == post_id]


def forum_posts(view: EpisodeView, forum: str, sort: str = "new") -> list[Record]:
    """A forum's posts, newest first ("new") or highest score first ("top"); ties by id."""
    found = [p for p in view.rows("posts") if p["forum"] == forum]
    if sort == "top":
        return sorted(found, key=lambda p: (-score(view, p), p["id"]))
    return sorted(found, key=lambda p: (p["date"], p["id"]), reverse=True)


def user_posts(view: EpisodeView, username: str) -> list[Record]:
    return sorted((p for p in view.rows("posts") if p["author"] == username), key=lambda p: p["id"], reverse=True)


def search_posts(view: EpisodeView, query: str) -> list[Record]:
    """Posts whose title contains every word of `query` (case-insensitive), exact title first."""
    words = query.lower().split()
    found = [p for p in view.rows("posts") if all(w in p["title"].lower() for w in words)]
    return sorted(found, key=lambda p: p["title"].lower() != query.lower())


def post_row(req: Request, post: Record, show_forum: bool = False) -> str:
    where = f" | f/{post['forum']}" if show_forum else ""
    count = len(comments_of(req.view, post["id"]))
    title = link(req.url(f"/post/{post['id']}"), post["title"])
    return f"{title}{where} | {score(req.view, post)} points | by {esc(post['author'])} | {plural(count, 'comment')}"


@routes.get(r"/?")
def home(req: Request) -> str:
    counts: dict[str, int] = {}
    for post in req.view.rows("posts"):
        counts[post["forum"]] = counts.get(post["forum"], 0) + 1
    rows = [
        f"{link(req.url('/f/' + f['name']), 'f/' + f['name'])} | {counts.get(f['name'], 0)} posts"
        for f in req.view.rows("forums")
    ]
    body = search_form(req.url("/search"), "Search posts") + items(rows)
    return layout(req, "Forums", body)


@routes.get(r"/search")
def search(req: Request) -> str:
    query = req.arg("q")
    found = search_posts(req.view, query) if query else []
    shown, pages = paginate(found, req.page_number())
    body = (
        search_form(req.url("/search"), "Search posts", query)
        + f"<p>{len(found)} posts found</p>"
        + items([post_row(req, p, show_forum=True) for p in shown], "No posts match your search.")
        + pager(req, "/search", req.page_number(), pages, q=query)
    )
    return layout(req, "Search posts", body)


@routes.get(r"/f/([a-z]+)")
def forum(req: Request, name: str) -> str:
    if req.view.get("forums", name) is None:
        raise not_found(f"forum f/{name}")
    sort = req.query.get("sort", "new")
    if sort not in SORTS:
        sort = "new"
    posts = forum_posts(req.view, name, sort)
    shown, pages = paginate(posts, req.page_number())
    sorts = " ".join(
        esc(text) if key == sort else link(req.url(f"/f/{name}", sort=None if key == "new" else key), text)
        for key, text in SORTS.items()
    )
    body = (
        f"<p>Sort: {sorts} | {link(req.url('/submit', forum=name), 'Submit a post')}</p>"
        + items([post_row(req, p) for p in shown], "No posts yet.")
        + pager(req, f"/f/{name}", req.page_number(), pages, sort=None if sort == "new" else sort)
    )
    return layout(req, f"f/{name}", body)


def _post(req: Request, post_id: str) -> Record:
    found = req.view.get("posts", int(post_id))
    if found is None:
        raise not_found(f"post {post_id}")
    return found


@routes.get(r"/post/(\d+)")
def post(req: Request, post_id: str) -> str:
    p = _post(req, post_id)
    vote = req.view.get("votes", p["id"])
    voted = {1: "You upvoted this post.", -1: "You downvoted this post."}.get(vote["value"] if vote else 0, "")
    comments = comments_of(req.view, p["id"])
    rows = [f"{esc(c['text'])} | by {esc(c['author'])} | {c['score']} points" for c in comments]
    author = link(req.url(f"/u/{p['author']}"), p["author"])
    where = link(req.url(f"/f/{p['forum']}"), f"f/{p['forum']}")
    body = (
        f"<p>Posted by {author} in {where} on {p['date']}</p><p>{esc(p['body'])}</p>"
        f'<p id="score">Score: {score(req.view, p)} points</p>'
        + (f'<p id="vote">{voted}</p>' if voted else "")
        + post_button(req.url(f"/post/{p['id']}/upvote"), "Upvote")
        + post_button(req.url(f"/post/{p['id']}/downvote"), "Downvote")
        + f'<h2>Comments ({len(comments)})</h2><div id="comments">{items(rows, "No comments yet.")}</div>'
        + post_form(req.url(f"/post/{p['id']}/comment"), [textarea("text", "Write a comment")], "Post comment")
    )
    return layout(req, p["title"], body)


def _vote(req: Request, post_id: str, value: int) -> Redirect:
    p = _post(req, post_id)
    current = req.view.get("votes", p["id"])
    if current is not None and current["value"] == value:
        req.view.delete("votes", p["id"])  # voting the same way twice takes the vote back, like reddit
    else:
        req.view.put("votes", p["id"], {"post_id": p["id"], "value": value})
    return Redirect(req.url(f"/post/{p['id']}"))


@routes.post(r"/post/(\d+)/upvote")
def upvote(req: Request, post_id: str) -> Redirect:
    return _vote(req, post_id, 1)


@routes.post(r"/post/(\d+)/downvote")
def downvote(req: Request, post_id: str) -> Redirect:
    return _vote(req, post_id, -1)


@routes.post(r"/post/(\d+)/comment")
def comment(req: Request, post_id: str) -> Redirect:
    p = _post(req, post_id)
    text = req.arg("text")
    if not text:
        raise HttpError(400, "a comment needs a text")
    cid = req.view.next_id("comments")
    req.view.put("comments", cid, {"id": cid, "post_id": p["id"], "author": me(req.view), "text": text, "score": 1})
    return Redirect(req.url(f"/post/{p['id']}"))


@routes.get(r"/users")
def users(req: Request) -> str:
    everyone = sorted(u["username"] for u in req.view.rows("users"))
    shown, pages = paginate(everyone, req.page_number())
    rows = [f"{link(req.url('/u/' + u), u)} | {plural(len(user_posts(req.view, u)), 'post')}" for u in shown]
    return layout(req, "Users", items(rows) + pager(req, "/users", req.page_number(), pages))


@routes.get(r"/u/([a-z_]+)")
def user(req: Request, username: str) -> str:
    u = req.view.get("users", username)
    if u is None:
        raise not_found(f"user {username}")
    posts = user_posts(req.view, username)
    shown, pages = paginate(posts, req.page_number())
    karma = sum(score(req.view, p) for p in posts)
    n_comments = sum(1 for c in req.view.rows("comments") if c["author"] == username)
    body = (
        f"<p>Joined: {u['joined']}</p><p>Posts: {len(posts)} | Comments: {n_comments} | Karma: {karma}</p>"
        + items([post_row(req, p, show_forum=True) for p in shown], "No posts yet.")
        + pager(req, f"/u/{username}", req.page_number(), pages)
    )
    return layout(req, username, body)


@routes.get(r"/submit")
def submit_form(req: Request) -> str:
    names = [f["name"] for f in req.view.rows("forums")]
    chosen = req.arg("forum")
    form = post_form(
        req.url("/submit"),
        [
            f"<p>Forum: {select('forum', names, chosen if chosen in names else names[0])}</p>",
            f"<p>{text_input('title', 'Title')}</p>",
            f"<p>{textarea('body', 'Text (optional)')}</p>",
        ],
        "Create post",
    )
    return layout(req, "Submit a post", form)


@routes.post(r"/submit")
def submit(req: Request) -> Redirect:
    forum_name = req.arg("forum")
    title = req.arg("title")
    if req.view.get("forums", forum_name) is None:
        raise HttpError(400, f"forum must be one of the listed forums, got {forum_name!r}")
    if not title:
        raise HttpError(400, "a post needs a title")
    pid = req.view.next_id("posts")
    latest = max(p["date"] for p in req.view.rows("posts"))
    new = {"id": pid, "forum": forum_name, "title": title, "body": req.arg("body"), "author": me(req.view), "score": 1}
    req.view.put("posts", pid, {**new, "date": latest})
    return Redirect(req.url(f"/post/{pid}"))
