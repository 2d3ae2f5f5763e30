"""Node types: a Fleet's pools with price, minCount and maxCount; one type per zone; Fleets written back."""

from __future__ import annotations

import pytest

from kdra.errors import InputError
from kdra.fleets import load_fleet
from kdra.fleets.spec import fleet_to_dict, parse_fleet

from .helpers import GATES, H100, fleet, types_of


def test_price_and_counts_parse_and_bad_values_name_the_field() -> None:
    f = fleet([{**H100, "price": "12.5", "minCount": 1, "maxCount": 4}])
    assert (f.pools[0].price, f.pools[0].min_count, f.pools[0].max_count) == (12.5, 1, 4)
    with pytest.raises(InputError, match=r"spec.pools\[0\].price: Invalid value: 'free'"):
        fleet([{**H100, "price": "free"}])
    with pytest.raises(InputError, match=r"spec.pools\[0\].maxCount: Invalid value: 1: must be greater than"):
        fleet([{**H100, "minCount": 2, "maxCount": 1}])


def test_a_pool_in_two_zones_is_two_types_sharing_its_limit() -> None:
    types = types_of([{**H100, "topology": {"zones": ["a", "b"]}, "maxCount": 3}], existing={"h100": 1})
    assert [(t.name, t.zone, t.max_new) for t in types] == [("h100-a", "a", 2), ("h100-b", "b", 2)]
    assert types[0].labels["topology.kubernetes.io/zone"] == "a"


@pytest.mark.parametrize("name", ["mixed", "node-types", "uniform-500"])
def test_a_fleet_written_back_parses_to_the_same_pools(name: str) -> None:
    f = load_fleet(name)
    assert parse_fleet(fleet_to_dict(f)).pools == f.pools


def test_the_bundled_node_types_render_every_catalog_shape() -> None:
    from kdra.plan.nodetypes import node_types

    types = node_types(load_fleet("node-types"), GATES)
    assert len(types) == 10 and all(t.price > 0 for t in types)
    assert all(t.slices for t in types if t.accelerators)
