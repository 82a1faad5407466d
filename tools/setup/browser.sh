#!/bin/sh
# What the chat page's browser test (test/webui-browser.test.ts) needs: Debian's chromium, driven
# by playwright-core (an npm devDependency, which downloads no browser of its own). `npm test` runs
# this first (pretest): with chromium already there it does nothing; without it, as root on
# Debian / Ubuntu it installs the package; otherwise it stops the test run and says what to type.
#   sudo sh tools/setup/browser.sh
set -eu
if command -v chromium >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "the chat page's browser test needs Chromium: sudo sh tools/setup/browser.sh (Debian / Ubuntu), or put a chromium on PATH" >&2
  exit 1
fi
echo "installing Debian's chromium for the browser test (tools/setup/browser.sh)" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
chromium --version
