"""`bench promo --screenshots DIR`: the duty team's page during the sale, as a wall screen
shows it (1920x1080), in both themes. Needs chromium, chromedriver and selenium (the
test extras); without them the bench says so and goes on."""

from __future__ import annotations

import threading
import time
from pathlib import Path

THEMES = ("dark", "light")
SCREEN = (1920, 1080)


def take_at(moment: float, login_url: str, page_url: str, directory: Path) -> threading.Thread:
    """Screenshots at `moment` (time.monotonic()), taken in a thread of their own."""

    def take() -> None:
        time.sleep(
            max(0.0, moment - time.monotonic())
        )  # a moment of the sale, not a wait for a state
        try:
            saved = _take(login_url, page_url, directory)
        except Exception as error:  # a missing browser must not spoil the bench's figures
            print(f"no screenshots: {type(error).__name__}: {error}", flush=True)
            return
        print(f"screenshots: {', '.join(str(path) for path in saved)}", flush=True)

    thread = threading.Thread(target=take, name="screenshots", daemon=True)
    thread.start()
    return thread


def _take(login_url: str, page_url: str, directory: Path) -> list[Path]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    saved = []
    try:
        width, height = SCREEN  # the page's own size, whatever the window's frame takes
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        driver.get(login_url)
        directory.mkdir(parents=True, exist_ok=True)
        for theme in THEMES:
            driver.get(f"{page_url}?theme={theme}")
            wait = WebDriverWait(driver, 20)
            wait.until(
                expected_conditions.presence_of_element_located((By.CSS_SELECTOR, ".series"))
            )
            path = directory / f"dashboard-{theme}.png"
            driver.save_screenshot(str(path))
            saved.append(path)
    finally:
        driver.quit()
    return saved
