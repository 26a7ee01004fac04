#!/usr/bin/env bash
# scripts/offline-bundle.sh OUT_DIR
#
# Run on a connected Debian 12 machine: gathers the C++ dependencies hetpar builds with beyond
# LibTorch into one folder (headers, static libraries, CMake configs; at most 60 MB), to copy to
# a machine without internet or Debian's -dev packages (a GPU node) and build there with
#   cmake ... -DHETPAR_BUNDLE=OUT_DIR        or   make build BUNDLE=OUT_DIR
#
# What is in it and why:
#   toml++, CLI11, nlohmann-json  header-only, with their CMake configs
#   GoogleTest, GoogleMock        headers, static libraries, CMake configs (the tests)
#   Google Benchmark              headers, CMake config, its shared library (Debian has no static
#                                 one; 0.3 MB, found through the build tree's rpath)
#   gloo                          headers only (to compile torch's ProcessGroupGloo.hpp; the
#                                 LibTorch carries gloo itself)
# Not in it: fmt (hetpar uses the fmt headers the LibTorch ships, header-only), LibTorch, NCCL,
# the CUDA toolkit (all on the GPU node already).
#
# The .deb files are fetched with `apt-get download` and unpacked with `dpkg-deb -x` into a
# temporary folder, so nothing is installed. Where the download fails (no package lists, no
# network) and the packages are installed, their installed files are used instead.
set -euo pipefail

out="${1:?usage: scripts/offline-bundle.sh OUT_DIR}"
limit_mb="${HETPAR_BUNDLE_LIMIT_MB:-60}"
packages=(libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libgtest-dev libgmock-dev
  libbenchmark-dev libbenchmark1debian libgloo-dev)

if [[ -e "$out" && ! -f "$out/hetpar-bundle.txt" ]] && [[ -n "$(ls -A "$out" 2>/dev/null)" ]]; then
  echo "offline-bundle: $out exists and is no bundle; not overwriting it" >&2
  exit 1
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
root="$tmp/root"
mkdir -p "$root" "$tmp/debs"

if (cd "$tmp/debs" && apt-get download "${packages[@]}" >"$tmp/apt.log" 2>&1); then
  for deb in "$tmp"/debs/*.deb; do dpkg-deb -x "$deb" "$root"; done
  source="downloaded .deb files"
else
  echo "offline-bundle: apt-get download failed (run apt-get update?):" >&2
  tail -3 "$tmp/apt.log" >&2
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || {
      echo "offline-bundle: and $p is not installed either" >&2; exit 1; }
  done
  echo "offline-bundle: using the installed packages' files instead" >&2
  dpkg -L "${packages[@]}" | while read -r f; do
    [[ -f "$f" || -L "$f" ]] || continue
    mkdir -p "$root$(dirname "$f")"
    cp -a "$f" "$root$f"
  done
  source="installed packages"
fi

# Only headers, libraries and CMake configs; /usr/... becomes OUT_DIR/...
stage="$tmp/bundle"
mkdir -p "$stage"
cp -a "$root/usr/include" "$stage/"
mkdir -p "$stage/lib" "$stage/share"
for d in "$root"/usr/lib/*/; do
  arch="$(basename "$d")"
  mkdir -p "$stage/lib/$arch"
  cp -a "$d"/*.a "$d"/*.so* "$stage/lib/$arch/" 2>/dev/null || true
  [[ -d "$d/cmake" ]] && cp -a "$d/cmake" "$stage/lib/$arch/"
done
cp -a "$root/usr/share/cmake" "$stage/share/"
rm -rf "$stage/share/cmake/Gloo"   # names libgloo.so, which is not needed: headers only

# toml++: Debian builds it as a shared library (libtomlplusplus.so.3, in another package); the
# bundle uses it header-only instead, so a binary built with it needs nothing from the bundle.
toml_config="$(echo "$stage"/lib/*/cmake/tomlplusplus/tomlplusplusConfig.cmake)"
perl -pi -e 's/^(\s*)if \(True\)/$1if (FALSE)  # hetpar bundle: header-only/' "$toml_config"
rm -f "$stage"/lib/*/libtomlplusplus.so*
if ! grep -q 'if (FALSE)  # hetpar bundle' "$toml_config"; then
  echo "offline-bundle: $toml_config is not the toml++ config this script knows; check it" >&2
  exit 1
fi

# Relocatable configs: CMake's generated configs compute their prefix from their own location,
# except for a check that compares against the absolute install path (/usr/...) they were
# built for. Drop that check; then no absolute path may remain.
find "$stage" -name '*.cmake' -print0 | while IFS= read -r -d '' f; do
  perl -0pi -e 's/get_filename_component\(_realCurr .*?unset\(_realCurr\)\n//sg' "$f"
done
if left="$(grep -rn '"/usr\|[ (]/usr/' "$stage" --include='*.cmake' | grep -v '^[^:]*:[0-9]*:\s*#')"; then
  echo "offline-bundle: absolute paths left in the CMake configs:" >&2
  echo "$left" >&2
  exit 1
fi

{
  echo "# hetpar offline bundle: cmake -DHETPAR_BUNDLE=<this folder> (see docs/design.md, Build)"
  # shellcheck source=/dev/null
  echo "# made $(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release && echo "$PRETTY_NAME") from $source"
  for p in "${packages[@]}"; do
    if [[ "$source" == "installed packages" ]]; then
      dpkg-query -W -f='${Package} ${Version}\n' "$p"
    else
      dpkg-deb -f "$tmp"/debs/"${p}"_*.deb Package Version | paste -sd' ' | sed 's/^Package: //; s/ Version: / /'
    fi
  done
} >"$stage/hetpar-bundle.txt"

size_kb="$(du -sk "$stage" | cut -f1)"
size_mb="$(( (size_kb + 1023) / 1024 ))"
if (( size_kb > limit_mb * 1024 )); then
  echo "offline-bundle: $size_mb MB is more than the $limit_mb MB allowed" >&2
  exit 1
fi
rm -rf "$out"
mkdir -p "$(dirname "$out")"
cp -a "$stage" "$out"
echo "offline-bundle: $out: $(du -sh "$out" | cut -f1) ($size_kb KB; limit $limit_mb MB), from $source:"
grep -v '^#' "$out/hetpar-bundle.txt" | sed 's/^/  /'
echo "offline-bundle: build with  cmake ... -DHETPAR_BUNDLE=$(cd "$out" && pwd)  (or make build BUNDLE=...)"
