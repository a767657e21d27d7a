"""The engine's candidate selection: appended to the graph as each provider chain is tried.

`open_session` calls the tail once per provider chain it tries (whether a GPU provider may run the
graph decides what `auto` means); the selection of the chain that opened is the one in effect.
"""

from __future__ import annotations

import logging

import onnx

from framebus_inferencer.candidates import Selection, append_candidate_selection, resolved
from framebus_inferencer.providers import EngineOptions
from framebus_inferencer.settings import CandidateSelection, HeadFormat

NO_GPU = (
    "FRAMEBUS_CANDIDATE_SELECTION is auto and no GPU provider runs the graph (on the CPU "
    "provider the graph's selection costs more than the host's)"
)


class CandidateTail:
    """Appends candidate selection to a model's head; remembers the last one it made."""

    def __init__(self, options: EngineOptions, head: HeadFormat) -> None:
        self.options, self.head = options, head
        self.how = CandidateSelection.HOST
        self.selection: Selection | None = None

    def __call__(self, model: onnx.ModelProto, gpu: bool) -> onnx.ModelProto:
        """`model` with its selection appended (or as it is), for a chain with or without a GPU."""
        opts = self.options
        self.how = resolved(opts.candidate_selection, gpu)
        self.selection = append_candidate_selection(
            model,
            self.head,
            self.how,
            opts.confidence_threshold,
            opts.max_candidates,
            opts.iou_threshold,
            opts.image_size,
        )
        return self.selection.model

    def say_where(self, log: logging.Logger) -> bool:
        """Log once, to the engine's `log`, why a raw head's candidates stay on the host.

        True when that is a fallback (the graph was to select them and cannot take the head).
        """
        selection, head = self.selection, self.head
        if selection is None or selection.rows is not None:
            return False
        if head not in (HeadFormat.YOLOV5, HeadFormat.YOLOV8):
            return False
        asked = self.options.candidate_selection
        if self.how is CandidateSelection.HOST:  # asked for, or auto without a GPU: no fallback
            why = selection.reason if asked is self.how else NO_GPU
            log.info("candidates of the %s head are selected on the host: %s", head.value, why)
            return False
        log.warning(
            "candidates of the %s head are selected on the host, not in the graph as "
            "FRAMEBUS_CANDIDATE_SELECTION=%s asks (the whole head is copied back each batch): %s",
            head.value,
            asked.value,
            selection.reason,
        )
        return True
