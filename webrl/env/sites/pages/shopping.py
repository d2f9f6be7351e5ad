"""OneStopShop: the storefront (search, categories, product pages, reviews, cart, orders).

The shopper is always signed in as customer `SHOP_CUSTOMER_ID`. Query helpers at the top
(`search_products`, `my_orders`, ...) are used both by the pages and by the task templates, so a
task's reference answer is computed by the same code that renders the page the agent reads.
"""

from __future__ import annotations

from webrl.env.sites.data import SHOP_CUSTOMER_ID, Record
from webrl.env.sites.html import (
    esc,
    items,
    layout,
    link,
    money,
    pager,
    paginate,
    plural,
    post_form,
    search_form,
    select,
    text_input,
    textarea,
)
from webrl.env.sites.routing import HttpError, Redirect, Request, Routes, not_found
from webrl.env.sites.store import EpisodeView

routes = Routes("/shopping", "OneStopShop", [("/", "Home"), ("/cart", "My cart"), ("/orders", "My orders")])
SORTS = ["Name", "Price: low to high", "Price: high to low"]
STARS = ["5 stars", "4 stars", "3 stars", "2 stars", "1 star"]


def listed_products(view: EpisodeView) -> list[Record]:
    """Products the storefront shows: enabled ones (the admin can disable a product)."""
    return [p for p in view.rows("products") if p["status"] == "Enabled"]


def search_products(view: EpisodeView, query: str) -> list[Record]:
    """Products whose name contains every word of `query` (case-insensitive), exact name first."""
    words = query.lower().split()
    found = [p for p in listed_products(view) if all(w in p["name"].lower() for w in words)]
    return sorted(found, key=lambda p: (p["name"].lower() != query.lower(), p["name"]))


def category_products(view: EpisodeView, category: str, sort: str = "Name") -> list[Record]:
    found = [p for p in listed_products(view) if p["category"] == category]
    if sort == "Price: low to high":
        return sorted(found, key=lambda p: (p["price"], p["name"]))
    if sort == "Price: high to low":
        return sorted(found, key=lambda p: (-p["price"], p["name"]))
    return sorted(found, key=lambda p: p["name"])


def product_reviews(view: EpisodeView, product_id: int) -> list[Record]:
    return [r for r in view.rows("reviews") if r["product_id"] == product_id]


def my_orders(view: EpisodeView) -> list[Record]:
    """The signed-in customer's orders, newest first."""
    mine = [o for o in view.rows("orders") if o["customer_id"] == SHOP_CUSTOMER_ID]
    return sorted(mine, key=lambda o: (o["date"], o["id"]), reverse=True)


def category_slug(category: str) -> str:
    return category.lower()


def _categories(view: EpisodeView) -> dict[str, int]:
    counts: dict[str, int] = {}
    for product in listed_products(view):
        counts[product["category"]] = counts.get(product["category"], 0) + 1
    return counts


def product_link(req: Request, product_id: int, name: str) -> str:
    return link(req.url(f"/product/{product_id}"), name)


def _product_row(req: Request, product: Record) -> str:
    return f"{product_link(req, product['id'], product['name'])} | {money(product['price'])}"


def _product(req: Request, product_id: str) -> Record:
    product = req.view.get("products", int(product_id))
    if product is None or product["status"] != "Enabled":
        raise not_found(f"product {product_id}")
    return product


@routes.get(r"/?")
def home(req: Request) -> str:
    rows = [
        f"{link(req.url('/category/' + category_slug(name)), name)} | {count} products"
        for name, count in sorted(_categories(req.view).items())
    ]
    body = search_form(req.url("/search"), "Search products") + "<h2>Categories</h2>" + items(rows)
    return layout(req, "Welcome to OneStopShop", body)


@routes.get(r"/search")
def search(req: Request) -> str:
    query = req.arg("q")
    found = search_products(req.view, query) if query else []
    shown, pages = paginate(found, req.page_number())
    body = (
        search_form(req.url("/search"), "Search products", query)
        + f"<p>{plural(len(found), 'product')} found</p>"
        + items([_product_row(req, p) for p in shown], "No products match your search.")
        + pager(req, "/search", req.page_number(), pages, q=query)
    )
    return layout(req, f"Search results for {query!r}" if query else "Search", body)


@routes.get(r"/category/([a-z]+)")
def category(req: Request, slug: str) -> str:
    names = {category_slug(p["category"]): p["category"] for p in req.view.rows("products")}
    if slug not in names:
        raise not_found(f"category {slug}")
    sort = req.arg("sort") or "Name"
    if sort not in SORTS:
        sort = "Name"
    found = category_products(req.view, names[slug], sort)
    shown, pages = paginate(found, req.page_number())
    action = esc(req.url("/category/" + slug))
    sort_form = f'<form action="{action}">{select("sort", SORTS, sort)}<button>Sort</button></form>'
    body = (
        f"<p>{len(found)} products</p>"
        + sort_form
        + items([_product_row(req, p) for p in shown])
        + pager(req, f"/category/{slug}", req.page_number(), pages, sort=None if sort == "Name" else sort)
    )
    return layout(req, names[slug], body)


