"""What a person sees is what the observation shows: the gaps of issue 13, each on a real page in Chromium.

`pages/fidelity.html` holds one case per gap; every test observes it in a fresh context (some tests act
on the page) and checks the text and the ids the model gets.
"""

from __future__ import annotations

import re

import pytest
from env_helpers import element_id

from webrl.env.actions import parse_action
from webrl.env.executor import execute_action
from webrl.env.observation import ABOVE_MARK, ObservationConfig, observe
from webrl.env.observation_script import HOVER_LISTENERS_JS

pytestmark = pytest.mark.timeout(120)

# A banner that appears over the "Visible child" button after the page was observed.
_COVER_JS = """() => {
  const rect = document.getElementById("child").getBoundingClientRect();
  const banner = document.createElement("div");
  banner.id = "late-banner";
  banner.textContent = "Late banner";
  Object.assign(banner.style, {position: "fixed", left: "0px", top: `${rect.top - 10}px`, width: "100%",
                               height: `${rect.height + 20}px`, background: "white"});
  document.body.append(banner);
}"""


@pytest.fixture
def page(run, pool, pages):
    """The fidelity page in a fresh 1280x720 context."""

    async def open_page():
        context = await (await pool.browser()).new_context(viewport={"width": 1280, "height": 720})
        page = await context.new_page()
        await page.goto(f"{pages.url}/fidelity.html")
        return context, page

    context, page = run(open_page())
    yield page
    run(context.close())


def test_transparent_elements_are_dropped(run, page):
    html = run(observe(page)).html
    assert "<h1> Fidelity </h1>" in html
    assert "Transparent button" not in html
    assert "Transparent paragraph" not in html


def test_a_closed_details_shows_its_summary_only(run, page):
    html = run(observe(page)).html
    assert "More details </summary>" in html
    assert "Folded text" not in html and "Folded button" not in html
    assert "<p> Unfolded text </p>" in html


def test_content_clipped_by_a_zero_height_box_is_dropped(run, page):
    html = run(observe(page)).html
    assert "Clipped text" not in html and "Clipped button" not in html


def test_a_visible_child_of_a_visibility_hidden_parent_is_kept(run, page):
    html = run(observe(page)).html
    assert "Hidden parent text" not in html
    button = element_id(html, "Visible child")
    assert f'<button id="{button}"> Visible child </button>' in html


def test_a_covered_button_gets_no_id(run, page):
    html = run(observe(page)).html
    assert "Covered button" in html and "Cookie notice" in html
    assert "Covered button </button>" not in html


def test_a_click_on_a_button_covered_after_the_observation_names_the_cover(run, page):
    html = run(observe(page)).html
    button = element_id(html, "Visible child")
    run(page.evaluate(_COVER_JS))
    error = run(execute_action(page, parse_action(f'do(action="Click", element="{button}")')))
    assert error == (
        f"element {button} is covered by <div> 'Late banner', so it was not clicked; deal with what covers it first"
    )
    assert run(page.evaluate("() => window.childClicks")) == 0
    run(page.evaluate("() => document.getElementById('late-banner').remove()"))
    assert run(execute_action(page, parse_action(f'do(action="Click", element="{button}")'))) is None
    assert run(page.evaluate("() => window.childClicks")) == 1


def test_a_button_above_the_view_is_centred_clear_of_a_sticky_header_and_clicked(run, page):
    run(page.evaluate("() => document.getElementById('spacer').style.height = '2000px'"))
    html = run(observe(page)).html
    button = element_id(html, "Visible child")
    run(page.add_style_tag(content="h1 { position: fixed; top: 0; left: 0; width: 100%; height: 150px; margin: 0; }"))
    run(page.evaluate("() => window.scrollTo(0, document.body.scrollHeight)"))
    assert run(execute_action(page, parse_action(f'do(action="Click", element="{button}")'))) is None
    assert run(page.evaluate("() => window.childClicks")) == 1


_WRAPPED_LINK_JS = """() => {
  const wrap = document.createElement("p");
  wrap.style.cssText = "width: 160px; font: 16px/20px sans-serif";
  wrap.innerHTML = 'Some words that come first <a id="wrapped" href="#">wrapped link</a> and more words after it';
  wrap.querySelector("a").onclick = () => { window.wrappedClicks = (window.wrappedClicks || 0) + 1; return false; };
  document.body.prepend(wrap);
  const box = wrap.querySelector("a").getBoundingClientRect();
  return document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2).localName;
}"""


