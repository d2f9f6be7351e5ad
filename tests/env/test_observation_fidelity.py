"""What a person sees is what the observation shows: the gaps of issue 13, each on a real page in Chromium.

`pages/fidelity.html` holds one case per gap; every test observes it in a fresh context (some tests act
on the page) and checks the text and the ids the model gets.
"""

from __future__ import annotations

import pytest
from env_helpers import element_id

from webrl.env.observation import observe

pytestmark = pytest.mark.timeout(120)


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
