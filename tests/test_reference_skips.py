"""DGN_REQUIRE_REFERENCES=1 (set by .ci/run) turns a skipped ``reference`` test into a failure.

The hook lives in ``tests/conftest.py``; each run here copies that file into a scratch
project (pytester) beside a tiny generated test module and runs pytest on it in-process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REQUIRE_REFERENCES

CONFTEST = Path(__file__).with_name("conftest.py")

MODULE = """
import pytest

@pytest.mark.reference
@pytest.mark.skipif(True, reason="no reference library here")
def test_marked_skipif():
    pass

@pytest.mark.reference
def test_marked_importorskip():
    pytest.importorskip("a_module_that_is_not_installed_anywhere")

@pytest.fixture
def needs_it():
    pytest.skip("the fixture found no reference")

@pytest.mark.reference
def test_marked_fixture_skip(needs_it):
    pass

@pytest.mark.reference
def test_marked_that_runs():
    assert True

def test_unmarked_skip():
    pytest.skip("no GPU")

@pytest.mark.reference
@pytest.mark.xfail(reason="a known difference", run=False)
def test_marked_xfail():
    pass
"""

INI = """
[pytest]
markers =
    reference: compares against a reference implementation
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8"))
    pytester.makeini(INI)
    pytester.makepyfile(test_refs=MODULE)
    return pytester


@pytest.mark.parametrize("value", [None, "", "0"])
def test_without_the_variable_reference_skips_stay_skips(project, monkeypatch, value):
    if value is None:
        monkeypatch.delenv(REQUIRE_REFERENCES, raising=False)
    else:
        monkeypatch.setenv(REQUIRE_REFERENCES, value)
    result = project.runpytest("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=4, xfailed=1)
    result.stdout.fnmatch_lines(["*SKIPPED*no reference library here*"])
    assert result.ret == 0


def test_with_the_variable_a_reference_skip_fails_and_says_which_and_why(project, monkeypatch):
    monkeypatch.setenv(REQUIRE_REFERENCES, "1")
    result = project.runpytest("-rs", "-p", "no:cacheprovider")
    # skipif and the fixture's skip happen in setup (reported as errors), importorskip in
    # the body (a failure); the unmarked skip and the xfail are left alone.
    result.assert_outcomes(passed=1, skipped=1, failed=1, errors=2, xfailed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    for test, reason in (
        ("test_marked_skipif", "no reference library here"),
        ("test_marked_importorskip", "could not import 'a_module_that_is_not_installed_anywhere'"),
        ("test_marked_fixture_skip", "the fixture found no reference"),
    ):
        line = f"test_refs.py::{test} compares against a reference implementation and was skipped ({reason}"
        assert line in out, (line, out)
    assert f"{REQUIRE_REFERENCES}=1 requires it to run" in out
    result.stdout.fnmatch_lines(["*SKIPPED*no GPU*"])  # -rs still lists the other skips


def test_the_reference_marker_is_registered_and_on_the_reference_tests(pytestconfig):
    """The marker is declared in pyproject.toml, and the comparisons against ranx, apricot,
    sentence-transformers and the C kernels carry it (a sample of each)."""
    assert any(line.startswith("reference:") for line in pytestconfig.getini("markers"))
    import tests.test_candidate_stage as candidate_stage
    import tests.test_end_to_end_cut as end_to_end_cut
    import tests.test_feature_sets as feature_sets
    import tests.test_fusion_classic as fusion_classic
    import tests.test_greedy as greedy
    import tests.test_kernels as kernels
    import tests.test_metrics as metrics
    import tests.test_sentence as sentence

    def marks(obj):
        return {m.name for m in getattr(obj, "pytestmark", [])}

    for test in (
        fusion_classic.test_matches_ranx_on_random_runs,
        metrics.test_graded_metrics_match_ranx,
        metrics.test_recall_and_precision_match_ranx,
        greedy.test_matches_apricot_feature_based_selection,
        candidate_stage.test_sentence_ranker_is_the_encoder_cosine,
        feature_sets.test_train_defaults_to_end_to_end_then_predict_and_explain,
        kernels.test_kernel_equals_the_eager_layers_in_values_and_gradients,
        kernels.test_fused_encoder_equals_the_layers,
        kernels.test_loss_kernel_equals_the_composition,
    ):
        assert "reference" in marks(test), test.__name__
    assert "reference" in marks(sentence) and "reference" in marks(end_to_end_cut)  # whole modules
    assert "reference" not in marks(kernels.test_retained_memory_keeps_freed_blocks_in_the_heap)
