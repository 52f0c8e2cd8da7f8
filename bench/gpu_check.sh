#!/usr/bin/env bash
# The GPU check of the CUDA backend, in one run on a fresh GPU machine (an H200 with CUDA 13:
# its image has a CUDA toolkit, Python 3.12, NumPy, Cython, pytest, hypothesis, CuPy and
# PyTorch, and no network).  Under 8 minutes:
#
#   1. install the project with [cuda,test] (offline: what the machine has, plus any wheels
#      carried in .whl/; the [cuda] wheels are optional where a toolkit is installed);
#   2. the overhead and bandwidth benchmark (bench/gpu_bench.py) - first, so its numbers
#      come back even if a later step runs out of time;
#   3. the GPU tests (tests/cuda) and the offline CUDA tests;
#   4. the jit and conformance suites with --backend cuda (pytest-xdist where installed).
#
#   bash bench/gpu_check.sh            # logs also go to $OUT (or /tmp/fastlaunch-gpu-check)
#
# Each step has its own time limit; the script goes on after a failed step and exits non-zero
# at the end if any failed.  GPU_CHECK_DRY_RUN=1 runs the script's plumbing without a GPU (the
# devsim backend, a small suite) and GPU_CHECK_NO_INSTALL=1 skips the install.
set -u -o pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOGS=${OUT:-/tmp/fastlaunch-gpu-check}
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1
export FASTLAUNCH_CACHE_DIR=${FASTLAUNCH_CACHE_DIR:-/tmp/fastlaunch-gpu-check-cache}
T0=$(date +%s)
FAILED=()
BACKEND=cuda
SUITES=(tests/jit tests/conformance)
if [ -n "${GPU_CHECK_DRY_RUN:-}" ]; then
    BACKEND=devsim
    SUITES=(tests/jit/test_step.py)
fi

step() { echo; echo "=== $1 (at $(( $(date +%s) - T0 )) s) ==="; }
run() {  # run NAME SECONDS COMMAND...: a step with a time limit, its output also in $LOGS/NAME.log
    local name=$1 limit=$2
    shift 2
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$LOGS/$name.log"
    local rc=${PIPESTATUS[0]}
    if [ "$rc" -ne 0 ]; then
        FAILED+=("$name (exit $rc$([ "$rc" -eq 124 ] && echo ': time limit'))")
    fi
    return 0
}

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
"$PY" --version
(ptxas --version 2>/dev/null || /usr/local/cuda/bin/ptxas --version 2>/dev/null) | tail -1 || true
nproc

step "install"
if [ -n "${GPU_CHECK_NO_INSTALL:-}" ]; then
    echo "GPU_CHECK_NO_INSTALL is set: using the fastlaunch on PYTHONPATH as it is"
elif [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile .whl/*.whl
fi
# with the extras where the machine can resolve them, else the project alone over what is
# installed (numpy, llvmlite, cython, pytest, hypothesis; a CUDA toolkit for cuda.h, ptxas and
# libdevice)
if [ -z "${GPU_CHECK_NO_INSTALL:-}" ] && \
        ! "$PY" -m pip install -q --no-build-isolation -e '.[cuda,test]' >"$LOGS/install.log" 2>&1; then
    echo "pip install -e '.[cuda,test]' could not resolve every extra offline (see install.log);"
    echo "installing the project alone over what the machine has"
    "$PY" -m pip install -q --no-build-isolation --no-deps -e . >>"$LOGS/install.log" 2>&1 \
        || { tail -30 "$LOGS/install.log"; echo "install failed"; exit 1; }
fi
"$PY" - <<'EOF' || [ -n "${GPU_CHECK_DRY_RUN:-}" ] || { echo "no usable GPU: stopping"; exit 1; }
import llvmlite, numpy, fastlaunch
from fastlaunch import _cuda
from fastlaunch.backends.cuda import find_libdevice, find_ptxas, ptxas_version
print("fastlaunch", fastlaunch.__version__, "numpy", numpy.__version__, "llvmlite",
      llvmlite.__version__)
print("libdevice:", find_libdevice(), "| ptxas:", find_ptxas(), ptxas_version(find_ptxas()))
_cuda.require_driver()
print("device:", _cuda.device_info())
EOF

step "benchmark (bench/gpu_bench.py)"
run bench 150 "$PY" bench/gpu_bench.py --backend "$BACKEND"

step "GPU tests (tests/cuda) and offline CUDA tests"
run gpu-tests 120 "$PY" -m pytest -q -p no:cacheprovider -rs tests/cuda tests/unit/test_cuda_offline.py \
    tests/jit/test_device_arrays.py

step "jit and conformance suites on backend=$BACKEND"
XDIST=()
if "$PY" -c "import xdist" 2>/dev/null; then
    N=$(nproc)
    XDIST=(-n "$(( N > 8 ? 8 : N ))")
fi
LEFT=$(( 470 - ($(date +%s) - T0) ))
if [ "$LEFT" -gt 30 ]; then
    run suites "$LEFT" "$PY" -m pytest -q -p no:cacheprovider --backend "$BACKEND" "${XDIST[@]}" \
        "${SUITES[@]}"
else
    FAILED+=("suites (no time left)")
fi

step "done in $(( $(date +%s) - T0 )) s"
if [ ${#FAILED[@]} -gt 0 ]; then
    printf 'FAILED: %s\n' "${FAILED[@]}"
    exit 1
fi
echo "all steps passed"
