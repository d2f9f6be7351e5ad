"""Scroll Up and Scroll Down: the window, or else the scrolling area a person would scroll with the wheel.

Most pages scroll the window, and there Scroll moves it by two thirds of the viewport, like the release, so
consecutive views overlap. An app-like page instead fixes its height and hides the window's overflow
(`html, body {height: 100%; overflow: hidden}`), scrolling a `<main style="overflow: auto">` inside it: a
window scroll does nothing there, and the agent could never reach what lies below. So when the window does not
move, Scroll moves the scrolling area under the viewport's centre (where a wheel would act), else the largest
one in view, by two thirds of its visible height. Every scroll is instant: a page's `scroll-behavior: smooth`
would leave the next observation mid-animation.

A window at the end of its page stays a silent no-op, as it always was: the observation shows that end. A page
that hides the window's overflow shows no such end, so when none of its scrolling areas can move the agent
is told in the step's error.
"""

from __future__ import annotations

from typing import Any

# Returns whether something moved, and whether the window is one a person can scroll (its overflow not hidden).
_SCROLL_JS = """
(sign) => {
  const root = document.documentElement;
  const body = document.body;
  const overflowOf = (el) => (el ? getComputedStyle(el).overflowY : "visible");
  // The viewport takes the root's overflow, or the body's when the root's is visible (CSS overflow propagation).
  const viewportOverflow = overflowOf(root) !== "visible" ? overflowOf(root) : overflowOf(body);
  const windowScrolls = viewportOverflow !== "hidden" && viewportOverflow !== "clip";
  const step = (height) => sign * Math.round(height * 2 / 3);
  if (windowScrolls) {
    const before = window.scrollY;
    window.scrollBy({top: step(window.innerHeight), behavior: "instant"});
    if (window.scrollY !== before) return {moved: true, windowScrolls};
  }
  const visibleHeight = (el) => {
    const box = el.getBoundingClientRect();
    return Math.max(0, Math.min(box.bottom, window.innerHeight) - Math.max(box.top, 0));
  };
  const visibleArea = (el) => {
    const box = el.getBoundingClientRect();
    return visibleHeight(el) * Math.max(0, Math.min(box.right, window.innerWidth) - Math.max(box.left, 0));
  };
  // A box the user can scroll vertically that has room in this direction; the window's own scroller is not one.
  const movable = (el) => {
    if (el === document.scrollingElement || el.scrollHeight <= el.clientHeight) return false;
    if (!["auto", "scroll", "overlay"].includes(getComputedStyle(el).overflowY)) return false;
    return sign < 0 ? el.scrollTop > 0 : Math.ceil(el.scrollTop + el.clientHeight) < el.scrollHeight;
  };
  const scrolled = (el) => {
    const before = el.scrollTop;
    el.scrollBy({top: step(Math.min(el.clientHeight, visibleHeight(el))), behavior: "instant"});
    return el.scrollTop !== before;
  };
  for (let el = document.elementFromPoint(window.innerWidth / 2, window.innerHeight / 2); el; el = el.parentElement) {
    if (movable(el) && scrolled(el)) return {moved: true, windowScrolls};
  }
  const areas = Array.from(document.querySelectorAll("body *")).filter((el) => movable(el) && visibleArea(el) > 0);
  areas.sort((a, b) => visibleArea(b) - visibleArea(a));
  return {moved: areas.some(scrolled), windowScrolls};
}
"""


async def scroll(page: Any, down: bool) -> str | None:
    """Scroll the page one step up or down (module docstring); the error for the agent when nothing could move."""
    result = await page.evaluate(_SCROLL_JS, 1 if down else -1)
    if result["moved"] or result["windowScrolls"]:
        return None
    where = "below" if down else "above"
    return (
        f"nothing on this page can scroll {'down' if down else 'up'}: the page itself does not scroll, and no "
        f"scrolling area in view has more {where}"
    )
