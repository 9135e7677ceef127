"""The ImageNet-100 class list (domains/vision/imagenet100.txt) is CACR Table 6: 100 unique
wnids, in the table's order. The references below are typed from the papers' tables, not
generated from the file."""

from __future__ import annotations

import re
from pathlib import Path

CLASS_FILE = Path(__file__).resolve().parents[2] / "domains" / "vision" / "imagenet100.txt"

# CACR (Zheng et al.), Appendix B, Table 6 "ImageNet-100 Classes": ten rows of ten, as printed.
CACR_TABLE_6 = """
n02869837 n01749939 n02488291 n02107142 n13037406 n02091831 n04517823 n04589890 n03062245 n01773797
n01735189 n07831146 n07753275 n03085013 n04485082 n02105505 n01983481 n02788148 n03530642 n04435653
n02086910 n02859443 n13040303 n03594734 n02085620 n02099849 n01558993 n04493381 n02109047 n04111531
n02877765 n04429376 n02009229 n01978455 n02106550 n01820546 n01692333 n07714571 n02974003 n02114855
n03785016 n03764736 n03775546 n02087046 n07836838 n04099969 n04592741 n03891251 n02701002 n03379051
n02259212 n07715103 n03947888 n04026417 n02326432 n03637318 n01980166 n02113799 n02086240 n03903868
n02483362 n04127249 n02089973 n03017168 n02093428 n02804414 n02396427 n04418357 n02172182 n01729322
n02113978 n03787032 n02089867 n02119022 n03777754 n04238763 n02231487 n03032252 n02138441 n02104029
n03837869 n03494278 n04136333 n03794056 n03492542 n02018207 n04067472 n03930630 n03584829 n02123045
n04229816 n02100583 n03642806 n04336792 n03259280 n02116738 n02108089 n03424325 n01855672 n02090622
"""

# Wang & Liu 2021, supplementary material, the ImageNet100 label table (printed sorted).
WANG_LIU_LABELS = """
n01558993 n01692333 n01729322 n01735189 n01749939 n01773797 n01820546 n01855672 n01978455 n01980166
n01983481 n02009229 n02018207 n02085620 n02086240 n02086910 n02087046 n02089867 n02089973 n02090622
n02091831 n02093428 n02099849 n02100583 n02104029 n02105505 n02106550 n02107142 n02108089 n02109047
n02113799 n02113978 n02114855 n02116738 n02119022 n02123045 n02138441 n02172182 n02231487 n02259212
n02326432 n02396427 n02483362 n02488291 n02701002 n02788148 n02804414 n02859443 n02869837 n02877765
n02974003 n03017168 n03032252 n03062245 n03085013 n03259280 n03379051 n03424325 n03492542 n03494278
n03530642 n03584829 n03594734 n03637318 n03642806 n03764736 n03775546 n03777754 n03785016 n03787032
n03794056 n03837869 n03891251 n03903868 n03930630 n03947888 n04026417 n04067472 n04099969 n04111531
n04127249 n04136333 n04229816 n04238763 n04336792 n04418357 n04429376 n04435653 n04485082 n04493381
n04517823 n04589890 n04592741 n07714571 n07715103 n07753275 n07831146 n07836838 n13037406 n13040303
"""


def _table(text: str) -> list[str]:
    return text.split()


def _file_classes() -> list[str]:
    """The file as the loader reads it: one wnid per line, blank lines and '#' comments skipped."""
    lines = (line.strip() for line in CLASS_FILE.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def test_the_file_holds_100_unique_wnids():
    classes = _file_classes()
    assert len(classes) == 100
    assert len(set(classes)) == 100
    bad = [c for c in classes if not re.fullmatch(r"n\d{8}", c)]
    assert not bad, f"not of the form n + 8 digits: {bad}"


def test_the_file_says_where_the_list_comes_from():
    header = [line for line in CLASS_FILE.read_text(encoding="utf-8").splitlines() if line.startswith("#")]
    assert header and "Table 6" in " ".join(header) and "CACR" in " ".join(header)


def test_the_file_is_cacr_table_6_in_its_order():
    table = _table(CACR_TABLE_6)
    assert len(table) == 100 and len(set(table)) == 100  # the transcription itself
    assert set(_file_classes()) == set(table)
    assert _file_classes() == table


def test_wang_and_liu_print_the_same_100_classes():
    labels = _table(WANG_LIU_LABELS)
    assert len(labels) == 100 and labels == sorted(labels)
    assert set(labels) == set(_file_classes())
