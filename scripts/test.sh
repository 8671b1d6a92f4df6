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

need=()
have() { command -v "$1" >/dev/null 2>&1; }
have redis-server || need+=(redis-server)
{ have redis-cli && have redis-benchmark; } || need+=(redis-tools)
have etcd || need+=(etcd-server)
have etcdctl || need+=(etcd-client)
have protoc || need+=(protobuf-compiler)
have openssl || need+=(openssl)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || have initdb || need+=(postgresql)
ls /usr/lib/postgresql/*/bin/pgbench >/dev/null 2>&1 || have pgbench || need+=(postgresql-contrib)
ls /usr/lib/x86_64-linux-gnu/libclang-14.so* /usr/lib/llvm-14/lib/libclang*.so* >/dev/null 2>&1 || need+=(libclang1-14)

if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && have apt-get; then
    echo "==> installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "missing: ${need[*]}"
    echo "install them with: sudo apt-get install ${need[*]}"
    if [ -n "${CI:-}" ]; then
      echo "CI is set: a missing server is a failure" >&2
      exit 1
    fi
    echo "continuing: the tests of those backends will print SKIP lines"
  fi
fi

# bindgen (foundationdb-sys) finds Debian's libclang here.
if [ -z "${LIBCLANG_PATH:-}" ] && [ -d /usr/lib/llvm-14/lib ]; then
  export LIBCLANG_PATH=/usr/lib/llvm-14/lib
fi

echo "==> cargo fmt --check"
cargo fmt --all -- --check
echo "==> cargo clippy (workspace, all targets)"
cargo clippy --workspace --all-targets -- -D warnings
echo "==> cargo clippy (umbrella crate with every backend that links here)"
cargo clippy -p liveness --features redis,postgres,etcd -- -D warnings
echo "==> cargo clippy (FoundationDB native path: type-checked, not linked: no libfdb_c here)"
cargo clippy -p backend-fdb --features native -- -D warnings
echo "==> cargo doc (a broken intra-doc link is an error)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
# Most tests wait on leases expiring (I/O and timers, little CPU): run more of them at
# once than there are cores.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-4}"
echo "==> cargo test --workspace"
cargo test --workspace
