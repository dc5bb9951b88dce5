#!/usr/bin/env bash
# Headless Chromium for the browser tests (tests/reports/test_browser.py, tests/helpers/chromium.py), from Debian's packages,
# when it is missing. Non-interactive; it never fails the caller: without a browser those tests skip and say why.
set -uo pipefail
if command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "install-chromium: not root or no apt-get; the browser tests will skip" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
{ apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null; } </dev/null \
    || echo "install-chromium: apt-get could not install chromium; the browser tests will skip" >&2
exit 0
