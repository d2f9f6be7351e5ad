"""Carry out a parsed Action in a Playwright page.

Element N is `[data-webrl-id="N"]`, stamped by the latest observation, and is the element that observation
labelled even when the page has copied it since (the copy carries the stamp). A failed action (element
missing, not editable, option absent, timeout) is returned as an error string that the episode
records on the step and shows the agent next turn: a wrong click is the agent's mistake to learn
from, not a crash. Only a page or browser that is gone raises (`PageGoneError`), because then the
episode cannot go on.

Scroll Up/Down move the window, or on a page whose window does not scroll the scrolling area a wheel would
move (webrl.env.scroll). Native dialogs an action opens (alert, confirm, prompt) are answered by the episode's
DialogAnswerer (webrl.env.dialogs: alert and confirm accepted, prompt dismissed) while the action runs, so a
click guarded by `confirm()` acts, as the person who clicked meant it to.

Unlike the release, there is no fixed 3 s sleep after each action. An action that may navigate
(Click, Press Enter, Search, Type, whose last character is a real keystroke and a newline there is
Enter, Go Backward/Forward) is followed by one round trip through the page's
task queue, which reports whether the document started leaving (the Navigation API's `navigate`
event, recorded by NAVIGATION_FLAG_JS in every document); if it did, the action waits until the new
document commits (or the navigation ends without one, a 204), then for its DOMContentLoaded. So a
form that Enter submits is observed on its results page, never on the page it left, whenever
the server answers. Dynamic pages can be waited on with the Wait action.

Click and Hover are mouse events at the element's centre, like the release, without Playwright's
actionability waits: waiting for the element to be stable costs animation frames, about 100 ms per
click on a busy machine. A click on a covered element would land on what covers it and do nothing
the agent could see, so it is refused with an error naming the cover instead. The point is found by
the action's own page script and the mouse moved there with `page.mouse`, the events a forced
Playwright click sends, but without its selector engine: that engine's injected script (330 kB) is
compiled in every document a locator touches, and skipping it cuts the env's CPU per step by a
tenth (bench/env_throughput.py, MiniWoB++ at concurrency 16).
"""

from __future__ import annotations

import asyncio
from typing import Any

from playwright.async_api import Error as PlaywrightError

from webrl.env.actions import Action
from webrl.env.observation import element_selector, evaluate_settled, is_context_lost, is_element_id
from webrl.env.scroll import scroll

NAVIGATION_FLAG_JS = """
if (window.navigation) {
  navigation.addEventListener("navigate", (event) => {
    if (!event.destination.sameDocument) window.__webrlLeaving = true;
  });
} else {
  addEventListener("beforeunload", () => { window.__webrlLeaving = true; });
}
"""
"""Init script (every document of an episode's context): marks a document that started navigating away."""
# Runs after the tasks the action queued (a form submission is one), then reads and clears the mark.
_LEAVING_JS = """
() => new Promise((done) => setTimeout(() => {
  const leaving = window.__webrlLeaving === true;
  window.__webrlLeaving = false;
  done(leaving);
}, 0))
"""
_MAY_NAVIGATE = frozenset({"click", "press_enter", "search", "type", "go_backward", "go_forward"})
NO_EARLIER_PAGE = "there is no earlier page in this tab's history"

