#!/usr/bin/env bash
# ctk fresh-machine set-up. Usage: scripts/setup.sh [--no-data]
#
#   1. Python venv at .venv (python3 -m venv; $PYTHON picks another interpreter, >= 3.10)
#   2. pip install torch (2.14.1 + torchvision 0.29.1 on x86_64, 2.9.1 + 0.24.1 on aarch64, by
#      uname -m; $TORCH_PINS overrides), then pip install -e '.[all,test]'
#      (dm-control 1.0.50 and mujoco 3.17.0 are pinned together in pyproject.toml).
#      Skipped when .venv/.ctk-setup-stamp records the current pyproject.toml.
#   3. Debian packages when running as root (otherwise prints the command to run): Mesa for
#      headless MuJoCo rendering (MUJOCO_GL=egl or osmesa) and chromium, the headless browser
#      that tests/browser/ drives the mlflow UI with (skipped there without it).
#   4. ctk data fetch default  (into $CTK_DATA, else ./data; see docs/data.md)
#
# Idempotent: a second run does no pip work and fetches nothing. Stops at the first failure
# (set -euo pipefail) and says which step failed.
set -euo pipefail

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; }
FETCH_DATA=1
for arg in "$@"; do
    case "$arg" in
        --no-data) FETCH_DATA=0 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "setup.sh: unknown argument '$arg' (expected --no-data or --help)" >&2; exit 2 ;;
    esac
done

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
PYTHON="${PYTHON:-python3}"
VENV="$REPO/.venv"
PY="$VENV/bin/python"
STAMP="$VENV/.ctk-setup-stamp"
# torch by architecture: x86_64 gets the pinned CUDA build (runs on CPU too); aarch64 machines
# of this kind hold the CPU build 2.9.1 (override either with TORCH_PINS="torch==X torchvision==Y").
case "$(uname -m)" in
    x86_64|amd64) DEFAULT_PINS="torch==2.14.1 torchvision==0.29.1" ;;
    aarch64|arm64) DEFAULT_PINS="torch==2.9.1 torchvision==0.24.1" ;;
    *) DEFAULT_PINS="torch torchvision" ;;
esac
read -r -a TORCH_PINS <<< "${TORCH_PINS:-$DEFAULT_PINS}"
MESA=(libegl1 libegl-mesa0 libgl1-mesa-dri libopengl0 libosmesa6)
BROWSER=(chromium)
SKIPPED=()
STEP="start"
START=$SECONDS

trap 'rc=$?; echo >&2; echo "setup.sh: FAILED (exit $rc) in step \"$STEP\": line $LINENO: $BASH_COMMAND" >&2; exit $rc' ERR

step() { STEP="$1"; printf '\n==> %s\n' "$1"; }
die() { echo "setup.sh: ERROR in step \"$STEP\": $*" >&2; exit 1; }

# ---------------------------------------------------------------- 1. venv
step "Python virtual environment (.venv)"
if [[ ! -x "$PY" ]]; then
    command -v "$PYTHON" >/dev/null || die "'$PYTHON' not found: install Python >= 3.10 or set PYTHON=/path/to/python3"
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
        || die "$("$PYTHON" -V 2>&1) is too old: ctk needs Python >= 3.10 (set PYTHON=...)"
    "$PYTHON" -m venv "$VENV" \
        || die "'$PYTHON -m venv $VENV' failed (see the message above; on Debian/Ubuntu a missing python3-venv package is the usual cause)"
    echo "created $VENV ($("$PY" -V))"
else
    echo "using $VENV ($("$PY" -V))"
fi

# ---------------------------------------------------------------- 2. pip
step "Python packages (torch first, then ctk with extras all,test)"
WANT="pyproject=$(sha256sum pyproject.toml | cut -d' ' -f1) python=$("$PY" -c 'import sys; print(sys.version.split()[0])') torch=${TORCH_PINS[*]}"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
    echo "up to date (pyproject.toml unchanged since the last run; delete $STAMP to reinstall)"
else
    rm -f "$STAMP"
    "$PY" -m pip install "${TORCH_PINS[@]}" \
        || die "pip install ${TORCH_PINS[*]} failed (is the package index reachable?)"
    "$PY" -m pip install -e '.[all,test]' || die "pip install -e '.[all,test]' failed"
    "$PY" -c 'import torch, torchvision, mujoco, dm_control, mlflow
print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, mujoco {mujoco.__version__}")
from toolkit.training.precision import machine_line; print(machine_line())' \
        || die "the installed packages do not import"
    echo "$WANT" > "$STAMP"
fi

# ---------------------------------------------------------------- 3. Debian packages
step "Mesa libraries for headless rendering (${MESA[*]}) and a headless browser (${BROWSER[*]})"
if ! command -v dpkg-query >/dev/null; then
    SKIPPED+=("Mesa and chromium: not a Debian/Ubuntu system; install EGL or OSMesa and Chromium with your package manager")
    echo "skipped: no dpkg-query (not Debian/Ubuntu)"
else
    MISSING=()
    for pkg in "${MESA[@]}" "${BROWSER[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || MISSING+=("$pkg")
    done
    if [[ ${#MISSING[@]} -eq 0 ]]; then
        echo "already installed"
    elif [[ $(id -u) -eq 0 ]]; then
        if ! apt-cache policy "${MISSING[0]}" 2>/dev/null | grep -q 'Candidate: [^(]'; then
            echo "package lists are empty: apt-get update"
            apt-get update -q || die "apt-get update failed"
        fi
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${MISSING[@]}" \
            || die "apt-get install ${MISSING[*]} failed"
    else
        SKIPPED+=("Mesa / chromium (needs root): sudo apt-get update && sudo apt-get install -y --no-install-recommends ${MISSING[*]}")
        echo "SKIPPED: not root, so ${MISSING[*]} were not installed; pixels-based RL needs Mesa, tests/browser/ chromium."
        echo "  run: sudo apt-get update && sudo apt-get install -y --no-install-recommends ${MISSING[*]}"
    fi
fi

# ---------------------------------------------------------------- 4. offline data
step "Offline data: ctk data fetch default (root: ${CTK_DATA:-$REPO/data})"
if [[ $FETCH_DATA -eq 1 ]]; then
    "$VENV/bin/ctk" data fetch default || die "fetching the default datasets failed (see the messages above)"
else
    SKIPPED+=("data (--no-data): run .venv/bin/ctk data fetch default")
    echo "skipped (--no-data)"
fi

trap - ERR
STEP="done"
printf '\n==> ctk is set up in %ds: activate with  source .venv/bin/activate\n' $((SECONDS - START))
if [[ ${#SKIPPED[@]} -gt 0 ]]; then
    echo "Skipped:"
    printf '  - %s\n' "${SKIPPED[@]}"
fi
