#!/usr/bin/env bash
# What the dashboard's browser test needs, installed where it is missing: Debian's
# Chromium (no browser is downloaded by npm) and playwright-core from package-lock.json.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x /usr/bin/chromium ]; then
    echo "installing Debian's chromium"
    if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q chromium
fi
if [ ! -d node_modules/playwright-core ]; then
    command -v npm >/dev/null || { echo "npm is missing: the browser test needs Node.js and npm" >&2; exit 1; }
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund
fi
/usr/bin/chromium --version
