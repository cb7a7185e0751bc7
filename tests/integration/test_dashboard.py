"""The ops dashboard: its token and cross-site guard, and the on-call click in a real
headless Chromium that puts every P2 request through Envoy on its fallback."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

pytestmark = pytest.mark.integration


def http(url, method="GET", headers=None, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def test_the_dashboard_wants_its_token_and_refuses_cross_site_changes(stack):
    admin, token = stack.sidecar_admin_url, stack.admin_token
    assert http(f"{admin}/dashboard")[0] == 401
    assert http(f"{admin}/dashboard/api/state")[0] == 401
    assert http(f"{admin}/dashboard?token=wrong")[0] == 401
    status, headers, _ = http(f"{admin}/dashboard?token={token}")
    assert status == 303 and headers["Location"] == "/dashboard"
    cookie = headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie

    bearer = {"Authorization": f"Bearer {token}"}
    status, _, body = http(f"{admin}/dashboard/api/state", headers=bearer)
    state = json.loads(body)
    assert status == 200 and state["mode"] == "normal" and set(state["tiers"]) == {"p0", "p1", "p2"}
    mode = f"{admin}/dashboard/api/mode"
    assert http(mode, "POST", bearer, {"mode": "core-only"})[0] == 403  # no page header
    evil = {**bearer, "X-QoS-Request": "dashboard", "Origin": "http://evil.example"}
    assert http(mode, "POST", evil, {"mode": "core-only"})[0] == 403
    page = {**bearer, "X-QoS-Request": "dashboard", "Content-Type": "application/json"}
    assert http(mode, "POST", page, {"mode": "sideways"})[0] == 400
    assert json.loads(http(f"{admin}/dashboard/api/state", headers=bearer)[2])["mode"] == "normal"


def p2_decision(stack) -> str:
    """What an anonymous (P2) chat completion through Envoy gets: admitted, or the reason."""
    status, headers, _ = http(
        f"{stack.envoy_url}/v1/chat/completions",
        "POST",
        {"Content-Type": "application/json"},
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
    )
    assert status == 200
    return headers.get("x-qos-decision", "admitted")


@pytest.mark.timeout(90)
def click(browser, element_id: str) -> None:
    """Click the element as the page shows it now: the page redraws its switches as it
    polls, and an element found just before a redraw is gone by the click."""
    wait = WebDriverWait(browser, 10, ignored_exceptions=(StaleElementReferenceException,))
    wait.until(lambda page: page.find_element(By.ID, element_id).click() is None)


def test_one_click_core_only_sheds_p2_through_envoy_within_a_second(stack, browser, tmp_path):
    assert p2_decision(stack) == "admitted"
    browser.get(stack.dashboard_url)
    wait = WebDriverWait(browser, 10)
    wait.until(expected_conditions.text_to_be_present_in_element((By.ID, "mode"), "normal"))
    wait.until(expected_conditions.presence_of_element_located((By.ID, "tier-p2")))

    click(browser, "core-only")
    clicked = time.monotonic()
    while (decision := p2_decision(stack)) != "shed_core_only":
        assert time.monotonic() - clicked < 1.0, f"P2 still {decision} a second after the click"
    wait.until(expected_conditions.text_to_be_present_in_element((By.ID, "mode"), "core-only"))
    # Beside the switch: the change on record, by the page (no name typed: its address).
    wait.until(
        expected_conditions.text_to_be_present_in_element(
            (By.ID, "changes-last"), "last change: mode core-only by 127.0.0.1 via dashboard"
        )
    )
    browser.find_element(By.ID, "changes-last").click()  # opens the list
    wait.until(
        expected_conditions.text_to_be_present_in_element(
            (By.ID, "changes"), 'mode: "normal" → "core-only"'
        )
    )
    browser.save_screenshot(str(tmp_path / "core-only.png"))

    click(browser, "normal")
    clicked = time.monotonic()
    while p2_decision(stack) != "admitted":
        assert time.monotonic() - clicked < 1.0
    wait.until(expected_conditions.text_to_be_present_in_element((By.ID, "mode"), "normal"))


@pytest.mark.timeout(90)
def test_a_tier_shed_switch_sheds_that_tier(stack, browser):
    browser.get(stack.dashboard_url)
    wait = WebDriverWait(browser, 10)
    wait.until(expected_conditions.element_to_be_clickable((By.ID, "shed-p2")))
    click(browser, "shed-p2")
    clicked = time.monotonic()
    while p2_decision(stack) != "shed_forced":
        assert time.monotonic() - clicked < 1.0
    wait.until(expected_conditions.element_located_selection_state_to_be((By.ID, "shed-p2"), True))
    click(browser, "shed-p2")
    clicked = time.monotonic()
    while p2_decision(stack) != "admitted":
        assert time.monotonic() - clicked < 1.0
