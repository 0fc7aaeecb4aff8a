"""DAPO's dynamic sampling refills the batch: a batch holds batch_groups trainable groups, never fewer
unless flushed, and a stream with nothing to learn yields no batch at all."""
import pytest
from scored import group

from m1flow.rl.config import AlgorithmConfig
from m1flow.rl.filling import BatchFiller, fill_batches
from m1flow.rl.selection import Selected, Skipped

CFG = AlgorithmConfig()


def _stream():
    return [group("t1", [1.0, 0.0]), group("d1", [1.0, 1.0]), group("d2", [0.0, 0.0]),
            group("t2", [0.0, 1.0]), group("t3", [1.0, 0.0, 0.0]), group("d3", [0.5, 0.5]), group("t4", [1.0, 0.0])]


def test_a_batch_waits_for_batch_groups_trainable_groups():
    filler = BatchFiller(CFG, batch_groups=2)
    outcomes = []
    for g in _stream()[:4]:
        outcomes.append(filler.offer(g, current_version=0))
        assert not filler.full or g.group_id == "t2"
    assert [type(o) for o in outcomes] == [Selected, Skipped, Skipped, Selected]
    assert filler.full and [s.group_id for s in filler.take()] == ["t1", "t2"]
    assert not filler.pending


def test_fill_batches_skips_degenerate_groups_and_flushes_the_rest():
    batches = [[s.group_id for s in b] for b in fill_batches(_stream(), CFG, batch_groups=2)]
    assert batches == [["t1", "t2"], ["t3", "t4"]]
    batches = [[s.group_id for s in b] for b in fill_batches(_stream(), CFG, batch_groups=3)]
    assert batches == [["t1", "t2", "t3"], ["t4"]]
    assert [len(b) for b in fill_batches(_stream(), CFG, batch_groups=3, flush=False)] == [3]


def test_an_all_degenerate_stream_yields_no_batch():
    flat = [group(f"d{i}", [float(i % 2)] * 4) for i in range(10)]
    assert list(fill_batches(flat, CFG, batch_groups=1)) == []


def test_staleness_is_measured_against_the_version_each_batch_trains_at():
    # every group was sampled at version 0; with max_staleness 1 the third batch (version 2) has none left
    groups = [group(f"g{i}", [1.0, 0.0]) for i in range(6)]
    cfg = AlgorithmConfig(max_staleness=1)
    assert [[s.group_id for s in b] for b in fill_batches(groups, cfg, batch_groups=2)] == [["g0", "g1"], ["g2", "g3"]]


def test_a_cut_short_group_is_refused_and_leaves_the_batch_as_it_was():
    filler = BatchFiller(CFG, batch_groups=2)
    filler.offer(group("ok", [1.0, 0.0]), 0)
    with pytest.raises(ValueError, match="not marked incomplete"):
        filler.offer(group("cut", [1.0, 0.0], group_size=4), 0)
    assert [s.group_id for s in filler.pending] == ["ok"] and not filler.holds("cut")