# One plain evaluate per element action (no Playwright selector engine, whose injected script
# costs tens of ms to compile per page): does element N exist, does it open a tab, for a Click or
# Hover what covers its centre once it is scrolled into view (first the least scroll, then centred,
# which clears sticky headers), and for a <select>, which option matches the wanted text (exact
# text, then value, then case-insensitive), so a missing option is an immediate error instead of
# select_option waiting for its timeout. For a Type or Search into a plain text field (`fill`), it
# also does what Playwright's fill does there: select the field's text and focus it (`typing`). For a
# Click on a link that opens a tab, it records the click event (`__webrlClick`), so that a click the
# page handles itself is not waited on for a tab. Element N is the element the observation labelled N
# (`labelled`), even when the page has copied it since.
_INSPECT_JS = """
({selector, id, wanted, reach, click, fill, head}) => {
  const WHOLE_VALUE_TYPES = new Set(["color", "date", "datetime-local", "month", "range", "time", "week"]);
  // The fields Playwright's fill types into (input of these types, textarea) once they are visible, enabled,
  // editable and not inert, as it checks them. Anything else (a contenteditable, a number or date input, a
  // disabled, read-only or aria-disabled field, a modal dialog open) is left to Playwright's fill itself.
  const plainTextField = (el) => {
    const types = new Set(["", "email", "password", "search", "tel", "text", "url"]);
    const field = (el.localName === "input" && types.has(el.type.toLowerCase())) || el.localName === "textarea";
    if (!field || el.matches(":disabled") || el.readOnly || el.closest("[aria-disabled], [inert]")) return false;
    if (document.querySelector(":modal") !== null) return false;
    const box = el.getBoundingClientRect();
    return el.checkVisibility() && getComputedStyle(el).visibility === "visible" && box.width > 0 && box.height > 0;
  };
  // The element the observation labelled N (`__webrlLabelled`, webrl.env.observation_script), wherever the page
  // moved it. A copy the page made of it since (cloneNode copies the stamp) loses the stamp, so that the selector,
  // and Playwright's calls after this script, find that element alone. When it is gone, a copy left alone stands in
  // for it (the page re-rendered it); several copies are ambiguous, and none is acted on.
  const labelled = () => {
    const stamped = Array.from(document.querySelectorAll(selector));
    const seen = (window.__webrlLabelled || [])[Number(id)];
    if (!seen || !seen.isConnected) return stamped.length > 1 ? {copies: stamped.length} : {el: stamped[0] || null};
    for (const copy of stamped) if (copy !== seen) copy.removeAttribute("data-webrl-id");
    seen.setAttribute("data-webrl-id", id);
    return {el: seen};
  };
  const found = labelled();
  if (found.copies) return {copies: found.copies};
  const el = found.el;
  if (!el) return null;
  const link = el.closest("a[href]");
  const info = {opensTab: !!link && link.target === "_blank", isSelect: el.localName === "select", option: -1};
  if (click && info.opensTab) {
    addEventListener("click", (event) => { window.__webrlClick = event; }, {capture: true, once: true});
  }
  // What Playwright's fill and select_option would wait on until their timeout: a disabled or read-only field.
  info.disabled = el.matches(":disabled") || (!reach && el.closest('[aria-disabled="true"]') !== null);
  info.readOnly = fill && (el.readOnly === true || el.getAttribute("aria-readonly") === "true");
  // A line break before the last character cannot go into a single-line input (`_breaks_a_line`): left untouched.
  info.breaksLine = fill && el.localName === "input" && /[\\r\\n]/.test(head);
  info.typing = fill && !info.breaksLine && plainTextField(el);
  // Inputs given their whole text by one Playwright fill: a date, time, colour or range typed key by key is not
  // one. Nor is a number whose text without its last character (`head`) is no number ("-" of "-5", "1e" of "1e5"):
  // fill refuses to put that in the field, as Playwright checks a number input's text with JavaScript's Number.
  const partialNumber = el.localName === "input" && el.type === "number" && Number.isNaN(Number(head.trim()));
  info.setsValue = fill && el.localName === "input" && (WHOLE_VALUE_TYPES.has(el.type) || partialNumber);
  if (info.typing && el.localName === "input") {
    el.select();
    el.focus();
  } else if (info.typing) {
    el.selectionStart = 0;
    el.selectionEnd = el.value.length;
    el.focus();
  }
  const cover = (block) => {
    el.scrollIntoView({behavior: "instant", block, inline: block});
    const r = el.getBoundingClientRect();
    const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    if (hit === null || el.contains(hit) || hit.contains(el) || hit.closest("label")?.control === el) return null;
    const text = (hit.innerText || "").replace(/\\s+/g, " ").trim().slice(0, 60);
    return {id: hit.closest("[data-webrl-id]")?.getAttribute("data-webrl-id") ?? null, tag: hit.localName, text};
  };
  if (reach) {
    info.cover = cover("nearest") && cover("center");
    // Where a forced Playwright click lands: the centre of the element's first box that keeps an area once
    // clipped to the viewport (a wrapped link's first line), or null when no part of it is in view.
    const view = window.visualViewport;
    const width = view ? view.width : window.innerWidth;
    const height = view ? view.height : window.innerHeight;
    info.point = null;
    for (const box of el.getClientRects()) {
      const left = Math.max(box.left, 0), right = Math.min(box.right, width);
      const top = Math.max(box.top, 0), bottom = Math.min(box.bottom, height);
      if ((right - left) * (bottom - top) > 0.99) {
        info.point = {x: (left + right) / 2, y: (top + bottom) / 2};
        break;
      }
    }
  }
  if (!info.isSelect || wanted === null) return info;
  const norm = (s) => s.replace(/\\s+/g, " ").trim();
  const options = Array.from(el.options);
  const tests = [
    (o) => norm(o.textContent) === norm(wanted),
    (o) => o.value === wanted,
    (o) => norm(o.textContent).toLowerCase() === norm(wanted).toLowerCase(),
  ];
  for (const test of tests) {
    info.option = options.findIndex(test);
    if (info.option >= 0) break;
  }
  info.optionDisabled = info.option >= 0 && options[info.option].matches(":disabled");
  info.options = options.map((o) => norm(o.textContent));
  return info;
}
"""
# Playwright's focus before a key press into an element (its focusNode): focused already, the caret stays; newly
# focused, an input's caret goes to its start. False when the element is gone (then Playwright's own call waits).
_FOCUS_JS = """
(selector) => {
  const el = document.querySelector(selector);
  if (!el) return false;
  const active = el.getRootNode().activeElement;
  const wasFocused = active === el && document.hasFocus();
  if (el.isContentEditable && !wasFocused && active && active.blur) active.blur();
  el.focus();
  if (!wasFocused && el.localName === "input") {
    try {
      el.setSelectionRange(0, 0);
    } catch (err) {}
  }
  return true;
}
"""


