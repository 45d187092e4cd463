# shellcheck shell=bash
# Sourced by the install tests (install/, torch/): installs a c10d build into a scratch prefix.

# scratch_install <log tag> <c10d build dir>: makes tmp_dir (removed when the script exits) and
# installs the build into prefix=$tmp_dir/prefix.
scratch_install() {
  local tag=$1 build=$2
  tmp_dir=$(mktemp -d "${TMPDIR:-/tmp}/c10d-$tag.XXXXXX")
  trap 'rm -rf "$tmp_dir"' EXIT
  prefix="$tmp_dir/prefix"
  echo "$tag: installing $build into $prefix"
  cmake --install "$build" --prefix "$prefix" >/dev/null
}
