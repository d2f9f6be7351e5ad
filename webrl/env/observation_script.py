"""The page-side half of an observation: one JavaScript function run by a single `page.evaluate`.

Keeping the whole DOM walk in the page costs one round trip per observation (a few ms on a small
page) instead of one per element. The function renders the visible DOM in WebRL's simplified-HTML
form and stamps `data-webrl-id="N"` on every element it labels, so that an action on element N is
`[data-webrl-id="N"]`. Labels are assigned in document order during one pre-order walk, so the same
DOM always gets the same ids. Stale stamps from an earlier observation are removed first, so an element the
page copied since (cloneNode copies the stamp) gets an id of its own. The labelled elements are also kept
in `window.__webrlLabelled` (element N at index N): until the next observation, a copy carries the id of
the element it was copied from, and the action on N must reach the element the agent saw, not whichever
of the two comes first in the document (webrl.env.executor's inspect script).

Rendering rules (why each exists):
- Interactive elements (native controls, ARIA widget roles, inline onclick, contenteditable,
  elements whose computed cursor becomes `pointer`, which is how sites mark JS-handled clickables,
  and hover targets: inline onmouseover/onmouseenter, a hover listener added by script (recorded by
  `HOVER_LISTENERS_JS`), or a CSS `:hover` rule that shows another element, which is how menus open)
  get an id; nothing else does, so every id the model sees is something it can act on. An element
  whose centre is covered by another (an overlay, a cookie banner) gets no id: a click would land on
  the cover, so the cover is what to act on.
- Wrappers without text or kept attributes (div, span, section, ...) are unwrapped: they cost
  tokens and carry no information. Headings, paragraphs, list items, table rows and cells keep
  their tag because the structure helps the model read lists and tables.
- Hidden subtrees (display:none, opacity:0, aria-hidden, boxes entirely off the page or, in the
  `viewport` region, outside the viewport) are dropped: a person cannot see them. So is the content of a
  box that clips its overflow and has no height or width (a collapsed panel or accordion). A transparent
  control can still take clicks, but sites put it under a visible label or box, which is what to act on.
- A visibility:hidden element shows neither its text nor an id, but its element children are walked:
  visibility is inherited and a child may set it back to visible (a menu that reveals one entry).
- A labelled control that cannot be used (`:disabled`, also through a disabled fieldset, or inside
  `aria-disabled="true"`) says `disabled` after its id: a greyed-out button looks like any other in text,
  and the agent would click it, see nothing happen and not know why. Its id stays, for Hover (a tooltip
  may say why it is disabled) and so that ids do not shift when a control is enabled. A disabled option says
  so too.
- `<select>` lists its options with their text, so "Select Dropdown Option" arguments are visible.
- The walk stops once the output passes the character budget; Python cuts and marks the end. In the
  `from_viewport` region a page that does not fit and is scrolled is walked again without what lies
  above the viewport, so that scrolling down brings the rest of a long page into the budget; at the
  end of the page, where no scroll can go further, it is walked whole and Python keeps the end. So
  every part of a page can be seen as long as a viewport's worth of it fits the budget.
- Iframes, canvas, svg and shadow roots are not rendered: the actions could not reach into them.
"""

