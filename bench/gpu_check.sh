#!/usr/bin/env bash
# Run `framebus tune` with the TensorRT and CUDA providers on a GPU machine and print the tables
# (capacity and latency per batch size, for each provider chain). Goal: none fixed; it gives the
# GPU figures the CPU-only benchmarks cannot (docs/benchmarks.md).
#
#   bench/gpu_check.sh [MODEL.onnx]
#
# Needs: this project installed with onnxruntime-gpu instead of onnxruntime (pip install
# onnxruntime-gpu; add tensorrt-cu12-libs for the TensorRT provider) and an NVIDIA GPU. Without a
# model it generates the YOLOv8n-sized test model (random weights, 640x640; nothing downloaded).
# Sized to finish in under 5 minutes: batches 1..32, 3 s each, per provider; the first TensorRT
# run builds engines into $OUT_DIR/trt-cache (default gpu-check-output/; reused by the next run).
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'  # this header
  exit 0
fi
PY="${PYTHON:-python3}"
out="${OUT_DIR:-gpu-check-output}"
mkdir -p "$out"
model="${1:-$out/yolov8n-like-640.onnx}"
if [ ! -f "$model" ]; then
  "$PY" -c "import onnx, sys; from framebus_tools.testmodels import yolov8n_like_model; onnx.save(yolov8n_like_model(640), sys.argv[1])" "$model"
fi
"$PY" -c "import onnxruntime as ort; print('onnxruntime', ort.__version__, ort.get_available_providers())"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
for providers in tensorrt,cuda,cpu cuda,cpu; do
  echo "== providers: $providers"
  "$PY" -m framebus_tools.cli tune --model-path "$model" --providers "$providers" \
    --max-batch-limit 32 --seconds-per-batch 3 --latency-budget-ms 80 --memory-budget-mb 20000 \
    --cameras 16 --fps 25 --compare-layouts false --trt-cache-dir "$out/trt-cache" \
    --output-dir "$out/${providers%%,*}" || true  # exit 1 means "target does not fit": still print
done
