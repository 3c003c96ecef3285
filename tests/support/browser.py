"""Real headless Chromium (Debian's `chromium` and `chromedriver`) driven by Selenium.

The driver is given explicitly, so Selenium Manager never tries to download a browser; Chromium runs with
its background networking off, so the only requests it makes are the page's own to 127.0.0.1.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@contextmanager
def chromium(width: int = 1280, height: int = 720, *, resolve_to_loopback: str | None = None,
             trust_any_certificate: bool = False) -> Iterator[webdriver.Chrome]:
    """`resolve_to_loopback="*.preview.test"` sends those host names to 127.0.0.1 and every other name nowhere (a
    wildcard DNS record without touching the host's resolver); `trust_any_certificate` for a test's own CA."""
    if not shutil.which(CHROMIUM) or not shutil.which(CHROMEDRIVER):
        raise RuntimeError("chromium and chromium-driver are not installed; run scripts/prepare-test-host")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # --no-proxy-server: a proxy in the environment (http_proxy) would otherwise carry *.preview.test away
    for flag in ("--headless=new", "--no-sandbox", "--no-proxy-server", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-default-apps",
                 "--disable-sync", "--no-first-run", "--metrics-recording-only", "--disable-extensions",
                 f"--window-size={width},{height}"):
        options.add_argument(flag)
    if resolve_to_loopback:
        options.add_argument(f"--host-resolver-rules=MAP {resolve_to_loopback} 127.0.0.1, MAP * ~NOTFOUND, "
                             "EXCLUDE 127.0.0.1")
    if trust_any_certificate:
        options.add_argument("--ignore-certificate-errors")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def open_page(browser: webdriver.Chrome, url: str, attempts: int = 3) -> None:
    """`browser.get(url)`, again (at most `attempts` times) only while Chromium shows its own network-error page —
    a connection refused or reset on the way, never a page the server answered. The last error is in the
    assertion's message of whatever the caller checks next."""
    for _ in range(attempts):
        browser.get(url)
        if not network_error(browser):
            return


def wait_for_fetched(browser: webdriver.Chrome, url: str, element: str, expected: str, attempts: int = 3) -> None:
    """Open `url` until the page's script has written `expected` into the element `element` (within 30 s), opening it
    again (at most `attempts` times) only while the script says its fetch failed — a connection refused or reset on
    the way, as `open_page` allows for the page itself. An AssertionError with each attempt's page and the
    browser's console otherwise."""
    seen = []
    for _ in range(attempts):
        open_page(browser, url)
        try:
            WebDriverWait(browser, 30).until(
                lambda b: b.find_element(By.ID, element).text == expected or
                b.find_element(By.ID, element).text.startswith("failed:"))
        except TimeoutException:
            pass
        text = browser.find_element(By.ID, element).text
        if text == expected:
            return
        seen.append(f"{page_summary(browser)} console={browser.get_log('browser')!r}"[:2000])
        if not text.startswith("failed:"):
            break
    raise AssertionError(f"{element} never showed {expected!r}: " + " | ".join(seen))


def network_error(browser: webdriver.Chrome) -> str | None:
    """Chromium's error page carries the net error code (ERR_CONNECTION_RESET and the like) in its text."""
    text = browser.execute_script("return document.body ? document.body.innerText : ''") or ""
    codes = [word for word in text.split() if word.startswith(("ERR_", "NET::ERR_"))]
    return codes[0] if codes else None


def page_summary(browser: webdriver.Chrome) -> str:
    """What a failed check prints: where the browser is, the title, and the start of the page's text."""
    text = browser.execute_script("return document.body ? document.body.innerText : ''") or ""
    return f"{browser.current_url} title={browser.title!r} text={text[:300]!r}"
