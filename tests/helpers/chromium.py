"""Headless Chromium for the report tests: load a page in a frame, let a script record what it saw."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files"]


def browser() -> str:
    """The Chromium binary, or skip the test."""
    found = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
    if found is None:
        pytest.skip("needs Chromium (Debian: apt-get install chromium)")
    return found


def framed_dom(page: Path, onload: str, work_dir: Path, budget_ms: int = 5000) -> str:
    """The DOM of a probe page that loads `page` in a frame and, once it has loaded, runs `onload` (JavaScript
    with `frame` bound to the frame's document) to record what it found as attributes of the probe's body."""
    probe = work_dir / "probe.html"
    probe.write_text(
        f'<html><body><iframe id="report" src="{page.as_uri()}"></iframe><script>'
        'document.getElementById("report").onload = function () {'
        f"  const frame = this.contentDocument; {onload}"
        "};</script></body></html>"
    )
    return subprocess.run([browser(), *FLAGS, f"--virtual-time-budget={budget_ms}", "--dump-dom", probe.as_uri()],
                          capture_output=True, text=True, timeout=180).stdout


def screenshot(page: Path, out: Path) -> None:
    subprocess.run([browser(), *FLAGS, f"--screenshot={out}", "--window-size=1200,3000", page.as_uri()],
                   capture_output=True, timeout=180)
