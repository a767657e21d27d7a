import pytest

from framebus.errors import ConfigError
from framebus_decoder.cameras import Camera, diff_cameras, parse_cameras
from framebus_decoder.motion import MotionConfig
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


def test_parse_cameras_when_motion_given_then_per_camera_values_over_global_defaults() -> None:
    defaults = DecoderSettings(motion_enabled=True, motion_threshold=30, motion_still_refresh_s=5)
    mask = [[[0, 0], [100, 0], [100, 50.5]]]
    doc = [
        {"id": "a", "url": "u", "motion": {"min_area": 0.01, "mask": mask}},
        {"id": "b", "url": "u", "motion": {"enabled": False}},
        {"id": "c", "url": "u"},
    ]
    a, b, c = parse_cameras(doc, defaults)
    assert a.motion == MotionConfig(
        threshold=30,
        min_area=0.01,
        still_refresh_s=5,
        mask=(((0.0, 0.0), (100.0, 0.0), (100.0, 50.5)),),
    )
    assert b.motion is None
    assert c.motion == MotionConfig(threshold=30, still_refresh_s=5)


def test_parse_cameras_when_motion_not_enabled_anywhere_then_no_gate() -> None:
    (cam,) = parse_cameras([{"id": "a", "url": "u", "motion": {"threshold": 9}}], DEFAULTS)
    assert cam.motion is None
    (on,) = parse_cameras([{"id": "a", "url": "u", "motion": {"enabled": True}}], DEFAULTS)
    assert on.motion == MotionConfig()


@pytest.mark.parametrize(
    ("motion", "match"),
    [
        ("yes", "motion of a must be a mapping"),
        ({"sensitivity": 3}, r"unknown keys \['sensitivity'\]"),
        ({"enabled": "yes"}, "enabled must be true or false"),
        ({"threshold": "high"}, "threshold must be a number"),
        ({"threshold": 300}, "threshold must be between 0 and 255"),
        ({"min_area": 0}, r"min_area must be in \(0, 1\]"),
        ({"still_refresh_s": 0}, "still_refresh_s must be > 0"),
        ({"lighting_fraction": 0.001}, "lighting_fraction must be above min_area"),
        ({"mask": {"x": 1}}, "mask must be a list of polygons"),
        ({"mask": [[[0, 0], [1, 1]]]}, "mask polygon 0 must have at least 3 points"),
        ({"mask": [[[0, 0], [1, 1], [2]]]}, r"mask polygon 0: a point must be \[x, y\]"),
        ({"mask": [[[0, 0], [1, 1], [-2, 3]]]}, "two numbers >= 0"),
    ],
)
def test_parse_cameras_when_motion_invalid_then_config_error_says_why(
    motion: object, match: str
) -> None:
    raw = {"enabled": True, **motion} if isinstance(motion, dict) else motion
    doc = [{"id": "a", "url": "u", "motion": raw}]
    with pytest.raises(ConfigError, match=match):
        parse_cameras(doc, DEFAULTS)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("motion_threshold", 0),
        ("motion_min_area", 1.5),
        ("motion_still_refresh_s", -1),
        ("motion_lighting_fraction", 0.001),
    ],
)
def test_decoder_settings_when_motion_default_out_of_range_then_config_error(
    field: str, value: float
) -> None:
    with pytest.raises(ConfigError, match=f"FRAMEBUS_{field.upper()}"):
        DecoderSettings(**{field: value})  # type: ignore[arg-type]


def test_parse_cameras_when_video_given_then_per_camera_over_the_global_default() -> None:
    doc = [{"id": "a", "url": "u", "video": False}, {"id": "b", "url": "u"}]
    a, b = parse_cameras(doc, DecoderSettings(video_enabled=True))
    assert (a.video, b.video) == (False, True)
    (c,) = parse_cameras([{"id": "c", "url": "u", "video": True}], DEFAULTS)
    assert c.video


def test_parse_cameras_when_video_not_a_boolean_then_clear_error() -> None:
    with pytest.raises(ConfigError, match="video of a must be true or false"):
        parse_cameras([{"id": "a", "url": "u", "video": "yes"}], DEFAULTS)
