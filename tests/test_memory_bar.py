"""The plan's memory bar (deployments/memory_bar.html): a segment names itself only where its words fit, and the
legend gives every part's size (a small model's weights segment read "we", cut by its width)."""

import re

from django.template.loader import render_to_string

GIB = 2**30


def bar(weights: float, kv: float) -> str:
    split = {"total": 80 * GIB, "weights": weights * GIB, "activation": GIB, "non_torch": GIB, "kv_cache": kv * GIB}
    return render_to_string("deployments/memory_bar.html", {"split": split | {"headroom": GIB, "used_by_others": 0}})


def test_a_narrow_segment_is_left_blank_and_the_legend_sizes_every_part() -> None:
    html = bar(weights=1.5, kv=70.0)
    weights = re.search(r'<span class="weights" data-width="(\d+)" title="weights 1.5 GiB">([^<]*)</span>', html)
    assert weights is not None and weights.groups() == ("2", "")  # 2 % of the bar: its words would be cut
    assert '<span class="kv" data-width="88" title="KV cache 70.0 GiB">KV cache 70.0 GiB</span>' in html
    legend = " ".join(re.sub(r"<[^>]+>", "", html.split('class="legend"')[1]).split())
    assert legend.startswith(
        ">■ weights 1.5 GiB · ■ activation peak 1.0 GiB · ■ non-torch 1.0 GiB · ■ KV cache 70.0 GiB"
    )


def test_a_wide_segment_keeps_its_words() -> None:
    assert ">weights 40.0 GiB</span>" in bar(weights=40.0, kv=30.0)