def test_a_click_lands_on_the_first_line_of_a_wrapped_link_as_playwrights_would(run, page):
    """The centre of a link wrapped over two lines is beside both of them: the click goes to its first line."""
    assert run(page.evaluate(_WRAPPED_LINK_JS)) == "p"
    link = element_id(run(observe(page)).html, "wrapped link")
    assert run(execute_action(page, parse_action(f'do(action="Click", element="{link}")'))) is None
    assert run(page.evaluate("() => window.wrappedClicks")) == 1


def test_a_click_on_an_element_that_lost_its_area_after_the_observation_is_refused(run, page):
    html = run(observe(page)).html
    button = element_id(html, "Visible child")
    run(page.evaluate("() => document.getElementById('child').style.display = 'contents'"))
    for action in ("Click", "Hover"):
        error = run(execute_action(page, parse_action(f'do(action="{action}", element="{button}")')))
        verb = "clicked" if action == "Click" else "hovered"
        assert error == f"element {button} has no visible area in the viewport, so it was not {verb}"
    assert run(page.evaluate("() => window.childClicks")) == 0


_FIELDS_JS = """() => {
  const form = document.createElement("div");
  form.innerHTML = '<input id="plain" value="old text"> <input id="number" type="number" value="7">'
    + ' <div id="editable" contenteditable="true">old words</div> <input id="locked" readonly value="fixed">';
  document.body.prepend(form);
  window.keys = [];
  form.addEventListener("keydown", (event) => window.keys.push(event.key));
}"""


def test_type_replaces_the_text_and_sends_the_last_character_as_a_keystroke_in_every_kind_of_field(run, page):
    """Plain fields are filled by the inspect script; the rest (number, contenteditable) by Playwright's fill."""
    run(page.evaluate(_FIELDS_JS))
    html = run(observe(page)).html
    ids = {name: element_id(html, marker) for name, marker in [("plain", "old text"), ("number", 'value="7"')]}
    ids["editable"] = element_id(html, "old words")

    def type_into(name: str, text: str) -> str | None:
        return run(execute_action(page, parse_action(f'do(action="Type", argument="{text}", element="{ids[name]}")')))

    assert [type_into("plain", "new"), type_into("number", "42"), type_into("editable", "ab")] == [None] * 3
    values = run(page.evaluate("() => [plain.value, number.value, editable.textContent, window.keys]"))
    assert values == ["new", "42", "ab", ["w", "2", "b"]]
    assert type_into("plain", "x") is None  # the text is cleared with Delete, then x typed
    assert run(page.evaluate("() => [plain.value, window.keys.slice(3)]")) == ["x", ["Delete", "x"]]


def test_type_into_a_read_only_field_is_refused_at_once(run, page):
    run(page.evaluate(_FIELDS_JS))
    locked = element_id(run(observe(page)).html, 'value="fixed"')
    error = run(execute_action(page, parse_action(f'do(action="Type", argument="y", element="{locked}")'), 5.0))
    assert error == f"element {locked} is read-only, so nothing was typed"
    assert run(page.evaluate("() => locked.value")) == "fixed"


_WHOLE_VALUE_FIELDS_JS = """() => {
  const form = document.createElement("div");
  form.innerHTML = '<input id="day" type="date" title="day"> <input id="hour" type="time" title="hour">'
    + ' <input id="tint" type="color" title="tint"> <input id="level" type="range" title="level">';
  document.body.prepend(form);
}"""


def test_type_sets_a_date_time_colour_or_range_input_whole(run, page):
    """Such inputs take no partial value: "2024-01-1" then a keystroke "5" used to leave the date empty."""
    run(page.evaluate(_WHOLE_VALUE_FIELDS_JS))
    html = run(observe(page)).html
    typed = {"day": "2024-01-15", "hour": "13:45", "tint": "#ff0000", "level": "30"}
    for name, text in typed.items():
        action = parse_action(f'do(action="Type", argument="{text}", element="{element_id(html, name)}")')
        assert run(execute_action(page, action)) is None
    assert run(page.evaluate("() => [day.value, hour.value, tint.value, level.value]")) == list(typed.values())


_DISABLED_JS = """() => {
  const form = document.createElement("div");
  form.innerHTML = '<button id="off" disabled onclick="window.offClicks = 1">Off button</button>'
    + ' <input id="frozen" disabled value="frozen text">'
    + ' <select id="shut" title="shut" disabled><option>A</option></select>'
    + ' <select id="sizes" title="sizes"><option>Small</option><option disabled>Large</option></select>';
  document.body.prepend(form);
}"""


