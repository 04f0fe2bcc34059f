"""A real headless Chromium (Debian's `chromium` + `chromium-driver`, driven by Selenium) for the
report's tests; tests skip with the reason when it is not installed (`.ci/browser-env` installs it)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
SCREENSHOTS = (
    Path(__file__).resolve().parents[2] / "output" / "report"
)  # for a person to look at; not committed
# This machine's network is closed: Chromium must not try to reach Google's services.
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)


def require_chromium() -> None:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("no Chromium here: install Debian's chromium and chromium-driver (.ci/browser-env)")
    pytest.importorskip("selenium", reason="selenium is in the [dev] extra")


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium session that records the browser console."""
    require_chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver: Any) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def decoded_images(driver: Any) -> list[tuple[str, int, int]]:
    """Every image on the page as the browser decoded it: (alt, natural width, height)."""
    return [
        tuple(x)
        for x in driver.execute_script(
            "return Array.from(document.images).map(i => [i.alt, i.naturalWidth, i.naturalHeight])"
        )
    ]


def screenshot_sections(driver: Any, name: str) -> list[Path]:
    """One screenshot per `<h2>` section, under tests/output/report/<name>/."""
    folder = SCREENSHOTS / name
    folder.mkdir(parents=True, exist_ok=True)
    saved = []
    for i, heading in enumerate(driver.find_elements("css selector", "h2")):
        driver.execute_script("arguments[0].scrollIntoView()", heading)
        slug = "".join(c if c.isalnum() else "-" for c in heading.text.lower())[:40]
        path = folder / f"{i:02d}-{slug}.png"
        driver.save_screenshot(str(path))
        saved.append(path)
    return saved
