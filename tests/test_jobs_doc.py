"""docs/job-formats.md holds the tables made from the readers' declarations, unchanged; the
declarations name real simrun options."""

from conftest import ROOT

from sim.cli import build_parser
from sim.cli.job_formats import table
from sim.jobs.megatron_table import ARGS, MODEL, SAME_NAME, TRANSLATED


def test_the_page_holds_the_generated_table():
    page = (ROOT / "docs" / "job-formats.md").read_text()
    assert table() in page, "run: python -m sim.cli.job_formats, paste into docs/job-formats.md"


def test_declarations_name_simrun_options_and_model_fields():
    known = set(build_parser()._option_string_actions)
    assert set(SAME_NAME) <= known
    for a in TRANSLATED:
        assert all(w in known for w in a.to.split()), a
    spec_fields = {"layers", "hidden", "heads", "ffn_hidden", "seq_len", "kv_heads",
                   "kv_channels", "gated_mlp", "norm", "position_embedding", "tied_embeddings",
                   "bias", "hidden_dropout", "attention_dropout", "vocab", "qk_layernorm",
                   "moe.experts", "moe.top_k", "moe.expert_ffn_hidden"}
    assert {a.to.removeprefix("model.") for a in MODEL} <= spec_fields
    assert all(a.verdict in ("applied", "irrelevant", "refused") for a in ARGS.values())
    assert all(a.why for a in ARGS.values() if a.verdict != "applied" or a.name not in
               SAME_NAME)
