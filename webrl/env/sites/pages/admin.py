"""Shop Admin: the store's back office (product grid and editor, orders, customers, reports).

It manages the same tables as the storefront, so a price set here shows in the shop within the
same episode. The dashboard carries the three search boxes so that most admin tasks start with a
single Search action, as a small model's tasks should.
"""

from __future__ import annotations

from webrl.env.sites.data import Record
from webrl.env.sites.html import (
    esc,
    items,
    layout,
    link,
    money,
    pager,
    paginate,
    post_button,
    post_form,
    search_form,
    select,
    text_input,
)
from webrl.env.sites.routing import HttpError, Redirect, Request, Routes, not_found
from webrl.env.sites.store import EpisodeView

routes = Routes(
    "/admin",
    "Shop Admin",
    [
        ("/", "Dashboard"),
        ("/products", "Products"),
        ("/orders", "Orders"),
        ("/customers", "Customers"),
        ("/reports", "Reports"),
    ],
)
STATUSES = ["Enabled", "Disabled"]
ORDER_STATES = ["Pending", "Processing", "Complete", "Canceled"]
CANCELLABLE = ("Pending", "Processing")


def find_products(view: EpisodeView, query: str) -> list[Record]:
    """Products whose name or SKU contains every word of `query` (case-insensitive), in id order."""
    words = query.lower().split()
    return [p for p in view.rows("products") if all(w in f"{p['name']} {p['sku']}".lower() for w in words)]


def find_customers(view: EpisodeView, query: str) -> list[Record]:
    words = query.lower().split()
    return [c for c in view.rows("customers") if all(w in f"{c['name']} {c['email']}".lower() for w in words)]


def find_orders(view: EpisodeView, query: str) -> list[Record]:
    """Orders whose number or customer name matches `query` ("#1012" and "1012" both work), newest first."""
    names = {c["id"]: c["name"].lower() for c in view.rows("customers")}
    words = query.lower().replace("#", "").split()
    found = [o for o in view.rows("orders") if all(w in f"{o['id']} {names[o['customer_id']]}" for w in words)]
    return sorted(found, key=lambda o: (o["date"], o["id"]), reverse=True)


def customer_orders(view: EpisodeView, customer_id: int) -> list[Record]:
    return [o for o in find_orders(view, "") if o["customer_id"] == customer_id]


def status_counts(view: EpisodeView) -> dict[str, int]:
    counts = dict.fromkeys(ORDER_STATES, 0)
    for order in view.rows("orders"):
        counts[order["status"]] += 1
    return counts


def bestsellers(view: EpisodeView, limit: int = 10) -> list[tuple[str, int]]:
    """(product name, units sold) over orders that were not canceled, most units first, then by name."""
    units: dict[str, int] = {}
    for order in view.rows("orders"):
        if order["status"] != "Canceled":
            for _, name, qty, _ in order["items"]:
                units[name] = units.get(name, 0) + qty
    return sorted(units.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]


@routes.get(r"/?")
def dashboard(req: Request) -> str:
    view = req.view
    body = (
        f"<p>Products: {len(view.rows('products'))} | Orders: {len(view.rows('orders'))} | "
        f"Customers: {len(view.rows('customers'))}</p>"
        + search_form(req.url("/products"), "Search products by name or SKU")
        + search_form(req.url("/orders"), "Search orders by number or customer")
        + search_form(req.url("/customers"), "Search customers by name or email")
    )
    return layout(req, "Dashboard", body)


def _grid(req: Request, path: str, title: str, placeholder: str, found: list, row, **params: object) -> str:
    query = req.arg("q")
    shown, pages = paginate(found, req.page_number())
    body = (
        search_form(req.url(path), placeholder, query)
        + f"<p>{len(found)} records found</p>"
        + items([row(req, r) for r in shown], "No records match.")
        + pager(req, path, req.page_number(), pages, q=query, **params)
    )
    return layout(req, title, body)


def _product_row(req: Request, p: Record) -> str:
    name = link(req.url(f"/product/{p['id']}"), p["name"])
    return f"{name} | SKU: {esc(p['sku'])} | {money(p['price'])} | Qty: {p['stock']} | {p['status']}"


@routes.get(r"/products")
def products(req: Request) -> str:
    found = find_products(req.view, req.arg("q"))
    return _grid(req, "/products", "Products", "Search products by name or SKU", found, _product_row)


def _product(req: Request, product_id: str) -> Record:
    found = req.view.get("products", int(product_id))
    if found is None:
        raise not_found(f"product {product_id}")
    return found