def test_actions_on_disabled_controls_are_refused_at_once_saying_so(run, page):
    """A click on a disabled button did nothing without a word; a Type or Select waited out the action's timeout."""
    run(page.evaluate(_DISABLED_JS))
    html = run(observe(page)).html
    ids = {name: element_id(html, marker) for name, marker in [("off", "Off button"), ("frozen", "frozen text")]}
    ids["shut"] = element_id(html, 'title="shut"')
    ids["sizes"] = element_id(html, 'title="sizes"')
    actions = {
        f'do(action="Click", element="{ids["off"]}")': f"element {ids['off']} is disabled, so it was not clicked",
        f'do(action="Type", argument="x", element="{ids["frozen"]}")': (
            f"element {ids['frozen']} is disabled, so nothing was typed"
        ),
        f'do(action="Select Dropdown Option", argument="A", element="{ids["shut"]}")': (
            f"element {ids['shut']} is disabled, so no option was selected"
        ),
        f'do(action="Select Dropdown Option", argument="Large", element="{ids["sizes"]}")': (
            f"option 'Large' of element {ids['sizes']} is disabled, so it was not selected"
        ),
    }
    for text, expected in actions.items():
        assert run(execute_action(page, parse_action(text), 5.0)) == expected
    values = "() => [window.offClicks ?? 0, frozen.value, sizes.value]"
    assert run(page.evaluate(values)) == [0, "frozen text", "Small"]


def test_disabled_controls_say_so_after_their_id(run, page):
    """A disabled control looked like any other in the observation: the agent clicked it and learnt nothing."""
    run(page.evaluate(_DISABLED_JS))
    run(page.evaluate(_DISABLED_GROUPS_JS))
    html = run(observe(page)).html
    for shown in (
        'disabled placeholder="Fenced field" />',  # through its disabled fieldset
        "disabled> Greyed link </a>",  # inside aria-disabled="true"
        "disabled> Off button </button>",
        'disabled value="frozen text" />',
        'disabled title="shut">',
    ):
        assert re.search(rf'id="\d+" {re.escape(shown)}', html), shown
    assert re.search(r'<button id="\d+"> Live button </button>', html)
    assert re.search(
        r'<select id="\d+" title="sizes"><option selected>Small</option><option disabled>Large</option>', html
    )


_DISABLED_GROUPS_JS = """() => {
  const groups = document.createElement("div");
  groups.innerHTML = '<fieldset disabled><input placeholder="Fenced field"></fieldset>'
    + '<div aria-disabled="true"><a href="#g">Greyed link</a></div>'
    + '<button>Live button</button>';
  document.body.prepend(groups);
}"""


def test_a_button_below_the_fold_is_scrolled_to_and_clicked(run, page):
    run(page.evaluate("() => document.getElementById('spacer').style.height = '2000px'"))
    html = run(observe(page)).html
    bottom = element_id(html, "Bottom button")
    assert run(execute_action(page, parse_action(f'do(action="Click", element="{bottom}")'))) is None
    assert run(page.evaluate("() => document.getElementById('log').textContent")) == "bottom clicked"
    assert run(page.evaluate("() => window.scrollY")) > 0


def test_hover_menus_on_spans_get_ids_and_hovering_opens_them(run, page):
    html = run(observe(page)).html
    products = element_id(html, "Products")
    account = element_id(html, "Account")
    assert f'<span id="{products}"> Products </span>' in html and "Lamps" not in html
    assert run(execute_action(page, parse_action(f'do(action="Hover", element="{account}")'))) is None
    assert run(page.evaluate("() => document.getElementById('log').textContent")) == "account menu"
    assert run(execute_action(page, parse_action(f'do(action="Hover", element="{products}")'))) is None
    opened = run(observe(page)).html
    lamps = element_id(opened, "Lamps")
    assert f'<span id="{products}"> Products <a id="{lamps}"> Lamps </a> </span>' in opened


def test_hover_styling_of_the_element_itself_gives_no_id(run, page):
    run(page.add_style_tag(content="h1:hover { color: red; opacity: 0.5 } h1:hover::after { display: block }"))
    html = run(observe(page)).html
    assert "<h1> Fidelity </h1>" in html


