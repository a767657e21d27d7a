#!/usr/bin/env bash
# Check that the TensorRT and CUDA providers really run the model on a GPU machine, then run
# `framebus tune` with each and print the tables (capacity and latency per batch size, for each
# provider chain). Goal: none fixed; it gives the GPU figures the CPU-only benchmarks cannot
# (docs/benchmarks.md).
#
#   bench/gpu_check.sh [MODEL.onnx]
#
# Needs: this project installed with onnxruntime-gpu instead of onnxruntime (pip install
# onnxruntime-gpu; add tensorrt-cu12-libs for the TensorRT provider) and an NVIDIA GPU. Without a
# model it generates the YOLOv8n-sized test model (random weights, 640x640; nothing downloaded).
# tensorrt-cu12-libs puts TensorRT's libraries in site-packages/tensorrt_libs, where the loader
# does not look: this script puts that directory on LD_LIBRARY_PATH (the image sets it too).
# Before measuring a chain, `python -m framebus_inferencer.providercheck` loads and runs the
# model and fails unless the chain's first provider is the session's first, loaded as asked, and
# ran the graph (get_available_providers() only lists what the wheel was built with); a chain
# that fails is not measured and the script exits 1.
# Sized to finish in under 5 minutes: batches 1..32, 3 s each, per provider; the first TensorRT
# run builds engines into $OUT_DIR/trt-cache (default gpu-check-output/; reused by the next run).
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'  # this header
  exit 0
fi
PY="${PYTHON:-python3}"
# testkit/ (the generated test model) is imported from the repository root.
export PYTHONPATH="$(cd "$(dirname "$0")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"
out="${OUT_DIR:-gpu-check-output}"
mkdir -p "$out"
model="${1:-$out/yolov8n-like-640.onnx}"
if [ ! -f "$model" ]; then
  "$PY" -c "import onnx, sys; from testkit.models import yolov8n_like_model; onnx.save(yolov8n_like_model(640), sys.argv[1])" "$model"
fi
trt_libs="$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/tensorrt_libs"
if [ -d "$trt_libs" ]; then
  export LD_LIBRARY_PATH="$trt_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
"$PY" -c "import onnxruntime as ort; print('onnxruntime', ort.__version__, 'built with', ort.get_available_providers())"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
status=0
for providers in tensorrt,cuda,cpu cuda,cpu; do
  echo "== providers: $providers"
  if ! "$PY" -m framebus_inferencer.providercheck --libraries "${providers%,cpu}" \
      --model "$model" --providers "$providers" --trt-cache-dir "$out/trt-cache"; then
    echo "== $providers: the first provider does not run the model; not measured" >&2
    status=1
    continue
  fi
  "$PY" -m framebus_tools.cli tune --model-path "$model" --providers "$providers" \
    --max-batch-limit 32 --seconds-per-batch 3 --latency-budget-ms 80 --memory-budget-mb 20000 \
    --cameras 16 --fps 25 --compare-layouts false --trt-cache-dir "$out/trt-cache" \
    --output-dir "$out/${providers%%,*}" || true  # exit 1 means "target does not fit": still print
done
exit "$status"
