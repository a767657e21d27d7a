from __future__ import annotations

from framebus_live.inbox import Inbox
from framebus_live.pacer import TilePacer, tile_interval_s
from framebus_live.slots import LatestSlots
from tests.unit.framebus_live.test_geometry import _frame


def test_slots_when_newer_item_while_unsent_then_replaced_and_counted_dropped() -> None:
    slots: LatestSlots[str, int] = LatestSlots()
    assert not slots.put("cam-a", 1)
    assert not slots.put("cam-b", 1)
    assert slots.put("cam-a", 2)  # cam-a's first tile was never sent: dropped
    assert slots.take() == ("cam-a", 2)  # keeps its place in line, with the newest item
    assert slots.take() == ("cam-b", 1)
    assert slots.take() is None


def test_slots_when_many_puts_then_bounded_by_keys() -> None:
    slots: LatestSlots[str, int] = LatestSlots()
    replaced = sum(slots.put(f"cam-{i % 4}", i) for i in range(1000))
    assert len(slots) == 4
    assert replaced == 996


def test_slots_when_page_changes_then_other_cameras_forgotten() -> None:
    slots: LatestSlots[str, int] = LatestSlots()
    slots.put("cam-a", 1)
    slots.put("cam-b", 1)
    slots.discard({"cam-b"})
    assert slots.take() == ("cam-b", 1)
    assert slots.take() is None


def test_tile_interval_when_many_cameras_then_rate_lowered_to_budget() -> None:
    assert tile_interval_s(5.0, 80.0, 4) == 0.2  # tile_fps rules
    assert tile_interval_s(5.0, 80.0, 64) == 1 / 1.25  # 80 tiles/s over 64 cameras
    assert tile_interval_s(5.0, 80.0, 0) == 0.2


def test_pacer_when_asked_early_then_not_due_and_cadence_kept() -> None:
    pacer = TilePacer()
    assert pacer.due("cam", 0.0, 0.2)
    assert not pacer.due("cam", 0.1, 0.2)
    assert pacer.due("cam", 0.21, 0.2)
    assert pacer.due("cam", 0.40, 0.2)  # due at 0.4: the late tick at 0.21 shifted nothing


def test_inbox_when_frames_arrive_faster_than_drained_then_latest_per_camera_and_one_wake() -> None:
    wakes: list[int] = []
    inbox: Inbox[str] = Inbox(lambda: wakes.append(1), max_items=2)
    inbox.put_frame(_frame(1280, 720, 64))
    inbox.put_frame(_frame(1280, 720, 64))
    for item in ("a", "b", "c"):
        inbox.put(item)
    frames, items = inbox.drain()
    assert ([n for _, n in frames], items, len(wakes)) == ([2], ["a", "b"], 1)
    assert (inbox.frames_replaced, inbox.items_dropped) == (1, 1)
    inbox.put("d")
    assert len(wakes) == 2  # woken again after a drain