def _scroll_to_the_end(run, page, config):
    """Scroll Down until the page stops moving (at most 60 times); the observations seen on the way."""
    seen = [run(observe(page, config)).html]
    for _ in range(60):
        before = run(page.evaluate("() => window.scrollY"))
        assert run(execute_action(page, parse_action('do(action="Scroll Down")'))) is None
        if run(page.evaluate("() => window.scrollY")) == before:
            break
        seen.append(run(observe(page, config)).html)
    return seen


@pytest.mark.parametrize(("region", "reachable"), [("page", False), ("from_viewport", True)])
def test_scrolling_reveals_a_long_list_only_from_the_viewport(run, pool, pages, region, reachable):
    async def open_page():
        context = await (await pool.browser()).new_context(viewport={"width": 1280, "height": 720})
        page = await context.new_page()
        await page.goto(f"{pages.url}/long_list.html")
        return context, page

    context, page = run(open_page())
    # A 720-pixel viewport holds about 33 items, 1,800 characters: it fits the budget, as it must for all to be seen.
    config = ObservationConfig(max_chars=2000, region=region)
    try:
        unscrolled = run(observe(page, ObservationConfig(max_chars=2000))).html
        seen = _scroll_to_the_end(run, page, config)
        # Unscrolled, both regions show the same start of the list, cut at the budget.
        assert seen[0] == unscrolled
        assert seen[0].startswith("<h1> Orders </h1>") and "Order 1 " in seen[0] and "Order 300" not in seen[0]
        assert all(len(html) <= 2000 + 60 for html in seen)
        shown = {int(n) for html in seen for n in re.findall(r"Order (\d+) ", html)}
        assert (shown == set(range(1, 301))) is reachable
        if reachable:
            assert seen[-1].startswith(ABOVE_MARK + "\n") and "<h1> Orders </h1>" not in seen[-1]
            last = element_id(seen[-1], "Open 300")
            assert run(execute_action(page, parse_action(f'do(action="Click", element="{last}")'))) is None
    finally:
        run(context.close())


def test_a_short_page_scrolled_still_shows_all_of_it_from_the_viewport(run, page):
    run(page.evaluate("() => document.getElementById('spacer').style.height = '2000px'"))
    run(page.evaluate("() => window.scrollTo(0, 1500)"))
    whole = run(observe(page)).html
    assert "<h1> Fidelity </h1>" in whole and "Bottom button" in whole
    assert run(observe(page, ObservationConfig(region="from_viewport"))).html == whole


@pytest.fixture
def script_hover_page(run, pool, pages):
    """A page whose menus open only through script, in a context with the episode's hover-listener init script."""

    async def open_page():
        context = await (await pool.browser()).new_context(viewport={"width": 1280, "height": 720})
        await context.add_init_script(HOVER_LISTENERS_JS)
        page = await context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        await page.goto(f"{pages.url}/js_hover.html")
        return context, page, errors

    context, page, errors = run(open_page())
    yield page, errors
    run(context.close())


def test_menus_opened_by_script_listeners_get_ids_and_open_on_hover(run, script_hover_page):
    page, errors = script_hover_page
    html = run(observe(page)).html
    shop = element_id(html, "Shop")  # addEventListener("mouseenter")
    element_id(html, "Help")  # the onmouseover property, set from script
    assert "Chairs" not in html and "FAQ" not in html
    for text in ("Clicks only", "Plain words"):  # a click listener alone makes no hover target
        assert text in html and not re.search(rf'id="\d+">\s*{text}', html)
    assert run(execute_action(page, parse_action(f'do(action="Hover", element="{shop}")'))) is None
    opened = run(observe(page)).html
    chairs = element_id(opened, "Chairs")
    assert run(execute_action(page, parse_action(f'do(action="Click", element="{chairs}")'))) is None
    assert run(page.evaluate("() => document.getElementById('log').textContent")) == "chairs"
    help_ = element_id(opened, "Help")  # ids are stamped afresh by each observation
    assert run(execute_action(page, parse_action(f'do(action="Hover", element="{help_}")'))) is None
    assert "FAQ" in run(observe(page)).html
    assert errors == []  # the listener on an element removed at once broke nothing


def test_without_the_init_script_a_script_menu_has_no_id(run, pool, pages):
    async def observe_bare():
        context = await (await pool.browser()).new_context()
        page = await context.new_page()
        await page.goto(f"{pages.url}/js_hover.html")
        html = (await observe(page)).html
        await context.close()
        return html

    html = run(observe_bare())
    assert "Shop" in html and "Plain words" in html  # the page was observed: its visible text is there
    assert not re.search(r'id="\d+">\s*Shop', html)  # what the episode's init script is for