@routes.get(r"/product/(\d+)")
def product(req: Request, product_id: str) -> str:
    item = _product(req, product_id)
    reviews = product_reviews(req.view, item["id"])
    rating = f"{sum(r['rating'] for r in reviews) / len(reviews):.1f} out of 5" if reviews else "no rating yet"
    stock = f"In stock: {item['stock']}" if item["stock"] > 0 else "Out of stock"
    review_rows = [f"{esc(_stars(r['rating']))} by {esc(r['author'])}: {esc(r['text'])}" for r in reviews]
    body = (
        f"<p>Price: {money(item['price'])}</p><p>SKU: {esc(item['sku'])}</p>"
        f"<p>Category: {link(req.url('/category/' + category_slug(item['category'])), item['category'])}</p>"
        f"<p>{stock}</p><p>Rating: {rating} ({len(reviews)} reviews)</p>"
        + post_form(req.url(f"/product/{item['id']}/cart"), [text_input("qty", "Quantity", 1)], "Add to cart")
        + f"<h2>Reviews ({len(reviews)})</h2>"
        + items(review_rows, "No reviews yet.")
        + post_form(
            req.url(f"/product/{item['id']}/review"),
            [select("rating", STARS), textarea("text", "Write your review")],
            "Submit review",
        )
    )
    return layout(req, item["name"], body)


def _stars(rating: int) -> str:
    return f"{rating} star" + ("" if rating == 1 else "s")


@routes.post(r"/product/(\d+)/cart")
def add_to_cart(req: Request, product_id: str) -> Redirect:
    item = _product(req, product_id)
    qty = req.int_field("qty", 1, 99)
    line = req.view.get("cart", item["id"])
    req.view.put("cart", item["id"], {"product_id": item["id"], "qty": qty + (line["qty"] if line else 0)})
    return Redirect(req.url("/cart"))


@routes.post(r"/product/(\d+)/review")
def add_review(req: Request, product_id: str) -> Redirect:
    item = _product(req, product_id)
    stars = req.arg("rating")
    text = req.arg("text")
    if stars not in STARS or not text:
        raise HttpError(400, "a review needs a rating (one of the listed stars) and a text")
    me = req.view.get("customers", SHOP_CUSTOMER_ID)
    rid = req.view.next_id("reviews")
    review = {"id": rid, "product_id": item["id"], "author": me["name"], "rating": int(stars[0]), "text": text}
    req.view.put("reviews", rid, review)
    return Redirect(req.url(f"/product/{item['id']}"))


@routes.get(r"/cart")
def cart(req: Request) -> str:
    lines = [(req.view.get("products", c["product_id"]), c["qty"]) for c in req.view.rows("cart")]
    rows = [f"{product_link(req, p['id'], p['name'])} | Qty: {qty} | {money(qty * p['price'])}" for p, qty in lines]
    total = sum(qty * p["price"] for p, qty in lines)
    body = f'<div id="cart">{items(rows, "Your cart is empty.")}</div>'
    if lines:
        body += f"<p>Total: {money(total)}</p>" + post_form(req.url("/cart/empty"), [], "Empty cart")
        body += post_form(req.url("/checkout"), [], "Place order")
    return layout(req, "My cart", body)


@routes.post(r"/cart/empty")
def empty_cart(req: Request) -> Redirect:
    for line in req.view.rows("cart"):
        req.view.delete("cart", line["product_id"])
    return Redirect(req.url("/cart"))


@routes.post(r"/checkout")
def checkout(req: Request) -> Redirect:
    lines = req.view.rows("cart")
    if not lines:
        return Redirect(req.url("/cart"))
    order_items = []
    for line in lines:
        p = req.view.get("products", line["product_id"])
        order_items.append((p["id"], p["name"], line["qty"], p["price"]))
        req.view.delete("cart", line["product_id"])
    oid = req.view.next_id("orders")
    latest = max(o["date"] for o in req.view.rows("orders"))
    order = {
        "id": oid,
        "customer_id": SHOP_CUSTOMER_ID,
        "date": latest,
        "status": "Pending",
        "items": tuple(order_items),
        "total": round(sum(qty * price for _, _, qty, price in order_items), 2),
    }
    req.view.put("orders", oid, order)
    return Redirect(req.url(f"/order/{oid}"))


def order_row(req: Request, order: Record) -> str:
    label = link(req.url(f"/order/{order['id']}"), f"Order #{order['id']}")
    return f"{label} | {order['date']} | {money(order['total'])} | {esc(order['status'])}"


@routes.get(r"/orders")
def orders(req: Request) -> str:
    mine = my_orders(req.view)
    shown, pages = paginate(mine, req.page_number())
    body = items([order_row(req, o) for o in shown], "No orders yet.") + pager(req, "/orders", req.page_number(), pages)
    return layout(req, "My orders", body)


@routes.get(r"/order/(\d+)")
def order(req: Request, order_id: str) -> str:
    found = req.view.get("orders", int(order_id))
    if found is None or found["customer_id"] != SHOP_CUSTOMER_ID:
        raise not_found(f"order {order_id}")
    return _order_page(req, found)


@routes.get(r"/orders/latest")
def latest_order(req: Request) -> str:
    """The newest order of the shopper (what a checkout just created); evaluators read it."""
    return _order_page(req, my_orders(req.view)[0])


def _order_page(req: Request, found: Record) -> str:
    rows = [
        f"{product_link(req, pid, name)} | Qty: {qty} | {money(price)} each" for pid, name, qty, price in found["items"]
    ]
    body = (
        f"<p>Date: {found['date']}</p><p>Status: {esc(found['status'])}</p><p>Total: {money(found['total'])}</p>"
        f'<div id="items">{items(rows)}</div>'
    )
    return layout(req, f"Order #{found['id']}", body)
