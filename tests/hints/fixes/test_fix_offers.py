"""Fix offers: what a rule hands over, and their expansion from one parse per file.

* every offer on a file runs on the same parse, and an offer whose construct does not match is
  declined with its reason;
* tries of one fix at several places (``choice``) keep the first that matches;
* the NPU101 construct the rule recognised is what compile_pair rewrites: a ``sequential`` pair
  is not looked for as a nested call, and an in-place ``torch.relu_`` inside a dropout (a ReLU
  to the rule) is compiled by the fix too; the result runs and matches the original in eval mode;
* catalog safety agrees with what the transforms return.
"""

from __future__ import annotations

import pytest

from fixkit import check_fix, line_of, load

from msprof_lsp.hints.finding import Construct, Finding, Safety, Severity
from msprof_lsp.hints.fixes import CATALOG, cst_tools, expand, make_offer, relu_dropout as rd
from msprof_lsp.hints.fixes.offers import Sources, expand_offers
from msprof_lsp.hints.rules import relu_dropout as rule
from msprof_lsp.mapping.spans import Span

MODEL = """import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.seq = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Dropout(0.0))

    def forward(self, x):
        h = F.dropout(torch.relu_(self.fc(x)), p=0.1, training=self.training)
        return self.seq(h)
"""


def _finding(*offers) -> Finding:  # noqa: ANN002
    return Finding("NPU101", "relu-dropout-fusion", Severity.HINT, "m", None, offers=list(offers))


def test_offers_of_a_file_share_one_parse_and_declines_say_why(monkeypatch):
    built: list[str] = []
    real = cst_tools.Source.__init__
    monkeypatch.setattr(cst_tools.Source, "__init__", lambda self, text: (built.append(text), real(self, text))[1])
    cst_tools._parse.cache_clear()
    nested, seq = line_of(MODEL, "F.dropout(torch.relu_("), line_of(MODEL, "nn.Sequential(")
    offers = [
        make_offer(rd.compile_pair, "m.py", nested, backend="inductor"),
        make_offer(rd.drop_zero_dropout, "m.py", seq),
        make_offer(rd.inplace_relu, "m.py", 1),  # nothing at line 1
        make_offer(rd.compile_pair, "broken.py", 1),
    ]
    got = expand_offers(offers, Sources({"m.py": MODEL, "broken.py": "def (:\n"}.get))
    assert built == [MODEL, "def (:\n"]  # each file parsed once for all its offers
    assert [f.safe for f in got.fixes] == [True, False]  # safe first
    reasons = {d.fix.fix: d.reason for d in got.declined}
    assert reasons == {"relu_dropout.inplace_relu": "no ReLU here whose input is safe to overwrite",
                       "relu_dropout.compile_pair": "broken.py cannot be read or does not parse"}


def test_tries_of_one_fix_keep_the_first_place_that_matches():
    nested = line_of(MODEL, "F.dropout(torch.relu_(")
    tries = [make_offer(rd.compile_pair, "m.py", n, choice="pair") for n in (1, nested, nested)]
    f = _finding(*tries)
    expand([f], {"m.py": MODEL}.get)
    assert len(f.fixes) == 1 and "Compile ReLU+Dropout" in f.fixes[0].title
    assert "no_fix" not in f.evidence and any("matched" in n for n in f.evidence["fix_notes"])
    miss = _finding(make_offer(rd.compile_pair, "m.py", 1, choice="pair"))
    expand([miss], {"m.py": MODEL}.get)
    assert miss.fixes == [] and miss.evidence["no_fix"] == "no recognised ReLU->Dropout pair at this line"


def test_compile_pair_rewrites_only_the_shape_the_rule_recognised():
    nested = line_of(MODEL, "F.dropout(torch.relu_(")
    as_seq = Construct(rd.PairKind.SEQUENTIAL.value, ("torch.nn.ReLU", "torch.nn.Dropout"))
    why: list[str] = []
    assert rd.compile_pair(MODEL, nested, construct=as_seq, why=why) is None
    assert why == ["no recognised ReLU->Dropout pair (sequential) at this line"]
    as_nested = Construct(rd.PairKind.NESTED.value, ("torch.relu_", "torch.nn.functional.dropout"))
    res = rd.compile_pair(MODEL, nested, construct=as_nested, backend="inductor")
    new = check_fix(MODEL, res, allowed_lines={nested, 3}, safe=False)
    assert "_relu_dropout(self.fc(x), 0.1, self.training)" in new
    assert any(n.endswith("(torch.relu_, torch.nn.functional.dropout)") for n in res.notes)
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    ref = load(MODEL, "offers_ref")["Block"]()
    fixed = load(new, "offers_fixed")["Block"]()
    fixed.load_state_dict(ref.state_dict())
    ref.eval()
    fixed.eval()
    x = torch.randn(4, 16)
    with torch.no_grad():
        assert torch.allclose(ref(x), fixed(x))


def test_rule_and_fix_recognise_the_same_relu_and_dropout_spellings():
    assert rule.RELU_CALLS == set(rd.RELU_FUNCS) and rule.DROPOUT_CALLS == set(rd.DROPOUT_FUNCS)
    assert rd.is_relu_module("torch.nn.ReLU", "ReLU") and not rd.is_relu_module("mylib.ReLU", "ReLU")
    assert rd.is_relu_module("", "ReLU")  # an import the file does not show: the class name decides
    assert rd.is_dropout_module("", "Dropout") and not rd.is_dropout_module("torch.nn.Dropout2d", "Dropout2d")


def test_catalog_safety_is_what_the_transforms_return():
    seq = line_of(MODEL, "nn.Sequential(")
    nested = line_of(MODEL, "F.dropout(torch.relu_(")
    by = {s.transform: s.safety for s in CATALOG}
    zero = rd.drop_zero_dropout(MODEL, seq)
    pair = rd.compile_pair(MODEL, nested)
    assert by[rd.drop_zero_dropout] is Safety.SAFE and zero is not None and zero.safe
    assert by[rd.compile_pair] is Safety.REVIEW and pair is not None and not pair.safe
    assert make_offer(rd.compile_pair, "m.py", Span("m.py", 3, 0, 3, 4), backend="npu").options == (("backend", "npu"),)
