"""The accessibility-tree observation, built from CDP as WebArena builds it.

Playwright 1.65 removed `page.accessibility`, so the tree comes straight from Chromium:
`Accessibility.getFullAXTree` gives roles, names and properties, and `DOMSnapshot.captureSnapshot`
gives every laid-out node's box in one round trip, which is what viewport-only filtering needs
(one `DOM.getBoxModel` per node would cost a round trip each).

Element ids are small integers assigned per page in order of first appearance, so the same page
reached by the same actions always shows the same ids (Chromium's backend node ids depend on
which renderer process served the page), and an element keeps its id across scrolls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ElementIds", "Viewport", "render_tree"]

# Nodes that only structure the page: without a name they print nothing, their children move up.
_STRUCTURAL_ROLES = {
    "generic", "none", "presentation", "paragraph", "LabelText", "list", "listitem", "strong",
    "emphasis", "Section", "Legend", "banner", "navigation", "contentinfo", "main", "img",
    "group", "ListMarker", "superscript", "subscript", "time", "Abbr", "mark",
}
# Never printed, never descended into: the same text again, split into line boxes.
_DROPPED_ROLES = {"InlineTextBox", "LineBreak", "ListMarker"}
# Properties worth the tokens (WebArena prints all but a few; these are the ones agents use).
_SHOWN_PROPERTIES = ("focused", "checked", "selected", "expanded", "pressed", "disabled", "required", "hasPopup")


@dataclass(frozen=True)
class Viewport:
    """The visible rectangle in document coordinates."""

    x: float
    y: float
    width: float
    height: float

    def intersects(self, box: tuple[float, float, float, float]) -> bool:
        bx, by, bw, bh = box
        if bw <= 0 or bh <= 0:
            return False
        return bx < self.x + self.width and bx + bw > self.x and by < self.y + self.height and by + bh > self.y


@dataclass
class ElementIds:
    """Backend DOM node id <-> the small id the agent sees, for one page (document)."""

    root_backend_id: int | None = None
    to_small: dict[int, int] = field(default_factory=dict)
    to_backend: dict[int, int] = field(default_factory=dict)

    def for_document(self, root_backend_id: int | None) -> None:
        """Start numbering afresh when the page's document changed (a navigation)."""
        if root_backend_id != self.root_backend_id:
            self.root_backend_id = root_backend_id
            self.to_small.clear()
            self.to_backend.clear()

    def small_id(self, backend_id: int) -> int:
        small = self.to_small.get(backend_id)
        if small is None:
            small = len(self.to_small) + 1
            self.to_small[backend_id] = small
            self.to_backend[small] = backend_id
        return small


def layout_boxes(snapshot: dict[str, Any]) -> tuple[dict[int, tuple[float, float, float, float]], float, float]:
    """Backend node id -> (x, y, w, h) of the main document, plus its scroll offsets."""
    documents = snapshot.get("documents") or []
    if not documents:
        return {}, 0.0, 0.0
    doc = documents[0]
    backend_ids = doc["nodes"].get("backendNodeId", [])
    layout = doc.get("layout", {})
    boxes: dict[int, tuple[float, float, float, float]] = {}
    for node_index, bounds in zip(layout.get("nodeIndex", []), layout.get("bounds", []), strict=False):
        backend = backend_ids[node_index]
        if backend not in boxes and len(bounds) == 4:
            boxes[backend] = (bounds[0], bounds[1], bounds[2], bounds[3])
    return boxes, float(doc.get("scrollOffsetX", 0.0)), float(doc.get("scrollOffsetY", 0.0))


def _value(obj: dict[str, Any] | None) -> Any:
    return None if obj is None else obj.get("value")


def _clean(text: Any) -> str:
    return " ".join(str(text).split()) if text is not None else ""


def render_tree(
    ax_nodes: list[dict[str, Any]],
    boxes: dict[int, tuple[float, float, float, float]],
    viewport: Viewport | None,
    ids: ElementIds,
) -> str:
    """Render CDP AX nodes as WebArena's text tree (`[12] link 'Skip to content'`, tab-indented).

    `viewport=None` shows the whole page; otherwise nodes whose box misses the viewport are left
    out (their descendants are still visited: a parent can be larger than what scrolled away).
    """
    by_id = {node["nodeId"]: node for node in ax_nodes}
    root = next((n for n in ax_nodes if not n.get("parentId")), ax_nodes[0] if ax_nodes else None)
    if root is None:
        return ""
    ids.for_document(root.get("backendDOMNodeId"))
    lines: list[str] = []
    # Iterative DFS: pages nest deeply enough to hit Python's recursion limit.
    stack: list[tuple[str, int, str]] = [(root["nodeId"], 0, "")]
    while stack:
        node_id, depth, parent_name = stack.pop()
        node = by_id.get(node_id)
        if node is None:
            continue
        role = _value(node.get("role")) or ""
        if role in _DROPPED_ROLES:
            continue
        name = _clean(_value(node.get("name")))
        backend = node.get("backendDOMNodeId")
        printed = not node.get("ignored", False)
        if printed and role in _STRUCTURAL_ROLES and not name:
            printed = False
        if printed and role == "StaticText" and (not name or name in parent_name):
            printed = False
        if printed and viewport is not None and node is not root:
            box = boxes.get(backend) if backend is not None else None
            printed = box is not None and viewport.intersects(box)
        child_depth = depth
        child_parent_name = parent_name
        if printed:
            label = f"[{ids.small_id(backend)}]" if backend is not None else "[-]"
            parts = [f"{label} {role} {name!r}"]
            for prop in node.get("properties", []):
                if prop.get("name") in _SHOWN_PROPERTIES:
                    value = _value(prop.get("value"))
                    if value not in (None, False, "false", ""):
                        parts.append(f"{prop['name']}: {value if not isinstance(value, bool) else 'True'}")
            lines.append("\t" * depth + " ".join(parts))
            child_depth = depth + 1
            child_parent_name = name
        for child in reversed(node.get("childIds", [])):
            stack.append((child, child_depth, child_parent_name))
    return "\n".join(lines)
