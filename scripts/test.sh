#!/usr/bin/env bash
# Runs every test of the workspace: formatting, lints, the whole test suite (every
# backend against real servers the tests start themselves), and a type-check of the
# FoundationDB backend's native path.
#
# Servers and build tools come from Debian's packages. When one is missing, this
# script installs it (as root on Debian/Ubuntu) or says exactly what to install.
# Under CI (CI set) a missing server is a failure, never a silent skip.
set -euo pipefail
cd "$(dirname "$0")/.."

# Every prerequisite is checked by USING it (a version call, a proto compiled against the
# well-known types, libclang loaded), not by looking for a file: a package that installs
# a binary but not what the build reads from it is caught here, with a one-line hint,
# instead of as a build-script panic ten minutes later.
probe_dir=$(mktemp -d)
trap 'rm -rf "$probe_dir"' EXIT
pg_bin() {  # the newest PostgreSQL server binary directory Debian installed
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}
probe() {  # probe NAME: 0 when NAME works here
  case "$1" in
    redis-server) redis-server --version ;;
    redis-tools) redis-cli --version && redis-benchmark --version ;;
    etcd-server) etcd --version ;;
    etcd-client) etcdctl version ;;
    openssl) openssl version ;;
    faketime) FAKETIME_DONT_FAKE_MONOTONIC=1 faketime -f '+1h' true ;;  # SQLite's wall-clock step test
    chromium)  # the dashboard's browser test: a headless page load, as the test runs it
      chromium --headless=new --no-sandbox --disable-gpu --user-data-dir="$probe_dir/chromium" \
        --dump-dom about:blank | grep '<body' ;;
    chromium-driver) chromedriver --version ;;
    protobuf)  # etcd-client's build compiles protos that import the well-known types
      printf 'syntax = "proto3";\nimport "google/protobuf/descriptor.proto";\nimport "google/protobuf/struct.proto";\nmessage Probe { google.protobuf.Value v = 1; }\n' \
        >"$probe_dir/probe.proto" &&
        protoc --proto_path="$probe_dir" --descriptor_set_out="$probe_dir/probe.bin" "$probe_dir/probe.proto" ;;
    postgresql) d=$(pg_bin) && [ -n "$d" ] && "$d/initdb" --version && "$d/postgres" --version ;;
    postgresql-contrib) d=$(pg_bin) && [ -n "$d" ] && "$d/pgbench" --version ;;
    libclang)  # bindgen (foundationdb-sys) loads libclang at build time
      for lib in /usr/lib/llvm-14/lib/libclang.so.1 /usr/lib/x86_64-linux-gnu/libclang-14.so.1; do
        [ -e "$lib" ] || continue
        if command -v python3; then
          python3 -c "import ctypes,sys; ctypes.CDLL(sys.argv[1]).clang_getClangVersion" "$lib" && return 0
        else
          return 0
        fi
      done
      return 1 ;;
  esac
}
# probe name -> Debian packages that provide it, and the hint when it still fails.
packages() {
  case "$1" in
    protobuf) echo "protobuf-compiler libprotobuf-dev" ;;
    libclang) echo "libclang1-14" ;;
    *) echo "$1" ;;
  esac
}
hint() {
  case "$1" in
    protobuf) echo "protoc cannot compile a proto importing google/protobuf/descriptor.proto: install protobuf-compiler AND libprotobuf-dev (the well-known .proto files)" ;;
    libclang) echo "libclang 14 cannot be loaded (bindgen for foundationdb-sys): install libclang1-14 or set LIBCLANG_PATH" ;;
    postgresql|postgresql-contrib) echo "initdb/postgres/pgbench under /usr/lib/postgresql/*/bin do not run: install postgresql postgresql-contrib, or set LIVENESS_POSTGRES_URL" ;;
    *) echo "$1 does not run: install the Debian package $(packages "$1")" ;;
  esac
}
probes=(redis-server redis-tools etcd-server etcd-client openssl protobuf postgresql postgresql-contrib libclang faketime chromium chromium-driver)
failing() {
  local out=()
  for p in "${probes[@]}"; do probe "$p" >/dev/null 2>&1 || out+=("$p"); done
  echo "${out[@]:-}"
}

read -r -a broken <<<"$(failing)"
if [ ${#broken[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  need=()
  for p in "${broken[@]}"; do read -r -a pk <<<"$(packages "$p")"; need+=("${pk[@]}"); done
  echo "==> installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  read -r -a broken <<<"$(failing)"
fi
if [ ${#broken[@]} -gt 0 ]; then
  for p in "${broken[@]}"; do echo "missing: $(hint "$p")" >&2; done
  if [ -n "${CI:-}" ]; then
    echo "CI is set: a missing prerequisite is a failure" >&2
    exit 1
  fi
  # Outside CI, skip those backends' tests explicitly (each prints a SKIP line that
  # cargo's capture does not hide); without this, a missing server fails its tests.
  echo "continuing with LIVENESS_ALLOW_SKIP=1: the tests of those backends skip, each printing a SKIP line" >&2
  export LIVENESS_ALLOW_SKIP=1
fi

# bindgen (foundationdb-sys) finds Debian's libclang here.
if [ -z "${LIBCLANG_PATH:-}" ] && [ -d /usr/lib/llvm-14/lib ]; then
  export LIBCLANG_PATH=/usr/lib/llvm-14/lib
fi

# The rust-version the crates declare is the toolchain this run builds with, so the
# declared minimum is the one checked. Cargo itself refuses an older rustc; a newer one
# means the declared minimum is no longer built by anyone: fail under CI, so that the
# declaration is raised (or an older toolchain installed) rather than left unchecked.
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
have=$(rustc --version | sed -E 's/^rustc ([0-9]+\.[0-9]+).*/\1/')
echo "==> rust-version $msrv, built with rustc $have"
if [ "$have" != "$msrv" ]; then
  echo "rust-version $msrv is not the rustc this run builds with ($have): set it to the toolchain CI checks" >&2
  if [ "${CI:-}" = true ]; then exit 1; fi
fi
echo "==> cargo fmt --check"
cargo fmt --all -- --check
echo "==> cargo clippy (workspace, all targets)"
cargo clippy --workspace --all-targets -- -D warnings
echo "==> cargo clippy (umbrella crate with every backend that links here)"
cargo clippy -p liveness --features redis,postgres,etcd -- -D warnings
echo "==> cargo clippy (FoundationDB native path: type-checked, not linked: no libfdb_c here)"
cargo clippy -p liveness-fdb --features native -- -D warnings
echo "==> cargo doc (a broken intra-doc link is an error)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
# Every library crate packages as crates.io would take it (not the unpublished ones:
# the examples, testkit and the API-stability check): the metadata is there, every
# dependency has a version, path-only dev-dependencies (liveness-testkit) are stripped,
# and FoundationDB packages without its `native` feature. Cargo packages the members in
# dependency order against a local overlay registry. Not verified by building each
# package again from its .crate (that doubles the build, several minutes on 2 cores);
# `--allow-dirty`: a local run with uncommitted edits checks the same thing. It runs
# before the tests, so that the test results are what the run ends with.
echo "==> cargo package (every library crate)"
cargo package --workspace --exclude examples --exclude liveness-testkit \
    --exclude liveness-api-stability --no-verify --allow-dirty
# Most tests wait on leases expiring (I/O and timers, little CPU): run more of them at
# once than there are cores.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-4}"
echo "==> cargo test --workspace"
cargo test --workspace
