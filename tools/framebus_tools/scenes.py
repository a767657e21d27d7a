"""The generated scenes the tests, the demo and the benchmarks play (`framebus_tools.scene`).

`default_scene`: people crossing a counting line, one dwelling in a zone, a car. `demo_scene`: the
same with a still end. `still_scene`: mostly still, for motion gating.
"""

from __future__ import annotations

from dataclasses import replace

from framebus_tools.scene import (
    BLUE,
    CAR_SIZE,
    GREEN,
    LIT_LEVEL,
    MAGENTA,
    PERSON_SIZE,
    RED,
    YELLOW,
    Actor,
    Scene,
)


def default_scene() -> Scene:
    """Five actors: two persons crossing each other and the line, a dweller, a car, a late walker.

    See `scene_rules_document` for the rules that go with it; the module docstring of the tests
    lists the ground truth.
    """
    person, car = PERSON_SIZE, CAR_SIZE
    actors = (
        # Walk right across the middle at ~198 px/s (1.4 box widths per 0.5 s): crosses the line OUT.
        Actor("red-walker", "person", RED, person, ((0.5, 10, 260), (6.5, 1200, 260))),
        # Walks left 70 px lower, drawn in front: the two overlap partly around t = 3.8 s; IN.
        Actor("blue-walker", "person", BLUE, person, ((1.0, 1200, 330), (7.0, 10, 330))),
        # Walks into the zone, stands still for 4 s, walks back out the way it came.
        Actor(
            "green-dweller",
            "person",
            GREEN,
            person,
            ((0.0, 0, 40), (2.0, 400, 40), (6.0, 400, 40), (8.0, 0, 40)),
        ),
        # Drives right along the bottom at 320 px/s (2 car lengths per second): crosses OUT.
        Actor("yellow-car", "car", YELLOW, car, ((8.0, 0, 600), (11.5, 1120, 600))),
        # Appears mid-frame, walks left over the line (IN), stands, and vanishes.
        Actor(
            "magenta-walker",
            "person",
            MAGENTA,
            person,
            ((10.0, 1000, 420), (12.5, 500, 420), (13.5, 500, 420)),
        ),
    )
    return Scene(
        actors=actors,
        line=((800.0, 0.0), (800.0, 720.0)),
        zone=((345.0, 120.0), (700.0, 120.0), (700.0, 280.0), (345.0, 280.0)),
        occupancy_zone=((400.0, 380.0), (1000.0, 380.0), (1000.0, 540.0), (400.0, 540.0)),
    )


def demo_scene() -> Scene:
    """`default_scene` with a still end: the last walker stays standing mid-frame until 24 s.

    The demo's cameras gate frames on motion; this stretch is where the gate saves model runs
    while the live page keeps showing the standing person (carried, not seen again).
    """
    scene = default_scene()
    *movers, last = scene.actors
    stays = Actor(
        last.name, last.cls, last.colour, last.size, (*last.keyframes[:-1], (24.0, 500, 420))
    )
    return replace(scene, actors=(*movers, stays), duration_s=24.0)


def still_scene() -> Scene:
    """A mostly still scene, for motion gating: long holds, an empty spell and a light switched on.

    A person walks into the dwell zone and stands in it for 24 s (the light comes on meanwhile),
    then walks out; the frame stays empty for 6 s; a person walks right over the line and out at
    the right edge, and one second later another enters at that edge 192 px higher, walking left
    over the line (the departure of one object and the arrival of another near the same place).
    Something moves in 10 of its 46 s.
    """
    person = PERSON_SIZE
    actors = (
        Actor(
            "green-dweller",
            "person",
            GREEN,
            person,
            ((0.0, 0, 40), (2.0, 400, 40), (26.0, 400, 40), (28.0, 0, 40)),
        ),
        # Out of the right edge at 200 px/s: last seen whole at x 1130..1200 (it leaves there).
        Actor("red-leaver", "person", RED, person, ((34.0, 600, 500), (37.0, 1200, 500))),
        # In at the right edge 192 px higher a second after, walking left at 200 px/s.
        Actor("blue-arriver", "person", BLUE, person, ((38.0, 1200, 308), (41.0, 600, 308))),
    )
    # The default scene's line and zones, so the same rules file judges both.
    return replace(default_scene(), actors=actors, duration_s=46.0, lighting=((14.0, LIT_LEVEL),))
