"""The planner's pipeline split against vLLM's own: the cases of vLLM's tests/distributed/test_pipeline_partition.py
(test_uneven_auto_partition, as (layers, pp size, rank) -> [start, end) of get_pp_indices), turned into layers per
stage. tests/lab/test_ray_cluster.py asks the installed vLLM for more cases."""

from __future__ import annotations

import pytest

from roles.planner.vllm import pp_partition

#: (num_hidden_layers, pp_size, pp_rank, (start, end)) verbatim from vLLM's test
VLLM_CASES = [(2, 2, 0, (0, 1)), (2, 2, 1, (1, 2)), (3, 2, 0, (0, 2)), (3, 2, 1, (2, 3)),
              (3, 3, 0, (0, 1)), (3, 3, 1, (1, 2)), (3, 3, 2, (2, 3)),
              (4, 3, 0, (0, 1)), (4, 3, 1, (1, 3)), (4, 3, 2, (3, 4)),
              (5, 3, 0, (0, 2)), (5, 3, 1, (2, 4)), (5, 3, 2, (4, 5))]


@pytest.mark.parametrize("layers, pp, rank, indices", VLLM_CASES)
def test_stage_layers_are_vllms(layers, pp, rank, indices):
    parts = pp_partition(layers, pp)
    assert (sum(parts[:rank]), sum(parts[:rank + 1])) == indices


def test_one_stage_holds_every_layer_and_a_bad_size_is_refused():
    assert pp_partition(80, 1) == [80]
    with pytest.raises(ValueError, match="at least 1"):
        pp_partition(80, 0)
