#!/usr/bin/env bash
# Builds the Rust policy in this folder into policy.wasm (a WebAssembly component), with the
# toolchain rustup has active here and wit-bindgen as Cargo.toml pins it.
#
#   ./build.sh            -> policy.wasm
#   ./build.sh -o OUT.wasm
#
# Needs the wasm32-wasip2 target: rustup target add wasm32-wasip2
set -euo pipefail

usage() { echo "usage: $0 [-o OUT.wasm]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd -P)
out=$here/policy.wasm
while getopts "o:" opt; do
  case $opt in o) out=$OPTARG ;; *) usage ;; esac
done
[ $OPTIND -gt $# ] || usage

if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx wasm32-wasip2; then
  echo "the wasm32-wasip2 target is not installed; run: rustup target add wasm32-wasip2" >&2
  exit 1
fi
cd "$here"   # so .cargo/config.toml (the 64 KiB stack) applies
crate=$(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | head -n 1 | tr - _)
target_dir=${CARGO_TARGET_DIR:-$here/target}
cargo build --release --target wasm32-wasip2 --target-dir "$target_dir"
cp "$target_dir/wasm32-wasip2/release/$crate.wasm" "$out"
echo "$out (rust)"
