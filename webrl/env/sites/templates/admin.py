"""Templates of Shop Admin (site "shopping_admin"): stock, SKUs, customers, orders, edits, reports."""

from __future__ import annotations

import re

from webrl.env.sites.moves import Answer, Choose, Click, Done, Fill
from webrl.env.sites.pages.admin import CANCELLABLE, ORDER_STATES, bestsellers, customer_orders, status_counts
from webrl.env.sites.store import EpisodeView
from webrl.env.sites.templates.base import Template, at_url, exact, include, page_check, text_of, value_of, values_rng

PRODUCTS = "Search products by name or SKU"
ORDERS = "Search orders by number or customer"
CUSTOMERS = "Search customers by name or email"


def _products(v: EpisodeView) -> list:
    return sorted(v.rows("products"), key=lambda p: p["id"])


def _customers(v: EpisodeView) -> list:
    return sorted(v.rows("customers"), key=lambda c: c["id"])


def _product_row(name: str, field: str) -> str:
    """Pattern of a grid row "Name | SKU: X | $1.00 | Qty: 3 | Enabled" capturing one field."""
    sku = r"(\S+)" if field == "sku" else r"\S+"
    qty = r"(\d+)" if field == "qty" else r"\d+"
    return rf"^{re.escape(name)} \| SKU: {sku} \| \$[\d,.]+ \| Qty: {qty} \|"


def _open_product(d: dict) -> list:
    return [Fill(PRODUCTS, d["product"], submit=True), Click(d["product"])]


def _stock(v: EpisodeView):
    return [({"product": p["name"]}, exact(p["stock"])) for p in _products(v)]


def _sku(v: EpisodeView):
    return [({"product": p["name"]}, exact(p["sku"])) for p in _products(v)]


def _email(v: EpisodeView):
    return [({"customer": c["name"]}, exact(c["email"])) for c in _customers(v)]


def _order_count(v: EpisodeView):
    return [({"customer": c["name"]}, exact(len(customer_orders(v, c["id"])))) for c in _customers(v)]


def _edit_page(p: dict) -> str:
    return f"__SHOPPING_ADMIN__/product/{p['id']}"


def _set_price(v: EpisodeView):
    out = []
    for p in _products(v):
        rng = values_rng(205, p["id"])
        price = round(p["price"] * rng.choice([0.8, 0.9, 1.1, 1.25]), 0) + 0.99
        out.append(
            (
                {"product": p["name"], "price": f"{price:.2f}"},
                page_check(_edit_page(p), value_of("price"), exact=f"{price:.2f}"),
            )
        )
    return out


def _disable(v: EpisodeView):
    enabled = [p for p in _products(v) if p["status"] == "Enabled"]
    return [({"product": p["name"]}, page_check(_edit_page(p), value_of("status"), exact="Disabled")) for p in enabled]


def _set_stock(v: EpisodeView):
    out = []
    for p in _products(v):
        qty = values_rng(207, p["id"]).choice([q for q in (0, 25, 50, 75, 100, 200) if q != p["stock"]])
        out.append(({"product": p["name"], "qty": qty}, page_check(_edit_page(p), value_of("stock"), exact=str(qty))))
    return out


def _orders(v: EpisodeView) -> list:
    return sorted(v.rows("orders"), key=lambda o: o["id"])


def _order_status(v: EpisodeView):
    return [({"order": o["id"]}, exact(o["status"])) for o in _orders(v)]


def _cancel(v: EpisodeView):
    return [
        (
            {"order": o["id"]},
            page_check(f"__SHOPPING_ADMIN__/order/{o['id']}", text_of("#order-status"), exact="Status: Canceled"),
        )
        for o in _orders(v)
        if o["status"] in CANCELLABLE
    ]


def _bestseller(v: EpisodeView):
    return [({"rank": rank}, include(name)) for rank, (name, _) in enumerate(bestsellers(v), 1)]


def _status_count(v: EpisodeView):
    counts = status_counts(v)
    return [({"status": state}, exact(counts[state])) for state in ORDER_STATES]


def _edit_url(v: EpisodeView):
    return [({"product": p["name"]}, at_url(_edit_page(p))) for p in _products(v)]


def _customer_url(v: EpisodeView):
    return [({"customer": c["name"]}, at_url(f"__SHOPPING_ADMIN__/customer/{c['id']}")) for c in _customers(v)]


def _save(d: dict, *moves) -> list:
    return [*_open_product(d), *moves, Click("Save"), Done()]


TEMPLATES = [
    Template(
        201,
        "shopping_admin",
        "How many units of {product} are in stock?",
        _stock,
        lambda d: [Fill(PRODUCTS, d["product"], True), Answer(_product_row(d["product"], "qty"))],
    ),
    Template(
        202,
        "shopping_admin",
        "What is the SKU of {product}?",
        _sku,
        lambda d: [Fill(PRODUCTS, d["product"], True), Answer(_product_row(d["product"], "sku"))],
        held_out=True,
    ),
    Template(
        203,
        "shopping_admin",
        "What is the email address of the customer {customer}?",
        _email,
        lambda d: [Fill(CUSTOMERS, d["customer"], True), Answer(rf"^{re.escape(d['customer'])} \| (\S+@\S+) \|")],
    ),
    Template(
        204,
        "shopping_admin",
        "How many orders has the customer {customer} placed?",
        _order_count,
        lambda d: [Fill(CUSTOMERS, d["customer"], True), Click(d["customer"]), Answer(r"^Orders placed: (\d+)$")],
    ),
    Template(
        205,
        "shopping_admin",
        "Set the price of {product} to ${price}.",
        _set_price,
        lambda d: _save(d, Fill("Price", d["price"])),
    ),
    Template(
        206,
        "shopping_admin",
        "Disable the product {product}.",
        _disable,
        lambda d: _save(d, Choose("status", "Disabled")),
    ),
    Template(
        207,
        "shopping_admin",
        "Change the stock quantity of {product} to {qty}.",
        _set_stock,
        lambda d: _save(d, Fill("Quantity", str(d["qty"]))),
    ),
    Template(
        208,
        "shopping_admin",
        "What is the status of order #{order}?",
        _order_status,
        lambda d: [Fill(ORDERS, str(d["order"]), True), Answer(rf"^#{d['order']} \| .* \| (\w+)$")],
    ),
    Template(
        209,
        "shopping_admin",
        "Which product is ranked #{rank} in the bestsellers report?",
        _bestseller,
        lambda d: [Click("Reports"), Answer(rf"^#{d['rank']} (.+?) \| \d+ units$")],
        held_out=True,
    ),
    Template(
        210,
        "shopping_admin",
        "How many orders have the status {status}?",
        _status_count,
        lambda d: [Click("Reports"), Answer(rf"^{d['status']}: (\d+)$")],
    ),
    Template(
        211,
        "shopping_admin",
        "Cancel order #{order}.",
        _cancel,
        lambda d: [Fill(ORDERS, str(d["order"]), True), Click(f"#{d['order']}"), Click("Cancel order"), Done()],
    ),
    Template(
        212,
        "shopping_admin",
        "Open the edit page of the product {product}.",
        _edit_url,
        lambda d: [*_open_product(d), Done()],
    ),
    Template(
        213,
        "shopping_admin",
        "Show me the details page of the customer {customer}.",
        _customer_url,
        lambda d: [Fill(CUSTOMERS, d["customer"], True), Click(d["customer"]), Done()],
    ),
]
