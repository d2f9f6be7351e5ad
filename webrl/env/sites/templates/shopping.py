"""Templates of OneStopShop (site "shopping"): prices, reviews, orders, categories, cart, checkout."""

from __future__ import annotations

import re

from webrl.env.sites.data import SHOP_CUSTOMER_ID
from webrl.env.sites.moves import Answer, Choose, Click, Done, Fill
from webrl.env.sites.pages.shopping import category_products, category_slug, listed_products, my_orders, product_reviews
from webrl.env.sites.store import EpisodeView
from webrl.env.sites.templates.base import Template, at_url, exact, include, page_check, text_of, values_rng

SEARCH = "Search products"
NEW_REVIEWS = ["Arrived quickly and works well", "Great gift idea", "Cheap feel but does the job", "Love the design"]


def _search(product: str) -> list:
    return [Fill(SEARCH, product, submit=True), Click(product)]


def _products(view: EpisodeView) -> list:
    return sorted(listed_products(view), key=lambda p: p["id"])


def _categories(view: EpisodeView) -> list[str]:
    return sorted({p["category"] for p in listed_products(view)})


def _price(v: EpisodeView):
    return [({"product": p["name"]}, include(f"{p['price']:,.2f}")) for p in _products(v)]


def _review_count(v: EpisodeView):
    return [({"product": p["name"]}, exact(len(product_reviews(v, p["id"])))) for p in _products(v)]


def _order_total(v: EpisodeView):
    return [({"order": o["id"]}, include(f"{o['total']:,.2f}")) for o in my_orders(v)]


def _order_status(v: EpisodeView):
    return [({"order": o["id"]}, exact(o["status"])) for o in my_orders(v)]


def _cheapest(v: EpisodeView):
    return [
        ({"category": c}, include(category_products(v, c, "Price: low to high")[0]["name"])) for c in _categories(v)
    ]


def _dearest(v: EpisodeView):
    return [
        ({"category": c}, include(category_products(v, c, "Price: high to low")[0]["name"])) for c in _categories(v)
    ]


def _category_count(v: EpisodeView):
    return [({"category": c}, exact(len(category_products(v, c)))) for c in _categories(v)]


def _product_page(v: EpisodeView):
    return [({"product": p["name"]}, at_url(f"__SHOPPING__/product/{p['id']}")) for p in _products(v)]


def _category_page(v: EpisodeView):
    return [({"category": c}, at_url(f"__SHOPPING__/category/{category_slug(c)}")) for c in _categories(v)]


def _in_cart(name: str, qty: int) -> dict:
    # The trailing " |" stops "Qty: 1" from matching "Qty: 12".
    return page_check("__SHOPPING__/cart", text_of("#cart"), include=[f"{name} | Qty: {qty} |"])


def _add_one(v: EpisodeView):
    return [({"product": p["name"]}, _in_cart(p["name"], 1)) for p in _products(v)]


def _add_many(v: EpisodeView):
    out = []
    for p in _products(v):
        qty = values_rng(110, p["id"]).randint(2, 5)
        out.append(({"qty": qty, "product": p["name"]}, _in_cart(p["name"], qty)))
    return out


def _buy(v: EpisodeView):
    latest = {name for _, name, _, _ in my_orders(v)[0]["items"]}
    check = "__SHOPPING__/orders/latest"
    return [
        ({"product": p["name"]}, page_check(check, text_of("#items"), include=[f"{p['name']} | Qty: 1 |"]))
        for p in _products(v)
        if p["name"] not in latest and p["stock"] > 0
    ]


def _review(v: EpisodeView):
    me = v.get("customers", SHOP_CUSTOMER_ID)["name"]
    out = []
    for p in _products(v):
        rng = values_rng(112, p["id"])
        stars, text = rng.randint(2, 5), rng.choice(NEW_REVIEWS)
        check = page_check(f"__SHOPPING__/product/{p['id']}", "", include=[f"{stars} stars by {me}: {text}"])
        out.append(({"stars": stars, "product": p["name"], "text": text}, check))
    return out


def _row(name: str) -> str:
    """Pattern of a product row "Name | $12.99" capturing the price."""
    return rf"^{re.escape(name)} \| (\$[\d,.]+)$"


TEMPLATES = [
    Template(
        101,
        "shopping",
        "What is the price of {product}?",
        _price,
        lambda d: [Fill(SEARCH, d["product"], True), Answer(_row(d["product"]))],
    ),
    Template(
        102,
        "shopping",
        "How many reviews does {product} have?",
        _review_count,
        lambda d: [*_search(d["product"]), Answer(r"^Reviews \((\d+)\)$")],
    ),
    Template(
        103,
        "shopping",
        "What was the total of my order #{order}?",
        _order_total,
        lambda d: [Click("My orders"), Answer(rf"^Order #{d['order']} \| \S+ \| (\$[\d,.]+) \|", paged=True)],
    ),
    Template(
        104,
        "shopping",
        "What is the status of my order #{order}?",
        _order_status,
        lambda d: [Click("My orders"), Answer(rf"^Order #{d['order']} \| .* \| (\w+)$", paged=True)],
        held_out=True,
    ),
    Template(
        105,
        "shopping",
        "What is the cheapest product in the {category} category?",
        _cheapest,
        lambda d: [
            Click(d["category"]),
            Choose("sort", "Price: low to high"),
            Click("Sort"),
            Answer(r"^(.+?) \| \$[\d,.]+$"),
        ],
    ),
    Template(
        106,
        "shopping",
        "What is the most expensive product in the {category} category?",
        _dearest,
        lambda d: [
            Click(d["category"]),
            Choose("sort", "Price: high to low"),
            Click("Sort"),
            Answer(r"^(.+?) \| \$[\d,.]+$"),
        ],
        held_out=True,
    ),
    Template(
        107,
        "shopping",
        "Open the product page of {product}.",
        _product_page,
        lambda d: [*_search(d["product"]), Done()],
    ),
    Template(
        108,
        "shopping",
        "Show me the products in the {category} category.",
        _category_page,
        lambda d: [Click(d["category"]), Done()],
    ),
    Template(
        109,
        "shopping",
        "Add {product} to my cart.",
        _add_one,
        lambda d: [*_search(d["product"]), Click("Add to cart"), Done()],
    ),
    Template(
        110,
        "shopping",
        "Add {qty} units of {product} to my cart.",
        _add_many,
        lambda d: [*_search(d["product"]), Fill("Quantity", str(d["qty"])), Click("Add to cart"), Done()],
    ),
    Template(
        111,
        "shopping",
        "Buy one {product} and place the order.",
        _buy,
        lambda d: [*_search(d["product"]), Click("Add to cart"), Click("Place order"), Done()],
    ),
    Template(
        112,
        "shopping",
        'Leave a {stars}-star review of {product} saying "{text}".',
        _review,
        lambda d: [
            *_search(d["product"]),
            Choose("rating", f"{d['stars']} stars"),
            Fill("Write your review", d["text"]),
            Click("Submit review"),
            Done(),
        ],
        held_out=True,
    ),
    Template(
        113,
        "shopping",
        "How many products are in the {category} category?",
        _category_count,
        lambda d: [Answer(rf"^{re.escape(d['category'])} \| (\d+) products$")],
    ),
]