OBSERVE_JS = r"""
(config) => {
  const INTERACTIVE_TAGS = new Set(["a", "button", "input", "select", "textarea", "summary"]);
  const INTERACTIVE_ROLES = new Set([
    "button", "link", "checkbox", "tab", "menuitem", "menuitemcheckbox", "menuitemradio",
    "radio", "switch", "option", "combobox", "textbox", "treeitem",
  ]);
  const SKIP_TAGS = new Set([
    "script", "style", "noscript", "template", "head", "meta", "link", "svg", "canvas",
    "iframe", "object", "embed", "option", "optgroup",
  ]);
  const STRUCTURAL_TAGS = new Set([
    "h1", "h2", "h3", "h4", "h5", "h6", "p", "li", "tr", "td", "th", "label", "dt", "dd",
    "caption", "legend",
  ]);
  const BLOCK_TAGS = new Set([
    "div", "p", "li", "tr", "table", "tbody", "thead", "tfoot", "ul", "ol", "h1", "h2", "h3",
    "h4", "h5", "h6", "form", "section", "article", "header", "footer", "nav", "main", "aside",
    "br", "hr", "dl", "dt", "dd", "fieldset", "blockquote", "pre", "details", "figure", "body",
  ]);
  const VOID_TAGS = new Set(["input", "img", "br", "hr"]);
  const REVEALING = ["display", "visibility", "opacity", "max-height", "height"];
  const KEPT_ATTRS = [
    "title", "alt", "type", "name", "placeholder", "aria-label", "data-value", "data-text",
    "data-testid", "data-label", "data-status",
  ];
  const textLimit = config.textLimit;
  const budget = config.maxChars;
  let limit = budget;
  const vw = window.innerWidth;
  const vh = window.innerHeight;
  const sx = window.scrollX;
  const sy = window.scrollY;
  let nextId = 0;
  let labelledElements = [];
  let emitted = 0;
  let dropAbove = false;

  const clip = (s) => (s.length > textLimit ? s.slice(0, textLimit).trimEnd() + "…" : s);
  const cleanText = (s) => clip(s.replace(/\s+/g, " ").trim());
  const escText = (s) => s.replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const escAttr = (s) => s.replace(/"/g, "&quot;").replace(/</g, "&lt;");

  // Whether a click at the element's centre would land on something else (an overlay, a banner).
  // Only a centre inside the viewport and the element's scroll containers can be tested; others keep their id.
  const covered = (el, rect, bounds) => {
    const x = rect.left + rect.width / 2;
    const y = rect.top + rect.height / 2;
    if (x < bounds.left || x >= bounds.right || y < bounds.top || y >= bounds.bottom) return false;
    const hit = document.elementFromPoint(x, y);
    if (hit === null || el.contains(hit) || hit.contains(el)) return false;
    return hit.closest("label")?.control !== el;
  };
  const within = (bounds, rect) => ({
    left: Math.max(bounds.left, rect.left),
    top: Math.max(bounds.top, rect.top),
    right: Math.min(bounds.right, rect.right),
    bottom: Math.min(bounds.bottom, rect.bottom),
  });

  // One selector list of the elements whose hover reveals another: `X:hover Y {display: block}`
  // gives X. Rules styling only the hovered element itself are cosmetic and left out. Built once per
  // document and set of style sheets (a large site has thousands of rules); unreadable sheets are skipped.
  const hoverSelector = () => {
    const count = document.styleSheets.length;
    const cached = window.__webrlHover;
    if (cached && cached.count === count) return cached.selector;
    const found = [];
    const visit = (rules) => {
      for (const rule of rules) {
        if (rule.cssRules && !rule.selectorText) visit(rule.cssRules);
        if (!rule.selectorText || !rule.selectorText.includes(":hover")) continue;
        if (!REVEALING.some((name) => rule.style.getPropertyValue(name))) continue;
        for (const selector of rule.selectorText.split(",")) {
          const at = selector.indexOf(":hover");
          if (at < 0 || !selector.slice(at + 6).replace(/^[^\s>+~]*/, "").trim()) continue;
          let target = selector.slice(0, at).trim();
          if (!target || /[\s>+~]$/.test(target)) target += "*";
          try {
            document.querySelector(target);
            found.push(target);
          } catch {
            // A selector this cut cannot express (e.g. :hover inside :is()): not a menu we can name.
          }
        }
      }
    };
    for (const sheet of document.styleSheets) {
      try {
        visit(sheet.cssRules);
      } catch {
        // A cross-origin sheet cannot be read.
      }
    }
    const selector = found.join(",");
    window.__webrlHover = { count, selector };
    return selector;
  };
  const revealsOnHover = hoverSelector();

  const isDisabled = (el) => el.matches(":disabled") || el.closest('[aria-disabled="true"]') !== null;
  const labelled = (el, id) => (isDisabled(el) ? [`id="${id}"`, "disabled"] : [`id="${id}"`]);

  const isInteractive = (el, tag, style, parentPointer) => {
    if (INTERACTIVE_TAGS.has(tag)) return !(tag === "input" && el.type === "hidden");
    const role = el.getAttribute("role");
    if (role && INTERACTIVE_ROLES.has(role)) return true;
    if (el.hasAttribute("onclick") || el.isContentEditable && !el.parentElement?.isContentEditable) return true;
    if (el.hasAttribute("onmouseover") || el.hasAttribute("onmouseenter")) return true;
    if (window.__webrlHoverTargets?.has(el)) return true;
    if (revealsOnHover && el.matches(revealsOnHover)) return true;
    return style.cursor === "pointer" && !parentPointer;
  };

  // A box with no area (display:contents, empty inline) says nothing about visibility: recurse.
  const offPage = (rect) => {
    if (rect.width === 0 || rect.height === 0) return false;
    if (config.region === "viewport") {
      return rect.right <= 0 || rect.bottom <= 0 || rect.left >= vw || rect.top >= vh;
    }
    if (dropAbove && rect.bottom <= 0) return true;
    return rect.right + sx <= 0 || rect.bottom + sy <= 0;
  };

  const attrsOf = (el, tag, rect) => {
    const out = [];
    for (const name of KEPT_ATTRS) {
      if (name === "type" && tag !== "input") continue;
      const value = el.getAttribute(name);
      if (value) out.push(`${name}="${escAttr(clip(value))}"`);
    }
    if ((tag === "input" || tag === "textarea") && !["checkbox", "radio"].includes(el.type) && el.value) {
      out.push(`value="${escAttr(clip(el.value))}"`);
    } else if (tag !== "input" && tag !== "textarea" && el.getAttribute("value")) {
      out.push(`value="${escAttr(clip(el.getAttribute("value")))}"`);
    }
    if (tag === "input" && ["checkbox", "radio"].includes(el.type) && el.checked) out.push("checked");
    const role = el.getAttribute("role");
    if (role && !INTERACTIVE_TAGS.has(tag)) out.push(`role="${escAttr(role)}"`);
    if (config.bbox && rect) {
      const b = [rect.x, rect.y, rect.width, rect.height].map((v) => Math.round(v)).join(",");
      out.push(`data-bbox="${b}"`);
    }
    return out;
  };

  // Inline neighbours are glued unless the source had whitespace between them, so that
  // 'Enter "<b>Jerald</b>"' stays 'Enter "Jerald"'; tags emitted as tags are always spaced.
  const part = (text, block, gapBefore = true, gapAfter = true) => ({ text, block, gapBefore, gapAfter });
  const EMPTY = part("", false);
  const joinParts = (parts) => {
    const kept = parts.filter((p) => p.text);
    let text = "";
    for (let i = 0; i < kept.length; i++) {
      const prev = kept[i - 1];
      const cur = kept[i];
      if (i > 0) text += prev.block || cur.block ? "\n" : (prev.gapAfter || cur.gapBefore ? " " : "");
      text += cur.text;
    }
    const first = kept[0];
    const last = kept[kept.length - 1];
    return { text, gapBefore: first ? first.gapBefore : true, gapAfter: last ? last.gapAfter : true };
  };

  const renderSelect = (el, id, rect) => {
    const attrs = labelled(el, id).concat(attrsOf(el, "select", rect));
    const options = Array.from(el.options).map((opt) => {
      const selected = (opt.selected ? " selected" : "") + (opt.disabled ? " disabled" : "");
      return `<option${selected}>${escText(cleanText(opt.textContent))}</option>`;
    });
    return `<select ${attrs.join(" ")}>${options.join("")}</select>`;
  };

  // `bounds`: the part of the viewport not clipped away by the element's scroll containers.
  const render = (node, parentPointer, bounds) => {
    if (emitted > limit) return EMPTY;
    if (node.nodeType === Node.TEXT_NODE) {
      const raw = node.textContent;
      const text = escText(cleanText(raw));
      emitted += text.length;
      return part(text, false, /^\s/.test(raw), /\s$/.test(raw));
    }
    if (node.nodeType !== Node.ELEMENT_NODE) return EMPTY;
    const el = node;
    const tag = el.localName;
    if (SKIP_TAGS.has(tag)) return EMPTY;
    if (el.getAttribute("aria-hidden") === "true") return EMPTY;
    if (!el.checkVisibility({ opacityProperty: true })) return EMPTY;
    const rect = el.getBoundingClientRect();
    if (offPage(rect)) return EMPTY;
    const style = window.getComputedStyle(el);
    const block = BLOCK_TAGS.has(tag);
    const clips = style.overflowX !== "visible" || style.overflowY !== "visible";
    if (clips && (rect.width === 0 || rect.height === 0) && style.display !== "contents") return EMPTY;
    if (style.visibility !== "visible") {
      const children = [];
      for (const child of el.children) children.push(render(child, false, bounds));
      const inner = joinParts(children);
      return part(inner.text, block, inner.gapBefore, inner.gapAfter);
    }
    const hasArea = rect.width > 0 && rect.height > 0;
    const interactive = hasArea && isInteractive(el, tag, style, parentPointer) && !covered(el, rect, bounds);
    let id = null;
    if (interactive) {
      id = nextId++;
      el.setAttribute("data-webrl-id", String(id));
      labelledElements.push(el);
    }
    if (tag === "select") {
      if (id === null) return EMPTY;
      const text = renderSelect(el, id, rect);
      emitted += text.length;
      return part(text, false);
    }
    if (tag === "br") return part("", true);
    const attrs = attrsOf(el, tag, rect);
    if (id !== null) attrs.unshift(...labelled(el, id));
    const attrText = attrs.length ? " " + attrs.join(" ") : "";
    if (VOID_TAGS.has(tag)) {
      if (id === null && attrs.length === 0) return EMPTY;
      const text = `<${tag}${attrText} />`;
      emitted += text.length;
      return part(text, block);
    }
    const pointer = style.cursor === "pointer";
    const innerBounds = clips && style.display !== "contents" ? within(bounds, rect) : bounds;
    const children = [];
    if (tag !== "textarea") {
      for (const child of el.childNodes) children.push(render(child, pointer, innerBounds));
    }
    const inner = joinParts(children);
    if (id === null && attrs.length === 0 && !STRUCTURAL_TAGS.has(tag)) {
      return part(inner.text, block, inner.gapBefore, inner.gapAfter);
    }
    if (id === null && inner.text === "") return EMPTY;
    const body = inner.text ? ` ${inner.text} ` : "";
    const text = `<${tag}${attrText}>${body}</${tag}>`;
    emitted += tag.length * 2 + attrText.length + 5;
    return part(text, block);
  };

  const root = document.body || document.documentElement;
  const viewport = { left: 0, top: 0, right: vw, bottom: vh };
  const walk = () => {
    nextId = 0;
    labelledElements = [];
    emitted = 0;
    document.querySelectorAll("[data-webrl-id]").forEach((el) => el.removeAttribute("data-webrl-id"));
    return root ? render(root, false, viewport).text : "";
  };
  let html = walk();
  let tail = false;
  if (config.region === "from_viewport" && html.length > budget && sy > 0) {
    dropAbove = true;
    html = walk();
    if (html.length > budget && sy + vh >= document.documentElement.scrollHeight - 1) {
      limit = Infinity;
      tail = true;
      html = walk();
    }
  }
  window.__webrlLabelled = labelledElements;
  return { html, url: window.location.href, title: document.title, count: nextId, above: dropAbove, tail };
}
"""

