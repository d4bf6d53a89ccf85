#!/usr/bin/env bash
# Checks that upstream tiny_http 0.12.0 with patches/*.patch applied in order is exactly
# this directory (the files Cargo builds, and the rest of the package as vendored).
#
#   check-patches.sh          exit 0 when they match; print the difference and exit 1 if not
#   check-patches.sh --diff   print what the vendored tree has that the series lacks, as a
#                             patch (-p1) to start the next one of the series (exit 0)
#
# The pristine crate comes through cargo (a scratch project outside any workspace that
# depends on tiny_http =0.12.0), so cargo checks it against the crates.io index; the only
# network access is that fetch, and none when cargo's cache already holds the crate.
# Upstream's tests/, benches/, examples/, Cargo.lock and Cargo.toml.orig are not vendored
# and are removed before the series is applied. Not compared: this script, PATCHES.md,
# patches/, and cargo's unpack marker .cargo-ok.
set -euo pipefail

version=0.12.0
here=$(cd "$(dirname "$0")" && pwd)
mode=check
case "${1:-}" in
    "") ;;
    --diff) mode=diff ;;
    *)
        echo "usage: $0 [--diff]" >&2
        exit 2
        ;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The pristine crate, through cargo.
mkdir -p "$work/fetch/src"
cat >"$work/fetch/Cargo.toml" <<EOF
[package]
name = "tiny-http-pristine"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
tiny_http = "=$version"

[workspace]
EOF
: >"$work/fetch/src/lib.rs"
metadata=$(cargo metadata --quiet --format-version 1 --manifest-path "$work/fetch/Cargo.toml")
manifest=$(printf '%s\n' "$metadata" |
    grep -o "\"manifest_path\":\"[^\"]*/tiny_http-$version/Cargo.toml\"" |
    sed -n -e 's/^"manifest_path":"//' -e 's/"$//' -e 1p || true)
if [ -z "$manifest" ] || [ ! -f "$manifest" ]; then
    echo "check-patches: cargo did not unpack tiny_http $version" >&2
    exit 1
fi
mkdir "$work/a"
cp -R "$(dirname "$manifest")/." "$work/a/"
(cd "$work/a" && rm -rf tests benches examples Cargo.lock Cargo.toml.orig .cargo-ok)

# The series, in order; each patch must apply exactly (no fuzz).
git -C "$work/a" init --quiet
count=0
for patch in "$here"/patches/*.patch; do
    [ -e "$patch" ] || continue
    if ! git -C "$work/a" apply --whitespace=nowarn "$patch"; then
        echo "check-patches: $(basename "$patch") does not apply" >&2
        exit 1
    fi
    count=$((count + 1))
done
rm -rf "$work/a/.git"

# The vendored tree, without what is not part of the package.
mkdir "$work/b"
cp -R "$here/." "$work/b/"
(cd "$work/b" && rm -rf PATCHES.md patches check-patches.sh .cargo-ok target)

cd "$work"
if [ "$mode" = diff ]; then
    diff -ruN a b || true
    exit 0
fi
if ! diff -ruN a b; then
    echo "check-patches: upstream tiny_http $version with the $count patches differs from vendor/tiny_http (above)" >&2
    exit 1
fi
echo "check-patches: upstream tiny_http $version with $count patches is exactly vendor/tiny_http"
