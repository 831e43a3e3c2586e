#!/usr/bin/env bash
# Builds the policy components from this folder into policies/dist/, which is committed: the
# server embeds dist/ (server/build.rs), so building the server needs no wasm target.
#
#   policies/build.sh           rebuild and overwrite dist/ (commit the result)
#   policies/build.sh --check   rebuild into a temporary folder and fail if any file differs
#                               from dist/ (CI runs this, so dist/ never drifts from source)
#
# Needs the wasm32-wasip2 target (rustup target add wasm32-wasip2). The bytes depend only on
# the sources, Cargo.lock and the toolchain pinned in rust-toolchain.toml: the paths that
# would otherwise leak into panic messages (this clone, CARGO_HOME, the target folder) are
# remapped to fixed names, so every clone builds the same files.
set -euo pipefail

usage() { echo "usage: $0 [--check]" >&2; exit 2; }
check=
case "${1:-}" in
  "") ;;
  --check) check=1 ;;
  *) usage ;;
esac
[ $# -le 1 ] || usage

policies=$(cd "$(dirname "$0")" && pwd -P)
cd "$policies"   # so .cargo/config.toml (the 64 KiB stack) and rust-toolchain.toml apply

# rust-toolchain.toml does not name the target (the server does not need it): say so plainly.
if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx wasm32-wasip2; then
  echo "the wasm32-wasip2 target is not installed; run: rustup target add wasm32-wasip2" >&2
  exit 1
fi

cargo_home=$(cd "${CARGO_HOME:-$HOME/.cargo}" && pwd -P)
target_dir=${CARGO_TARGET_DIR:-$policies/target}
mkdir -p "$target_dir"
target_dir=$(cd "$target_dir" && pwd -P)
sysroot=$(rustc --print sysroot)

# (crate file name, file name in dist/): one line per component the server embeds.
components=(
  "authz.wasm authz.wasm"
  "moderation.wasm moderation.wasm"
  "hostile_spin.wasm hostile-spin.wasm"
  "hostile_bomb.wasm hostile-bomb.wasm"
  "hostile_trap.wasm hostile-trap.wasm"
  "hostile_sleep.wasm hostile-sleep.wasm"
  "hostile_deny_all.wasm hostile-deny-all.wasm"
  "hostile_remember_orgs.wasm hostile-remember-orgs.wasm"
  "compat_authz_1_0_0.wasm authz-1.0.0.wasm"
)

# Flags from the environment would replace .cargo/config.toml's and change the bytes.
unset RUSTFLAGS CARGO_ENCODED_RUSTFLAGS CARGO_BUILD_RUSTFLAGS RUSTC_WRAPPER RUSTC_WORKSPACE_WRAPPER \
  CARGO_BUILD_TARGET CARGO_TARGET_WASM32_WASIP2_RUSTFLAGS

# --config arrays are appended to .cargo/config.toml's, so the stack flag stays. rustc applies
# the last remap that matches, so the target folder (policies/target by default) comes after
# policies/.
remaps=""
for pair in "$policies=/policies" "$target_dir=/target" "$cargo_home=/cargo" "$sysroot=/rustc-sysroot"; do
  remaps+="'--remap-path-prefix=$pair', "
done
cargo build --release --locked --target wasm32-wasip2 --target-dir "$target_dir" \
  --config "target.wasm32-wasip2.rustflags = [${remaps%, }]"

out=$target_dir/wasm32-wasip2/release
if [ -z "$check" ]; then
  mkdir -p dist
  for line in "${components[@]}"; do
    read -r built shipped <<<"$line"
    cp "$out/$built" "dist/$shipped"
  done
  echo "policies/dist/ rebuilt; commit it with the sources that changed"
  exit 0
fi

status=0
for line in "${components[@]}"; do
  read -r built shipped <<<"$line"
  if ! cmp -s "$out/$built" "dist/$shipped"; then
    echo "policies/dist/$shipped differs from what policies/ builds" >&2
    status=1
  fi
done
if [ "$status" -ne 0 ]; then
  echo "refresh it with: policies/build.sh   (then commit policies/dist/)" >&2
  exit 1
fi
echo "policies/dist/ matches its sources"
