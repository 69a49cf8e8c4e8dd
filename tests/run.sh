#!/usr/bin/env bash
# The test command of the README: installs what the tests need, then runs every test.
#
# The wgpu path is tested on lavapipe, Mesa's software Vulkan driver, so that it runs on machines
# without a GPU. When no Vulkan driver is present and we may install packages (root, or
# password-less sudo, with apt-get), we install libvulkan1 and mesa-vulkan-drivers.
# The HTML report is rendered in headless Chromium (tests/integration/report.rs); when `chromium` is missing
# we install it the same way, and then require it (DASIM_REQUIRE_CHROMIUM=1), so that the check
# is never skipped silently where it could run. The same goes for Slurm (below).
set -euo pipefail
cd "$(dirname "$0")/.."

have_vulkan() { ls /usr/share/vulkan/icd.d/*.json >/dev/null 2>&1 || ls /etc/vulkan/icd.d/*.json >/dev/null 2>&1; }
have_chromium() { command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; }

if ! have_vulkan; then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" != 0 ]; then
      if sudo -n true 2>/dev/null; then SUDO="sudo -n"; else SUDO="none"; fi
    fi
    if [ "$SUDO" != "none" ]; then
      echo "tests/run.sh: installing a Vulkan driver (libvulkan1, mesa-vulkan-drivers) for the wgpu tests"
      $SUDO apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        libvulkan1 mesa-vulkan-drivers >/dev/null
    fi
  fi
fi
if ! have_vulkan; then
  echo "tests/run.sh: WARNING: no Vulkan driver could be installed; the wgpu comparison test is skipped" >&2
  export DASIM_SKIP_WGPU=1
fi

if ! have_chromium && command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    if sudo -n true 2>/dev/null; then SUDO="sudo -n"; else SUDO="none"; fi
  fi
  if [ "$SUDO" != "none" ]; then
    echo "tests/run.sh: installing chromium for the headless rendering test of the HTML report"
    # Not fatal: without it, the rendering check is skipped with a warning below.
    $SUDO apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null || true
  fi
fi
if have_chromium; then
  export DASIM_REQUIRE_CHROMIUM=1
else
  echo "tests/run.sh: WARNING: chromium could not be installed; the HTML report rendering check is skipped" >&2
fi

# The Slurm test (tests/integration/slurm.rs) brings up a single-node Slurm (slurmctld, slurmd, munged) in a
# temporary directory, as root, and runs an emitted sweep array on it. When the daemons are
# missing we install slurm-wlm and munge the same way, and then require the test
# (DASIM_REQUIRE_SLURM=1), so that it is never skipped silently where it could run.
have_slurm() { command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ]; }
if ! have_slurm && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "tests/run.sh: installing slurm-wlm and munge for the Slurm sweep test"
  # Not fatal: without them, the Slurm test is skipped with a warning below.
  apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurm-wlm munge >/dev/null || true
fi
if have_slurm && [ "$(id -u)" = 0 ]; then
  export DASIM_REQUIRE_SLURM=1
else
  echo "tests/run.sh: WARNING: no Slurm (or not root); the Slurm sweep test is skipped" >&2
fi

# The book (book/, mdBook) must build: includes such as {{#include ../../scenarios/papers/README.md}}
# resolve and every chapter renders (links and TOML snippets are tested by tests/integration/book.rs). mdbook
# is installed from crates.io when missing, once, into ~/.cargo/bin (about 5 minutes on two
# cores); where it cannot be installed (no network), the build is skipped with a warning. mdbook
# reports a broken include as an ERROR but still exits with 0, so its log is checked too.
MDBOOK_VERSION=0.4.52
CARGO_BIN="${CARGO_HOME:-$HOME/.cargo}/bin"
find_mdbook() { command -v mdbook 2>/dev/null || { [ -x "$CARGO_BIN/mdbook" ] && echo "$CARGO_BIN/mdbook"; }; }
MDBOOK="$(find_mdbook || true)"
if [ -z "$MDBOOK" ]; then
  echo "tests/run.sh: installing mdbook $MDBOOK_VERSION from crates.io to build the book"
  # Its own temporary target directory, not the project's.
  env -u CARGO_TARGET_DIR cargo install mdbook --locked --version "$MDBOOK_VERSION" --quiet || true
  MDBOOK="$(find_mdbook || true)"
fi
if [ -n "$MDBOOK" ]; then
  book_log="$(mktemp)"
  if ! "$MDBOOK" build book >"$book_log" 2>&1 || grep -E '\[(ERROR|WARN)\]' "$book_log" >/dev/null; then
    cat "$book_log" >&2
    echo "tests/run.sh: mdbook build book failed (the lines above marked ERROR or WARN)" >&2
    exit 1
  fi
  rm -f "$book_log"
  echo "tests/run.sh: the book builds (book/book/index.html)"
else
  echo "tests/run.sh: WARNING: mdbook could not be installed; the book is not built" >&2
fi

# lavapipe complains on stderr when XDG_RUNTIME_DIR is unset (harmless, but noisy).
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"

# One profile for building, running and testing, so dependencies compile once.
cargo test --release --workspace --all-targets "$@"
cargo test --release --workspace --doc "$@"

# The Python package (pyproject.toml; the binding is src/python.rs, the Python layer src/py/dasim):
# `pip install` builds its wheel with maturin into a fresh virtual environment, with what its
# tests need, and pytest runs tests/python against it, comparing it with the dasim binary built
# above. The wheel's build reuses the release build of burn above (only PyO3 and the root crate,
# with its `python` feature, are compiled). Packages come from PyPI (pip's cache keeps them).
PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "tests/run.sh: installing python3-venv for the Python package's tests"
  apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi
venv="$(mktemp -d)/venv"
"$PYTHON" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet ".[test]"
DASIM_BIN="$(cargo metadata --format-version 1 --no-deps | "$venv/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')/release/dasim" \
  "$venv/bin/python" -m pytest -q tests/python
rm -rf "$(dirname "$venv")"
