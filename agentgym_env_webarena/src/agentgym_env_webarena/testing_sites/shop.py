"""A small web shop (stand-in for WebArena's Magento storefront): catalogue, search, product pages, cart.

The cart lives on the server, keyed by a session cookie, so it shows whether the browser's
cookies really are wiped between episodes.
"""

from __future__ import annotations

import html
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from urllib.parse import parse_qs

from agentgym_env_webarena.testing_sites.web import Page, Request, SiteHandler

__all__ = ["PRODUCTS", "Product", "ShopHandler", "product_by_name"]


@dataclass(frozen=True)
class Product:
    id: int
    name: str
    price: float
    description: str


_ADJECTIVES = ["Aurora", "Copper", "Granite", "Linen", "Maple", "Nordic", "Olive", "Pebble", "Saffron", "Willow"]
_NOUNS = ["Desk Lamp", "Kettle", "Throw Blanket", "Coffee Grinder", "Plant Pot", "Wall Clock"]

# 60 deterministic products: enough that the catalogue page scrolls past one viewport.
PRODUCTS: list[Product] = [
    Product(
        id=i + 1,
        name=f"{_ADJECTIVES[i % len(_ADJECTIVES)]} {_NOUNS[i // len(_ADJECTIVES)]}",
        price=round(9.99 + (i * 37 % 113) + 0.5 * (i % 3), 2),
        description=f"A {_NOUNS[i // len(_ADJECTIVES)].lower()} in the {_ADJECTIVES[i % len(_ADJECTIVES)]} range.",
    )
    for i in range(len(_ADJECTIVES) * len(_NOUNS))
]
_BY_ID = {p.id: p for p in PRODUCTS}


def _layout(title: str, body: str) -> str:
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:0}} header{{background:#234;color:#fff;padding:12px}}
header a{{color:#fff}} main{{padding:16px}} li{{margin:10px 0}}</style></head>
<body><header><a href="/">One Stop Shop</a> &middot; <a href="/cart">My Cart</a>
<form action="/search" method="get" role="search" style="display:inline;margin-left:24px">
<label for="q">Search products</label> <input id="q" name="q" type="search">
<button type="submit">Search</button></form></header><main>{body}</main></body></html>"""


class ShopHandler(SiteHandler):
    """Routes of the shop."""

    site_name = "shop"
    carts: OrderedDict[str, dict[int, int]] = OrderedDict()
    max_carts = 10_000

    def route(self, request: Request) -> Page:
        path = request.path
        if path == "/":
            items = "".join(
                f'<li><a href="/product/{p.id}">{html.escape(p.name)}</a></li>' for p in PRODUCTS
            )
            return Page(_layout("One Stop Shop", f"<h1>All products</h1><ul>{items}</ul>"))
        if path == "/search":
            query = request.query.get("q", [""])[0].strip()
            words = query.lower().split()
            hits = [p for p in PRODUCTS if words and all(w in p.name.lower() for w in words)]
            items = "".join(f'<li><a href="/product/{p.id}">{html.escape(p.name)}</a></li>' for p in hits)
            found = f"{len(hits)} results for '{html.escape(query)}'"
            return Page(_layout(f"Search results for: '{query}'", f"<h1>{found}</h1><ul>{items}</ul>"))
        if path.startswith("/product/"):
            product = _BY_ID.get(int(path.rsplit("/", 1)[1])) if path.rsplit("/", 1)[1].isdigit() else None
            if product is None:
                return Page(_layout("Not found", "<h1>Product not found</h1>"), status=404)
            body = f"""<h1>{html.escape(product.name)}</h1>
<p class="price">Price: <span>${product.price:.2f}</span></p><p>{html.escape(product.description)}</p>
<form action="/cart/add" method="post"><input type="hidden" name="product_id" value="{product.id}">
<label for="qty">Qty</label> <input id="qty" name="qty" type="number" value="1" min="1">
<button type="submit">Add to Cart</button></form>"""
            return Page(_layout(product.name, body))
        if path == "/cart/add" and request.method == "POST":
            form = parse_qs(request.body)
            product_id = int(form.get("product_id", ["0"])[0] or 0)
            qty = int(form.get("qty", ["1"])[0] or 1)
            session = request.cookies.get("shop_session") or uuid.uuid4().hex
            cart = self.carts.setdefault(session, {})
            self.carts.move_to_end(session)
            while len(self.carts) > self.max_carts:
                self.carts.popitem(last=False)
            if product_id in _BY_ID:
                cart[product_id] = cart.get(product_id, 0) + max(qty, 1)
            return Page("", status=302, headers={"Location": "/cart", "Set-Cookie": f"shop_session={session}; Path=/"})
        if path == "/cart":
            cart = self.carts.get(request.cookies.get("shop_session", ""), {})
            if not cart:
                return Page(_layout("Shopping Cart", "<h1>Shopping Cart</h1><p>You have no items in your shopping cart.</p>"))
            rows = "".join(
                f"<li>{html.escape(_BY_ID[pid].name)} &times; {n}</li>" for pid, n in sorted(cart.items())
            )
            return Page(_layout("Shopping Cart", f"<h1>Shopping Cart</h1><ul>{rows}</ul>"))
        return Page(_layout("Not found", "<h1>Page not found</h1>"), status=404)


def product_by_name(name: str) -> Product:
    """The product called `name` (for tests and task files)."""
    return next(p for p in PRODUCTS if p.name == name)

