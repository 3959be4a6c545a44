"""Cut placement when candidates cost the same: the latest is taken."""

from edgeopt.converters.early_exit.cuts import nearest


def test_of_equally_costly_cuts_the_latest_is_taken():
    # a jax2tf export: [N, positions, channels] sliced, then transposed to [N, channels, positions] for a Conv;
    # the prefix up to either costs the same, and only the later one pools positions, not channels
    timed = ["embed", "sliced_channels_last", "transposed_channels_first", "conv"]
    times = {"full": 10.0, "embed": 0.4, "sliced_channels_last": 0.5, "transposed_channels_first": 0.5,
             "conv": 9.5}
    assert nearest(timed, times, [0.25, 0.9]) == ["transposed_channels_first", "conv"]


def test_the_nearest_share_wins_where_costs_differ():
    timed = ["a", "b", "c"]
    times = {"full": 4.0, "a": 1.0, "b": 2.0, "c": 3.0}
    assert nearest(timed, times, [0.25, 0.5, 0.75]) == ["a", "b", "c"]
    assert nearest(timed, times, [0.3, 0.35]) == ["a"]  # each once
