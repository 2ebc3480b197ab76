#!/bin/sh
# webfpm offline bundle: unpacks once per bundle version into a temporary folder, then
# runs a deno task there:   webfpm/run validate --kernel gemv
# Paths you pass are resolved against the folder you run from.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
version=$(cat "$here/VERSION")
base=${WEBFPM_UNPACK_DIR:-${TMPDIR:-/tmp}/webfpm-$version}

# Several processes may start at once (ranks, side-by-side runs): each unpacks into its own
# folder and the first to finish renames it into place; the others drop theirs.
if [ ! -f "$base/.unpacked" ]; then
  command -v xz >/dev/null || { echo "webfpm: the bundle needs 'xz' (xz-utils) to unpack" >&2; exit 1; }
  part="$base.part.$$"
  rm -rf "$part"
  mkdir -p "$part/node_modules/deno"
  xz -dc "$here/deno.xz" > "$part/node_modules/deno/deno"
  chmod +x "$part/node_modules/deno/deno"
  xz -dc "$here/app.tar.xz" | tar -C "$part" -xf -
  touch "$part/.unpacked"
  # a folder left by an interrupted unpack (no .unpacked) is never in use: replace it
  [ -d "$base" ] && [ ! -f "$base/.unpacked" ] && rm -rf "$base"
  mv -T "$part" "$base" 2>/dev/null || rm -rf "$part"
  [ -f "$base/.unpacked" ] || { echo "webfpm: could not unpack into $base" >&2; exit 1; }
fi

# dawn.node is built against glibc 2.34 (and GCC 12's libstdc++): say so rather than fail later
glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
case "$glibc" in
  2.[0-9] | 2.[12][0-9] | 2.3[0-3])
    echo "webfpm: the bundle needs glibc 2.34 or newer (this host has $glibc)" >&2
    exit 1
    ;;
esac
export WEBFPM_BUNDLE=1

nvidia_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ] && [ -f "$nvidia_icd" ]; then
  export VK_DRIVER_FILES="$nvidia_icd"
fi
# The bundled Vulkan loader and GL dispatch libraries fill in only what the host lacks.
missing="$base/lib/missing-on-$(hostname 2>/dev/null || echo host)"
if [ ! -d "$missing" ]; then
  mpart="$missing.part.$$"
  mkdir -p "$mpart"
  # (ldconfig is in /sbin for a user whose PATH leaves it out)
  known=""
  for ldc in ldconfig /sbin/ldconfig /usr/sbin/ldconfig; do
    if known=$("$ldc" -p 2>/dev/null); then break; fi
    known=""
  done
  for lib in "$base"/lib/lib*.so*; do
    name=$(basename "$lib")
    case "$known" in *"$name "*) ;; *) ln -sf "$lib" "$mpart/$name" ;; esac
  done
  mv -T "$mpart" "$missing" 2>/dev/null || rm -rf "$mpart"
fi
export LD_LIBRARY_PATH="$missing${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Mesa's device-select layer: passive unless a rank sets DRI_PRIME to pick its GPU.
export XDG_DATA_DIRS="$base/share:${XDG_DATA_DIRS:-/usr/local/share:/usr/share}"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
export DENO_DIR="$base/.deno_dir"
export DENO_NO_UPDATE_CHECK=1
if [ $# -eq 0 ]; then
  echo "usage: $0 TASK [options]   (tasks: see $base/deno.json)" >&2
  exit 2
fi
task=$1
shift
export WEBFPM_CWD="${WEBFPM_CWD:-$(pwd)}"
cd "$base"
exec "$base/node_modules/deno/deno" task -q "$task" "$@"
