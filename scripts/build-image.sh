#!/bin/sh
# Builds the wasmctrl container image (Containerfile) offline with Debian's
# buildah, or podman when buildah is missing.
#
#   scripts/build-image.sh [IMAGE]        default IMAGE: localhost/wasmctrl:latest
#
# Needs: the x86_64-unknown-linux-musl Rust target (rustup target add
# x86_64-unknown-linux-musl), Debian's musl-tools (x86_64-linux-musl-gcc,
# which ring's build script compiles its C and assembly with; installed
# with apt-get when missing and run as root), the wasm32-wasip2 target for
# the webapp component, the ca-certificates package, and buildah or podman.
# CARGO_TARGET_DIR is honoured.
set -eu

image="${1:-localhost/wasmctrl:latest}"
root="$(cd "$(dirname "$0")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
certs=/etc/ssl/certs/ca-certificates.crt

musl_gcc=x86_64-linux-musl-gcc
if ! command -v "$musl_gcc" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "$musl_gcc is missing: installing musl-tools with apt-get" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq musl-tools
    fi
    command -v "$musl_gcc" >/dev/null 2>&1 || {
        echo "error: $musl_gcc is missing: install Debian's musl-tools (sudo apt-get install musl-tools)" >&2
        exit 1
    }
fi
[ -r "$certs" ] || { echo "error: $certs is missing (apt-get install ca-certificates)" >&2; exit 1; }
if command -v buildah >/dev/null 2>&1; then
    builder=buildah
elif command -v podman >/dev/null 2>&1; then
    builder=podman
else
    echo "error: neither buildah nor podman is installed (apt-get install buildah)" >&2
    exit 1
fi

cd "$root"
# A static binary: musl, no glibc or dynamic loader needed in the image.
cargo build --release --locked -p wasmctrl --target x86_64-unknown-linux-musl
cargo build --release --locked -p webapp --target wasm32-wasip2

context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
mkdir -p "$context/plugins"
cp "$target_dir/x86_64-unknown-linux-musl/release/wasmctrl" "$context/wasmctrl"
cp "$target_dir/wasm32-wasip2/release/webapp.wasm" "$context/plugins/webapp.wasm"
cp "$certs" "$context/ca-certificates.crt"
cp Containerfile "$context/Containerfile"

if [ "$builder" = buildah ]; then
    buildah build --pull=never -f "$context/Containerfile" -t "$image" "$context"
else
    podman build --pull=never -f "$context/Containerfile" -t "$image" "$context"
fi
echo "built $image"
