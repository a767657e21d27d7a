"""Helpers the tests and the benchmarks share: generated ONNX models, walkers, the browser.

Not installed with framebus (like `bench/`): imported from the repository root.
"""