HOVER_LISTENERS_JS = r"""
(() => {
  // Menus opened by script: el.addEventListener("mouseenter", ...) or el.onmouseover = fn leave no trace in
  // the DOM, so the observation could not give them an id. Wrap both ways in, before any page script runs,
  // and keep the elements in a WeakSet (nothing is written into the page, and removed elements are freed).
  const HOVER_EVENTS = new Set(["mouseenter", "mouseover", "pointerenter", "pointerover"]);
  const targets = new WeakSet();
  Object.defineProperty(window, "__webrlHoverTargets", { value: targets });
  const addListener = EventTarget.prototype.addEventListener;
  EventTarget.prototype.addEventListener = function (type, listener, options) {
    if (listener && HOVER_EVENTS.has(type) && this instanceof Element) targets.add(this);
    return addListener.call(this, type, listener, options);
  };
  for (const type of HOVER_EVENTS) {
    const property = Object.getOwnPropertyDescriptor(HTMLElement.prototype, `on${type}`);
    if (!property || !property.set) continue;
    Object.defineProperty(HTMLElement.prototype, `on${type}`, {
      ...property,
      set(handler) {
        if (handler) targets.add(this);
        property.set.call(this, handler);
      },
    });
  }
})();
"""
"""Init script (every document of an episode's context): records the elements that get a hover listener from script.

A listener removed later keeps its element marked: an id on an element whose hover does nothing costs a
token, a menu without one can never be opened."""
