#!/usr/bin/env bash
# Fetch the ONNX Runtime C/C++ API headers into DEST/include/onnxruntime (default DEST: <repo>/build/ort-headers).
#
# Neither the onnxruntime wheel nor Debian 12 ships them; Debian 13 (trixie) has libonnxruntime-dev 1.21
# (ORT_API_VERSION 21), and ORT >= 1.21 (1.31 included) serves API 21, so we build against those.
# A private apt configuration points the machine's own Debian mirror at trixie and `apt-get download`s the one
# package, unpacked with dpkg-deb: nothing is installed, the system's apt configuration is untouched (~2 s).
# Idempotent: does nothing when the headers are already there. The headers are never committed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=${1:-$(dirname "$here")/build/ort-headers}
hdr="$dest/include/onnxruntime/onnxruntime_c_api.h"
if [ -f "$hdr" ]; then
  echo "ORT headers already in $dest/include/onnxruntime"
  exit 0
fi
for tool in apt-get dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "fetch_ort_headers.sh: needs $tool (a Debian/Ubuntu machine)" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/etc" "$work/lists/partial" "$work/cache/archives/partial"
# The machine's own mirror (deb822 sources first, then the one-line format); fall back to deb.debian.org.
uri=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | tr ' ' '\n' | grep -v security | head -n1 || true)
[ -n "$uri" ] || uri=$(awk '$1=="deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$uri" ] || uri=http://deb.debian.org/debian
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || { echo "fetch_ort_headers.sh: $keyring missing (apt-get install debian-archive-keyring)" >&2; exit 1; }
cat > "$work/etc/trixie.sources" <<SRC
Types: deb
URIs: $uri
Suites: trixie
Components: main
Signed-By: $keyring
SRC
opts=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$work/etc" -o Dir::Etc::Preferences=/dev/null
      -o Dir::Etc::PreferencesParts="$work/etc" -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache"
      -o APT::Architecture="$(dpkg --print-architecture)" -o APT::Sandbox::User="$(id -un)")
apt-get "${opts[@]}" -qq update
(cd "$work" && apt-get "${opts[@]}" -qq download libonnxruntime-dev)
deb=$(ls "$work"/libonnxruntime-dev_*.deb)
dpkg-deb -x "$deb" "$work/x"
# Populate a sibling directory, then rename: an interrupted run never leaves half a header tree behind.
mkdir -p "$dest"
rm -rf "$dest/include.tmp"
mkdir -p "$dest/include.tmp"
cp -r "$work/x/usr/include/onnxruntime" "$dest/include.tmp/"
rm -rf "$dest/include"
mv "$dest/include.tmp" "$dest/include"
echo "ORT headers from $(basename "$deb") -> $dest/include/onnxruntime" \
     "($(grep -m1 -o 'ORT_API_VERSION [0-9]*' "$hdr"))"