# After a Click on a link that opens a tab: whether the page prevented the click's default (no tab opens then).
_CLICK_PREVENTED_JS = """
() => {
  const event = window.__webrlClick;
  delete window.__webrlClick;
  return event !== undefined && event.defaultPrevented;
}
"""


class PageGoneError(RuntimeError):
    """The page, its context or the browser closed under the action: the episode cannot go on."""


class _NavigationWatch:
    """From before an action on: whether the main frame committed a document, or a navigation ended without one."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.settled = asyncio.Event()
        page.on("framenavigated", self._navigated)
        page.on("response", self._response)

    def _navigated(self, frame: Any) -> None:
        if frame == self.page.main_frame:
            self.settled.set()

    def _response(self, response: Any) -> None:
        # A 204 or 205 answer to a navigation (the allowlist's answer among them) leaves the page where it was.
        if response.status in (204, 205) and response.request.is_navigation_request():
            self.settled.set()

    def close(self) -> None:
        self.page.remove_listener("framenavigated", self._navigated)
        self.page.remove_listener("response", self._response)

    async def settle(self, timeout_s: float) -> None:
        """Wait for a navigation the action started to commit (or end), then for the document to parse."""
        try:
            leaving = await self.page.evaluate(_LEAVING_JS)
        except PlaywrightError as err:
            if not is_context_lost(err):
                raise
            leaving = True  # the document was replaced under the probe: a navigation committed
        if leaving and not self.settled.is_set():
            try:
                await asyncio.wait_for(self.settled.wait(), timeout=timeout_s)
            except asyncio.TimeoutError:
                return  # still loading: the agent sees the page as it is and may Wait
        await self.page.wait_for_load_state("domcontentloaded", timeout=timeout_s * 1000)


def _short(err: BaseException) -> str:
    """First line of a Playwright error: the rest is a call log the agent cannot use."""
    text = str(err).strip().splitlines()
    return text[0][:300] if text else type(err).__name__


def _covered(action: Action, cover: dict) -> str:
    """The error for a Click or Hover that would land on another element: what covers it, by id if it has one."""
    what = f"<{cover['tag']}> {cover['text']!r}" if cover["text"] else f"<{cover['tag']}>"
    if cover["id"] is not None:
        what = f"element {cover['id']} ({what})"
    verb = "clicked" if action.name == "click" else "hovered"
    return f"element {action.element} is covered by {what}, so it was not {verb}; deal with what covers it first"


def _refused(action: Action, info: dict | None) -> str | None:
    """Why the action cannot act on the element the inspect script found (`info`), if it cannot.

    The element is gone, or ambiguous (the page replaced it with several copies of it since the observation, and the
    copies carry its id), a Click or Hover cannot reach it, or it cannot take the click or the text.
    """
    if info is None:
        return f"element {action.element} is not in the page (use an id from the current observation)"
    if "copies" in info:
        copies = f"{info['copies']} copies of it"
        return f"element {action.element} was replaced by {copies}, so nothing was done; each has its own id now"
    reach = action.name in ("click", "hover")
    if reach and info["cover"]:
        return _covered(action, info["cover"])
    if reach and info["point"] is None:
        verb = "clicked" if action.name == "click" else "hovered"
        return f"element {action.element} has no visible area in the viewport, so it was not {verb}"
    return _unusable(action, info) or _breaks_a_line(action, info)


def _breaks_a_line(action: Action, info: dict) -> str | None:
    """Why a Type or Search cannot put its text into a single-line <input>: a line break before its last character.

    An <input> cannot hold a line break: the browser drops it or makes it a space, a text the agent never wrote.
    Pressing Enter at the break instead would submit the form with the first line and type the rest into whatever
    page follows. Neither is what the agent meant, so nothing is typed and the error says why. A last character
    that is a line break stays the Enter keystroke that submits (`_replace_text`), and a <textarea> or a
    contenteditable keeps every line break as text.
    """
    if not info["breaksLine"]:
        return None
    return (
        f"element {action.element} is a single-line input, which cannot hold a line break, so nothing was typed; "
        "type one line (a \\n at its end presses Enter)"
    )


def _unusable(action: Action, info: dict) -> str | None:
    """Why a Click, Type or Search cannot act on a disabled or read-only element, if it cannot.

    Playwright's fill would wait for the field to become usable until the action's timeout (10 s lost,
    and an error that says only "Timeout"); a click on a disabled control does nothing, and the agent would
    not learn why. Hover is left alone: a disabled control's tooltip may say why it is disabled.
    """
    if action.name == "click" and info["disabled"]:
        return f"element {action.element} is disabled, so it was not clicked"
    if action.name in ("type", "search") and (info["disabled"] or info["readOnly"]):
        state = "disabled" if info["disabled"] else "read-only"
        return f"element {action.element} is {state}, so nothing was typed"
    return None


async def _select(locator: Any, info: dict, action: Action, timeout_ms: float) -> str | None:
    if not info["isSelect"]:
        return f"element {action.element} is not a <select>; click it to open a custom dropdown instead"
    if info["disabled"]:
        return f"element {action.element} is disabled, so no option was selected"
    if info["option"] < 0:
        return f"element {action.element} has no option {action.argument!r}; options: {info['options'][:20]}"
    if info["optionDisabled"]:
        return f"option {action.argument!r} of element {action.element} is disabled, so it was not selected"
    await locator.select_option(index=info["option"], timeout=timeout_ms)
    return None


async def _focused(page: Any, selector: str, info: dict) -> bool:
    """Focus a field the inspect script readied for typing, as Playwright would; False: leave it to Playwright."""
    return info["typing"] and await page.evaluate(_FOCUS_JS, selector)


async def _reach(page: Any, name: str, info: dict, timeout_ms: float) -> None:
    """Click or Hover with the mouse at the point the inspect script found (where a forced Playwright click lands)."""
    x, y = info["point"]["x"], info["point"]["y"]
    if name == "hover":
        await page.mouse.move(x, y)
    elif info["opensTab"]:
        await _click_opening_tab(page, x, y, timeout_ms)
    else:
        await page.mouse.click(x, y)


async def _click_opening_tab(page: Any, x: float, y: float, timeout_ms: float) -> None:
    """Click a link that opens a tab, and wait for the tab to exist, so the episode can follow it before observing.

    A page that handles the click itself (preventDefault: a script's menu, an in-page route) opens no tab;
    waiting for one would cost the whole timeout and report a click that worked as failed.
    """
    opened = asyncio.Event()

    def on_page(_: Any) -> None:
        opened.set()

    page.context.on("page", on_page)
    try:
        await page.mouse.click(x, y)
        try:
            prevented = await page.evaluate(_CLICK_PREVENTED_JS)
        except PlaywrightError as err:
            if not is_context_lost(err):
                raise
            prevented = True  # the click navigated this tab: what the agent sees next is there
        if not prevented:
            await asyncio.wait_for(opened.wait(), timeout=timeout_ms / 1000)
    finally:
        page.context.remove_listener("page", on_page)


async def _replace_text(page: Any, locator: Any, selector: str, text: str, info: dict, timeout_ms: float) -> None:
    """Replace the field's content in one go, then type the last character as a real keystroke.

    Typing key by key costs a round trip per character; the last keystroke is what key-driven widgets
    (autocomplete) react to. A last line break is the Enter key (the release's convention): it submits the form,
    or in a <textarea> starts a new line. A last tab is text, as a tab anywhere else is: Playwright's keyboard types
    a character its key does not produce (the Tab key moves the focus, and types nothing) as text, so the focus
    never leaves the field the agent named behind its back (it has no Tab action).
    """
    if not info["typing"]:
        await locator.fill(text[:-1], timeout=timeout_ms)
    elif text[:-1]:
        await page.keyboard.insert_text(text[:-1])
    else:
        await page.keyboard.press("Delete")
    if text and await _focused(page, selector, info):
        await page.keyboard.type(text[-1])
    elif text:
        await locator.press_sequentially(text[-1], timeout=timeout_ms)


async def _type(page: Any, locator: Any, selector: str, action: Action, info: dict, timeout_ms: float) -> None:
    """Type (or Search: then press Enter in the field) the argument into the element.

    A date, time, colour or range input takes its value whole, as Playwright's fill sets it: a keystroke
    after a partial value ("2024-01-1", then "5") would leave it empty or wrong. So does a number input whose
    text without its last character is no number ("-5", "1e5"), since fill refuses "-" or "1e"; a number such
    as "42" keeps its last keystroke, like any other field.
    """
    text = action.argument or ""
    if info["setsValue"]:
        await locator.fill(text, timeout=timeout_ms)
    else:
        await _replace_text(page, locator, selector, text, info, timeout_ms)
    if action.name == "search" and await _focused(page, selector, info):
        await page.keyboard.press("Enter")
    elif action.name == "search":
        await locator.press("Enter", timeout=timeout_ms)


async def _run(page: Any, action: Action, timeout_ms: float, wait_s: float) -> str | None:
    name = action.name
    if name == "exit":
        return None
    if name == "wait":
        await asyncio.sleep(wait_s)
        return None
    if name in ("scroll_up", "scroll_down"):
        return await scroll(page, down=name == "scroll_down")
    if name == "press_enter":
        await page.keyboard.press("Enter")
        return None
    if name in ("go_backward", "go_forward"):
        back = name == "go_backward"
        before = page.url
        response = await (page.go_back if back else page.go_forward)(timeout=timeout_ms, wait_until="domcontentloaded")
        if response is None and page.url == before:
            return NO_EARLIER_PAGE if back else "there is no later page in this tab's history"
        if back and page.url == "about:blank":
            # A new tab's first history entry is about:blank; the agent must not strand itself there.
            await page.go_forward(timeout=timeout_ms, wait_until="domcontentloaded")
            return NO_EARLIER_PAGE
        return None
    if not is_element_id(action.element or ""):
        return f'element {action.element!r} is not an element id: use a number N from id="N" in the observation'
    selector = element_selector(action.element or "")
    wanted = action.argument if name == "select" else None
    reach = name in ("click", "hover")
    fill = name in ("type", "search")
    head = (action.argument or "")[:-1] if fill else ""
    arg = {
        "selector": selector,
        "id": action.element,
        "wanted": wanted,
        "reach": reach,
        "click": name == "click",
        "fill": fill,
        "head": head,
    }
    info = await evaluate_settled(page, _INSPECT_JS, arg)
    refused = _refused(action, info)
    if refused:
        return refused
    locator = page.locator(selector).first
    if reach:
        await _reach(page, name, info, timeout_ms)
    elif fill:
        await _type(page, locator, selector, action, info, timeout_ms)
    elif name == "select":
        return await _select(locator, info, action, timeout_ms)
    else:
        raise ValueError(f"no executor for action {name!r}")
    return None


async def execute_action(page: Any, action: Action, timeout_s: float = 10.0, wait_s: float = 1.0) -> str | None:
    """Carry out `action` in `page`; return None on success or an error message for the agent.

    Raises PageGoneError when the page or browser closed, and asyncio.TimeoutError when the whole
    action (including its settling) took longer than `timeout_s` plus a second of grace.
    """
    timeout_ms = timeout_s * 1000

    watch = _NavigationWatch(page) if action.name in _MAY_NAVIGATE else None

    async def act() -> str | None:
        error = await _run(page, action, timeout_ms, wait_s)
        if watch is not None:
            await watch.settle(timeout_s)
        else:
            await page.wait_for_load_state("domcontentloaded", timeout=timeout_ms)
        return error

    try:
        return await asyncio.wait_for(act(), timeout=timeout_s + max(wait_s, 0.0) + 1.0)
    except PlaywrightError as err:
        if page.is_closed() or not page.context.browser or not page.context.browser.is_connected():
            raise PageGoneError(_short(err)) from err
        return f"{action.name} failed: {_short(err)}"
    finally:
        if watch is not None:
            watch.close()
