import pytest

from framebus.errors import ConfigError
from framebus_decoder.cameras import Camera, diff_cameras, parse_cameras
from framebus_decoder.settings import DecoderSettings, RtspTransport

DEFAULTS = DecoderSettings(target_fps=4.0)


def test_parse_cameras_when_options_given_then_per_camera_values_override_defaults() -> None:
    doc = {
        "cameras": [
            {"id": "a", "url": "rtsp://h/a", "rtsp_transport": "udp", "options": {"x": 1}},
            {
                "id": "b",
                "url": "clip.mp4",
                "target_fps": 2,
                "loop": True,
                "realtime": True,
                "sample_phase": 0.25,
            },
        ]
    }
    a, b = parse_cameras(doc, DEFAULTS)
    assert (a.sample_phase, b.sample_phase) == (None, 0.25)
    assert (a.target_fps, a.rtsp_transport, a.options, a.is_file) == (
        4.0,
        RtspTransport.UDP,
        (("x", "1"),),
        False,
    )
    assert (b.target_fps, b.loop, b.realtime, b.is_file) == (2.0, True, True, True)


@pytest.mark.parametrize(
    ("doc", "match"),
    [
        ({"cameras": [{"id": "a"}]}, "needs `id` and `url`"),
        ({"cameras": [{"id": "a", "url": "u", "fps": 3}]}, "unknown keys"),
        ({"cameras": [{"id": "a", "url": "u"}, {"id": "a", "url": "v"}]}, "unique"),
        ({"cameras": [{"id": "a", "url": "u", "rtsp_transport": "sctp"}]}, "sctp"),
        ({"cameras": [{"id": "a", "url": "u", "sample_phase": 1}]}, r"sample_phase .* \[0, 1\)"),
        ({"cameras": [{"id": "a", "url": "u", "sample_phase": "x"}]}, "sample_phase"),
    ],
)
def test_parse_cameras_when_entry_invalid_then_config_error_says_why(
    doc: object, match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_cameras(doc, DEFAULTS)


def test_parse_cameras_when_file_empty_then_no_cameras() -> None:
    assert parse_cameras(None, DEFAULTS) == []


def test_diff_cameras_when_list_changes_then_added_removed_changed_by_id() -> None:
    a, b, c = Camera("a", "u1", 5), Camera("b", "u2", 5), Camera("c", "u3", 5)
    changes = diff_cameras({"a": a, "b": b}, [a, Camera("b", "u2-new", 5), c])
    assert changes.added == (c,)
    assert changes.removed == ()
    assert [x.url for x in changes.changed] == ["u2-new"]
    assert diff_cameras({"a": a, "b": b}, [a]).removed == ("b",)
    assert not diff_cameras({"a": a}, [a])
