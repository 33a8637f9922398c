#!/usr/bin/env bash
# The TypeScript SDK client for the interop tests, at the version package-lock.json pins,
# installed once into ~/.cache/tooladapter/mcp-ts-<lock digest>/ (npm ci from the lock;
# node and npm from the machine). Prints the directory holding client.mjs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${TOOLADAPTER_CACHE:-$HOME/.cache/tooladapter}"
key="$(cat "$here/package.json" "$here/package-lock.json" "$here/client.mjs" | sha256sum | cut -c1-16)"
dir="$cache/mcp-ts-$key"
if [ ! -f "$dir/.installed" ]; then
  command -v node >/dev/null || { echo "mcp-ts: node is not installed" >&2; exit 1; }
  tmp="$(mktemp -d "$cache/mcp-ts-tmp.XXXXXX")"
  cp "$here/package.json" "$here/package-lock.json" "$here/client.mjs" "$tmp/"
  (cd "$tmp" && npm ci --no-audit --no-fund --loglevel=error >&2)
  touch "$tmp/.installed"
  rm -rf "$dir" && mv "$tmp" "$dir" || rm -rf "$tmp"
fi
echo "$dir"
