"""A small forum (stand-in for WebArena's Postmill "reddit"): forums, posts, comments."""

from __future__ import annotations

import html
from dataclasses import dataclass

from agentgym_env_webarena.testing_sites.web import Page, Request, SiteHandler

__all__ = ["FORUMS", "ForumHandler", "Post"]


@dataclass(frozen=True)
class Post:
    id: int
    forum: str
    title: str
    author: str
    body: str
    comments: tuple[str, ...]


FORUMS: dict[str, list[Post]] = {
    "gardening": [
        Post(1, "gardening", "Tomatoes in pots", "ana_grows", "Twelve-litre pots work best for me.",
             ("Agreed, bigger is better.", "What soil do you use?")),
        Post(2, "gardening", "Best compost mix", "leafmould", "Two parts brown, one part green.",
             ("Add some coffee grounds.", "Turn it weekly.", "Worms help a lot.")),
        Post(3, "gardening", "Pruning roses in spring", "thorny_tom", "Cut above an outward-facing bud.", ()),
    ],
    "books": [
        Post(4, "books", "What are you reading this week?", "pageturner", "I'm halfway through a long novel.",
             ("A collection of essays.",)),
        Post(5, "books", "Favourite science fiction of the decade", "nebula42", "Make your case below.",
             ("Anything with generation ships.", "Short stories count too?")),
    ],
    "cooking": [
        Post(6, "cooking", "Sourdough starter smells odd", "crumb_shot", "It smells like nail polish.",
             ("Feed it more often.", "That is normal when hungry.", "Discard half first.", "Keep it warmer.")),
    ],
}
_POSTS = {post.id: post for posts in FORUMS.values() for post in posts}


def _layout(title: str, body: str) -> str:
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title></head>
<body><nav><a href="/">Postmill</a> &middot; <a href="/forums">Forums</a></nav><main>{body}</main></body></html>"""


class ForumHandler(SiteHandler):
    """Routes of the forum."""

    site_name = "forum"

    def route(self, request: Request) -> Page:
        parts = [p for p in request.path.split("/") if p]
        if not parts or parts == ["forums"]:
            items = "".join(
                f'<li><a href="/f/{name}">{name}</a> ({len(posts)} posts)</li>' for name, posts in FORUMS.items()
            )
            return Page(_layout("Forums", f"<h1>Forums</h1><ul>{items}</ul>"))
        if parts[0] == "f" and len(parts) == 2 and parts[1] in FORUMS:
            items = "".join(
                f'<li><a href="/f/{p.forum}/{p.id}">{html.escape(p.title)}</a> by {p.author}</li>'
                for p in FORUMS[parts[1]]
            )
            return Page(_layout(f"/f/{parts[1]}", f"<h1>/f/{parts[1]}</h1><ul>{items}</ul>"))
        if parts[0] == "f" and len(parts) == 3 and parts[2].isdigit() and int(parts[2]) in _POSTS:
            post = _POSTS[int(parts[2])]
            comments = "".join(f"<li>{html.escape(c)}</li>" for c in post.comments)
            body = (
                f"<article><h1>{html.escape(post.title)}</h1><p>Submitted by <a href='/user/{post.author}'>"
                f"{post.author}</a> in /f/{post.forum}</p><p>{html.escape(post.body)}</p></article>"
                f"<h2>{len(post.comments)} comments</h2><ul>{comments}</ul>"
            )
            return Page(_layout(post.title, body))
        if parts[0] == "user" and len(parts) == 2:
            mine = [p for p in _POSTS.values() if p.author == parts[1]]
            items = "".join(f'<li><a href="/f/{p.forum}/{p.id}">{html.escape(p.title)}</a></li>' for p in mine)
            return Page(_layout(parts[1], f"<h1>{parts[1]}</h1><ul>{items}</ul>"))
        return Page(_layout("Not found", "<h1>Page not found</h1>"), status=404)
