#!/bin/sh
# Install Debian's headless-capable Chromium for the eval report browser test
# (tests/core/test_eval_browser.py). CI sets AGENTIUM_REQUIRE_CHROMIUM=1 so that
# test fails, never skips, when the browser is missing.
set -eu
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium
