"""The suite's own order under pytest-xdist's worksteal (tests/conftest.py): N equal blocks, each
opening with its share of the slow tests, every test once."""
from types import SimpleNamespace

from tests.conftest import pytest_collection_modifyitems


class Item(SimpleNamespace):
    def get_closest_marker(self, name):
        return name if name == "slow" and self.slow else None


def _order(items, workers, dist="worksteal", monkeypatch=None):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(workers))
    config = SimpleNamespace(getoption=lambda name, default=None: dist)
    items = list(items)
    pytest_collection_modifyitems(config, items)
    return [i.name for i in items]


def test_each_worker_s_block_opens_with_its_share_of_the_slow_tests(monkeypatch):
    items = [Item(name=f"q{i}", slow=False) for i in range(9)] + [Item(name=f"s{i}", slow=True) for i in range(3)]
    order = _order(items, 2, monkeypatch=monkeypatch)
    assert sorted(order) == sorted(i.name for i in items)  # every test once
    first, second = order[:6], order[6:]  # worksteal sends 12 // 2 to the first worker, the rest to the other
    assert first[:2] == ["s0", "s2"] and second[:1] == ["s1"]
    assert all(n.startswith("q") for n in first[2:] + second[1:])
    order3 = _order(items, 3, monkeypatch=monkeypatch)
    assert [order3[0], order3[4], order3[8]] == ["s0", "s1", "s2"]


def test_one_process_or_another_scheduler_keeps_the_collection_order(monkeypatch):
    items = [Item(name="q0", slow=False), Item(name="s0", slow=True), Item(name="q1", slow=False)]
    assert _order(items, 1, monkeypatch=monkeypatch) == ["q0", "s0", "q1"]
    assert _order(items, 2, dist="load", monkeypatch=monkeypatch) == ["q0", "s0", "q1"]
