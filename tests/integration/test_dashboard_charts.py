"""The duty team's screen in a real headless Chromium: real traffic through Envoy into a
load shed, and the page's charts and "what is happening" line show it; every switch says
who made it, and its mark lands on the time axis."""

from __future__ import annotations

import json
import re
import time
import urllib.request

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from sidecar.tooling.stack.stack import Stack, StackOptions

pytestmark = pytest.mark.integration

P0_KEY = "charts-p0"
LIMIT = 10  # in-flight requests the fleet takes; P2 is shed above 20 % of them
HELD = 3
# A slow mock GPU: one decode step every 2 s, so a streamed answer stays in flight.
SLOW_GPU = ("--decode-step-ms", "2000")


@pytest.fixture(scope="module")
def charts_stack(tmp_path_factory):
    options = StackOptions.on_free_ports(
        tmp_path_factory.mktemp("charts-stack"), replicas=1, envoy_concurrency=1, mock_args=SLOW_GPU
    )
    with Stack(options) as stack:
        stack.config.tenant("pay", "p0", P0_KEY)
        stack.config.set(
            {"fleet": {"max_concurrency": LIMIT}, "tiers": {"p2": {"shed_above_inflight": 0.2}}}
        )
        yield stack


def chat(stack, headers=None, stream=False):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64, "stream": stream}
    if not stream:
        body["max_tokens"] = 1
    request = urllib.request.Request(
        f"{stack.envoy_url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    return urllib.request.urlopen(request, timeout=30)


def p2_decision(stack) -> str:
    with chat(stack) as response:
        return response.headers.get("x-qos-decision", "admitted")


class Held:
    """P0 streams kept open (the slow GPU answers a token every 2 s), holding slots."""

    def __init__(self, stack, count: int) -> None:
        self.responses = [chat(stack, {"Authorization": f"Bearer {P0_KEY}"}, stream=True)]
        self.responses += [
            chat(stack, {"Authorization": f"Bearer {P0_KEY}"}, stream=True)
            for _ in range(count - 1)
        ]
        for response in self.responses:
            response.readline()  # the first chunk: admitted and streaming

    def close(self) -> None:
        for response in self.responses:
            response.close()


def drawn_above_zero(browser, selector: str) -> list[float]:
    """The heights above the chart's zero line of the points drawn for the series."""
    path = browser.find_element(By.CSS_SELECTOR, selector)
    svg = path.find_element(By.XPATH, "./ancestor::*[local-name()='svg']")
    zero = float(svg.get_attribute("data-zero-y"))
    points = re.findall(r"[ML]([\d.]+),([\d.]+)", path.get_attribute("d"))
    return [round(zero - float(y), 1) for _, y in points]


@pytest.mark.timeout(120)
def test_a_load_shed_through_envoy_is_charted_and_told_in_plain_words(
    charts_stack, browser, tmp_path
):
    screenshots = tmp_path
    stack = charts_stack
    assert p2_decision(stack) == "admitted"
    browser.get(stack.dashboard_url)
    wait = WebDriverWait(browser, 20)
    wait.until(
        expected_conditions.text_to_be_present_in_element((By.ID, "happening"), "Nothing shed")
    )

    held = Held(stack, HELD)
    try:
        shed = 0
        deadline = time.monotonic() + 15
        # Shed P2 requests for a few seconds, so the page sees a run of them.
        while shed < 20:
            assert time.monotonic() < deadline, "P2 was not shed with 3 of 10 in flight"
            shed += p2_decision(stack) == "shed_inflight"
        wait.until(
            expected_conditions.text_to_be_present_in_element((By.ID, "happening"), "P2 shed since")
        )
        line = browser.find_element(By.ID, "happening").text
        assert "too many requests in flight" in line and f"{HELD} of {LIMIT} in flight" in line, (
            line
        )
        selector = "#chart-default-shed path[data-tier='p2'][data-reason='shed_inflight']"
        wait.until(lambda _: sum(drawn_above_zero(browser, selector)) > 0)
        heights = drawn_above_zero(browser, selector)
        assert max(heights) > 0 and min(heights) >= 0
        in_flight = drawn_above_zero(
            browser, "#chart-default-in-flight path[data-series='in flight']"
        )
        assert max(in_flight) > 0  # the held streams
        rule = browser.find_element(
            By.CSS_SELECTOR, "#chart-default-in-flight [data-line='P2 sheds above'] line"
        )
        svg = browser.find_element(By.ID, "chart-default-in-flight")
        assert float(rule.get_attribute("y1")) < float(svg.get_attribute("data-zero-y"))
        browser.save_screenshot(str(screenshots / "shed.png"))
    finally:
        held.close()


@pytest.mark.timeout(120)
def test_a_switch_says_who_made_it_and_marks_the_time_axis(charts_stack, browser):
    stack = charts_stack
    browser.get(stack.dashboard_url)
    wait = WebDriverWait(browser, 20)
    wait.until(expected_conditions.presence_of_element_located((By.ID, "chart-default-admitted")))
    browser.find_element(By.ID, "operator").send_keys("Alice")
    browser.find_element(By.ID, "core-only").click()
    wait.until(expected_conditions.text_to_be_present_in_element((By.ID, "mode"), "core-only"))
    wait.until(
        expected_conditions.text_to_be_present_in_element(
            (By.ID, "mode-last"), "mode core-only by Alice"
        )
    )
    assert "via dashboard" in browser.find_element(By.ID, "mode-last").text
    wait.until(
        expected_conditions.text_to_be_present_in_element(
            (By.ID, "happening"), "Protect transactions only"
        )
    )
    assert "mode core-only by Alice" in browser.find_element(By.ID, "happening").text
    marks = "#chart-default-admitted .event-switch"
    wait.until(lambda _: browser.find_elements(By.CSS_SELECTOR, marks))

    # A script's switch (a bearer token) says so, and the page shows it.
    request = urllib.request.Request(
        f"{stack.sidecar_admin_url}/dashboard/api/mode",
        data=json.dumps({"mode": "normal", "by": "runbook"}).encode(),
        headers={
            "Authorization": f"Bearer {stack.admin_token}",
            "X-QoS-Request": "script",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        switches = json.loads(response.read())["switches"]
    assert switches[0]["what"] == "mode normal" and switches[0]["via"] == "api"
    assert switches[0]["by"].startswith("runbook from 127.0.0.1")
    wait.until(expected_conditions.text_to_be_present_in_element((By.ID, "mode-last"), "via api"))
    wait.until(lambda _: len(browser.find_elements(By.CSS_SELECTOR, marks)) >= 2)


@pytest.mark.timeout(60)
def test_the_page_in_either_theme(charts_stack, browser):
    browser.get(charts_stack.dashboard_url)
    wait = WebDriverWait(browser, 20)
    wait.until(expected_conditions.presence_of_element_located((By.ID, "chart-default-admitted")))
    background = {}
    for theme in ("dark", "light"):
        browser.get(f"{charts_stack.sidecar_admin_url}/dashboard?theme={theme}")
        wait.until(
            expected_conditions.presence_of_element_located((By.ID, "chart-default-admitted"))
        )
        assert browser.execute_script("return document.documentElement.dataset.theme") == theme
        background[theme] = browser.execute_script(
            "return getComputedStyle(document.body).backgroundColor"
        )
    assert background["dark"] != background["light"]


@pytest.mark.timeout(60)
def test_a_1080p_screen_shows_every_table_and_readable_axes(charts_stack, browser):
    browser.set_window_size(1920, 1080)
    browser.get(charts_stack.dashboard_url)
    wait = WebDriverWait(browser, 20)
    wait.until(expected_conditions.presence_of_element_located((By.ID, "pool-default")))
    wait.until(expected_conditions.presence_of_element_located((By.ID, "chart-default-admitted")))
    wait.until(lambda page: page.find_elements(By.CSS_SELECTOR, "#pods tbody tr"))
    height = browser.execute_script("return window.innerHeight")
    for table in ("tiers", "pools", "pods"):
        bottom = browser.execute_script(
            "return document.getElementById(arguments[0]).getBoundingClientRect().bottom", table
        )
        assert 0 < bottom <= height, (table, bottom, height)
    # Each chart's y axis names five different values (no "1 ms, 1 ms, 1 ms").
    axes = browser.execute_script(
        "return [...document.querySelectorAll('#charts svg')].map((svg) =>"
        " [...svg.querySelectorAll('.grid text[text-anchor=end]')].map((t) => t.textContent))"
    )
    assert axes and all(len(labels) == 5 == len(set(labels)) for labels in axes), axes
    # The formats the axes use, on an axis from 0 to 1 (a fast GPU's first tokens in ms).
    formatted = browser.execute_async_script(
        "const done = arguments[0];"
        "import('/dashboard/static/history.js').then((m) => done("
        " [0, 0.25, 0.5, 0.75, 1].map((v) => [m.ms(v), m.count(v), m.percent(v)])))"
    )
    for column in zip(*formatted, strict=True):
        assert len(set(column)) == 5, column
