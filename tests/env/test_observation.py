"""Observations of a real page: WebRL's simplified html, ids only on interactive elements, stable ids."""

from __future__ import annotations

import re

import pytest

from webrl.env.observation import (
    ObservationConfig,
    cut_to_budget,
    cut_to_budget_from_end,
    element_selector,
    is_element_id,
    observe,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def page(run, pool, pages):
    """One page on the test shop, shared by this module's read-only checks."""

    async def open_page():
        context = await (await pool.browser()).new_context(viewport={"width": 1280, "height": 720})
        page = await context.new_page()
        await page.goto(f"{pages.url}/actions.html")
        return context, page

    context, page = run(open_page())
    yield page
    run(context.close())


def test_interactive_elements_are_numbered_in_document_order(run, page):
    obs = run(observe(page))
    assert obs.title == "Action test page"
    assert obs.url.endswith("/actions.html")
    assert '<input id="0" type="text" name="q" placeholder="Search products" />' in obs.html
    assert '<button id="1"> Go </button>' in obs.html
    assert '<select id="2" name="sort"><option selected>Price</option><option>Name</option></select>' in obs.html
    assert '<div id="3" role="button"> Hover target </div>' in obs.html
    # Clickable only through a JS handler, marked by cursor:pointer.
    assert '<span id="4"> Styled link </span>' in obs.html
    assert '<a id="5"> Next page </a>' in obs.html
    assert '<textarea id="6" name="notes" value="old notes"></textarea>' in obs.html
    assert '<div id="7"> editable </div>' in obs.html
    assert '<input id="8" type="checkbox" name="agree" checked />' in obs.html
    ids = [int(i) for i in re.findall(r' id="(\d+)"', obs.html)]
    assert ids == list(range(len(ids)))


def test_hidden_nodes_are_dropped_and_wrappers_collapsed(run, page):
    html = run(observe(page)).html
    for hidden in ("Hidden button", "Aria hidden", "Invisible button", "s3cret", "function log"):
        assert hidden not in html
    assert "<div>" not in html and "<span>" not in html and "<form" not in html
    assert "<h1> Test shop </h1>" in html
    assert "<p> Welcome to the test shop. </p>" in html  # inline <b> glued without extra spaces
    assert "<tr> <th> Item </th> <th> Price </th> </tr>" in html
    assert "<td> Lamp </td>" in html
    assert "<li> First </li>" in html
    assert "href" not in html


def test_ids_are_stable_and_stamped_on_the_dom(run, page):
    first = run(observe(page))
    second = run(observe(page))
    assert first.html == second.html
    go = re.search(r'<button id="(\d+)"> Go </button>', first.html).group(1)
    assert run(page.locator(element_selector(go)).get_attribute("id")) == "go"
    stamped = run(page.evaluate("() => document.querySelectorAll('[data-webrl-id]').length"))
    assert stamped == len(re.findall(r' id="\d+"', first.html))


def test_viewport_only_drops_what_is_below_the_fold(run, page):
    assert "Bottom button" in run(observe(page)).html
    assert "Bottom button" not in run(observe(page, ObservationConfig(region="viewport"))).html


def test_bbox_text_limit_and_budget(run, page):
    with_bbox = run(observe(page, ObservationConfig(bbox=True))).html
    assert re.search(r'<button id="1" data-bbox="\d+,\d+,\d+,\d+"> Go </button>', with_bbox)
    clipped = run(observe(page, ObservationConfig(text_limit=5))).html
    assert "<h1> Test… </h1>" in clipped
    assert "<p> Welco… test shop. </p>" in clipped
    small = run(observe(page, ObservationConfig(max_chars=200))).html
    body, marker = small.rsplit("\n", 1)
    assert len(body) <= 200
    assert re.fullmatch(r"\[\.\.\. observation cut: \d+ more characters \.\.\.\]", marker)


def test_cut_to_budget_leaves_short_text_alone():
    assert cut_to_budget("short", 100) == "short"
    cut = cut_to_budget("line one\n" * 20, 100)
    assert cut.startswith("line one\nline one")
    assert cut.endswith("more characters ...]")
    assert "\n[..." in cut
    with pytest.raises(ValueError, match="max_chars"):
        ObservationConfig(max_chars=10)
    with pytest.raises(ValueError, match="region must be one of page, viewport, from_viewport"):
        ObservationConfig(region="screen")


def test_element_ids_are_the_numbers_the_observation_gives():
    for element in ("0", "7", "12", "4096"):
        assert is_element_id(element) and element_selector(element) == f'[data-webrl-id="{element}"]'
    for element in ("", " 3", "3 ", "07", "-1", "1.0", "0x1", "\u0663", "\uff13", "3\n", 'a"]', '0"] , *[x="', "3\\"):
        assert not is_element_id(element), repr(element)
        with pytest.raises(ValueError, match="not an element id"):
            element_selector(element)


def test_cut_from_end_keeps_whole_lines_of_the_end():
    assert cut_to_budget_from_end("short", 100) == "short"
    html = "\n".join(f"line {i:02d}" for i in range(20))
    assert cut_to_budget_from_end(html, 30) == "line 17\nline 18\nline 19"
    assert cut_to_budget_from_end("x" * 50, 10) == "x" * 10
