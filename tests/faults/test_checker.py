"""The history checker itself: it must see an overlap, a fence that does
not grow and a late loss report, on made-up histories and on a real one
where an administrator's force_release lets a second owner in while the
first still holds (the one way to overlap that the contract allows)."""
from faultlib import History


def made_up(*grants):
    h = History("k")
    for who, fence, start, deadline, released, lost in grants:
        h.event(who, "acquired", {"fence": fence, "t": start, "deadline": deadline})
        if released is not None:
            h.event(who, "release_sent", {"fence": fence, "t": released})
        if lost is not None:
            h.event(who, "lost", {"fence": fence, "t": lost})
    return h.check(count=False)


def test_sound_history_passes():
    assert made_up(("A", 1, 0.0, 1.0, 0.5, None), ("B", 2, 0.5, 1.5, None, 1.5),
                   ("A", 3, 1.5, 2.5, 2.0, None)) == []


def test_overlap_is_found():
    bad = made_up(("A", 1, 0.0, 1.0, None, 1.0), ("B", 2, 0.999, 2.0, 1.5, None))
    assert len(bad) == 1 and "double grant" in bad[0] and "1.0 ms" in bad[0], bad


def test_overlap_with_an_earlier_long_grant_is_found():
    # C overlaps A, not B: the checker compares with the latest end so far.
    bad = made_up(("A", 1, 0.0, 5.0, None, 5.0), ("B", 2, 0.1, 0.2, None, None),
                  ("C", 3, 1.0, 2.0, 1.5, None))
    assert len(bad) == 2 and all("double grant" in b for b in bad), bad


def test_fence_order_is_checked():
    bad = made_up(("A", 5, 0.0, 1.0, 0.5, None), ("B", 4, 0.6, 1.6, 1.0, None))
    assert len(bad) == 1 and "fence did not grow" in bad[0], bad


def test_late_loss_report_is_found():
    bad = made_up(("A", 1, 0.0, 1.0, None, 1.5))
    assert len(bad) == 1 and "after the local deadline" in bad[0], bad


def test_release_ends_the_grant():
    assert made_up(("A", 1, 0.0, 10.0, 0.5, None), ("B", 2, 0.5, 1.5, 1.0, None)) == []


def test_real_overlap_is_found(tmp_path):
    """B force-releases the key A holds and takes it: the recorded history
    of two real processes shows B's grant inside A's lease."""
    from faultlib import Holder

    h = History("faults/checker")
    uri = f"sqlite://{tmp_path}/locks.db"
    a, b = Holder("A", uri, h), Holder("B", uri, h)
    try:
        assert a.call("acquire", key=h.key, ttl=5, timeout=1)["ok"]
        assert b.call("force_release", key=h.key)["ok"]
        assert b.call("acquire", key=h.key, ttl=5, timeout=1)["ok"]
        bad = h.check(count=False)
        assert any("double grant" in x for x in bad), bad
    finally:
        a.close()
        b.close()