@routes.get(r"/product/(\d+)")
def edit_product(req: Request, product_id: str) -> str:
    p = _product(req, product_id)
    form = post_form(
        req.url(f"/product/{p['id']}"),
        [
            f"<p>Name: {text_input('name', 'Name', p['name'])}</p>",
            f"<p>Price: {text_input('price', 'Price', format(p['price'], '.2f'))}</p>",
            f"<p>Quantity: {text_input('stock', 'Quantity', p['stock'])}</p>",
            f"<p>Status: {select('status', STATUSES, p['status'])}</p>",
        ],
        "Save",
    )
    info = f"<p>SKU: {esc(p['sku'])} | Category: {esc(p['category'])}</p>"
    return layout(req, f"Edit product: {p['name']}", info + form, "Saved." if req.query.get("saved") else "")


@routes.post(r"/product/(\d+)")
def save_product(req: Request, product_id: str) -> Redirect:
    p = dict(_product(req, product_id))
    raw_price = req.arg("price").lstrip("$").replace(",", "")
    try:
        price = round(float(raw_price), 2)
    except ValueError:
        raise HttpError(400, f"price must be a number, got {raw_price!r}") from None
    if not 0 <= price <= 100000:
        raise HttpError(400, f"price must be between 0 and 100000, got {price}")
    status = req.arg("status") or p["status"]
    if status not in STATUSES:
        raise HttpError(400, f"status must be one of {STATUSES}, got {status!r}")
    name = req.arg("name") or p["name"]
    p.update(name=name, price=price, stock=req.int_field("stock", 0, 100000), status=status)
    req.view.put("products", p["id"], p)
    return Redirect(req.url(f"/product/{p['id']}", saved=1))


def _customer_name(req: Request, customer_id: int) -> str:
    return req.view.get("customers", customer_id)["name"]


def _order_row(req: Request, o: Record) -> str:
    number = link(req.url(f"/order/{o['id']}"), f"#{o['id']}")
    return (
        f"{number} | {esc(_customer_name(req, o['customer_id']))} | {o['date']} | {money(o['total'])} | {o['status']}"
    )


@routes.get(r"/orders")
def orders(req: Request) -> str:
    found = find_orders(req.view, req.arg("q"))
    return _grid(req, "/orders", "Orders", "Search orders by number or customer", found, _order_row)


@routes.get(r"/order/(\d+)")
def order(req: Request, order_id: str) -> str:
    o = req.view.get("orders", int(order_id))
    if o is None:
        raise not_found(f"order {order_id}")
    customer = link(req.url(f"/customer/{o['customer_id']}"), _customer_name(req, o["customer_id"]))
    lines = [f"{esc(name)} | Qty: {qty} | {money(price)} each" for _, name, qty, price in o["items"]]
    body = (
        f"<p>Customer: {customer}</p><p>Date: {o['date']}</p><p>Total: {money(o['total'])}</p>"
        f'<p id="order-status">Status: {o["status"]}</p>' + items(lines)
    )
    if o["status"] in CANCELLABLE:
        body += post_button(req.url(f"/order/{o['id']}/cancel"), "Cancel order")
    return layout(req, f"Order #{o['id']}", body)


@routes.post(r"/order/(\d+)/cancel")
def cancel_order(req: Request, order_id: str) -> Redirect:
    o = req.view.get("orders", int(order_id))
    if o is None:
        raise not_found(f"order {order_id}")
    if o["status"] not in CANCELLABLE:
        raise HttpError(400, f"order #{order_id} is {o['status']} and cannot be canceled")
    req.view.put("orders", o["id"], {**o, "status": "Canceled"})
    return Redirect(req.url(f"/order/{o['id']}"))


def _customer_row(req: Request, c: Record) -> str:
    name = link(req.url(f"/customer/{c['id']}"), c["name"])
    return f"{name} | {esc(c['email'])} | {esc(c['city'])}"


@routes.get(r"/customers")
def customers(req: Request) -> str:
    found = find_customers(req.view, req.arg("q"))
    return _grid(req, "/customers", "Customers", "Search customers by name or email", found, _customer_row)


@routes.get(r"/customer/(\d+)")
def customer(req: Request, customer_id: str) -> str:
    c = req.view.get("customers", int(customer_id))
    if c is None:
        raise not_found(f"customer {customer_id}")
    placed = customer_orders(req.view, c["id"])
    shown, pages = paginate(placed, req.page_number())
    body = (
        f"<p>Email: {esc(c['email'])}</p><p>City: {esc(c['city'])}</p><p>Orders placed: {len(placed)}</p>"
        + items([_order_row(req, o) for o in shown], "No orders.")
        + pager(req, f"/customer/{c['id']}", req.page_number(), pages)
    )
    return layout(req, c["name"], body)


@routes.get(r"/reports")
def reports(req: Request) -> str:
    best = [f"#{rank} {esc(name)} | {units} units" for rank, (name, units) in enumerate(bestsellers(req.view), 1)]
    states = [f"{state}: {count}" for state, count in status_counts(req.view).items()]
    body = "<h2>Bestsellers</h2>" + items(best) + "<h2>Orders by status</h2>" + items(states)
    return layout(req, "Reports", body)
