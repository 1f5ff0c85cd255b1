"""The shared excerpt helpers: query terms and whole-sentence excerpts with their omission flags."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentium_harness._ports.recall import Completeness, OmittedContext, SourceOwner, SourceRef
from agentium_harness.adapters._excerpts import MAX_QUERY_TERMS, make_excerpt, query_terms

REF = SourceRef("doc/t/~/~/~/~/d", "rev")
OWNER = SourceOwner("t")


def size(text: str) -> int:
    return len(text.encode("utf-8"))


# -- query_terms ---------------------------------------------------------------------------------


def test_terms_are_lower_cased_distinct_words_in_order() -> None:
    assert query_terms("The cat, the HAT and the cat!") == ("the", "cat", "hat", "and")


def test_search_syntax_is_not_part_of_any_term() -> None:
    terms = query_terms('"quoted" pre* NEAR(a b) x OR y -z AND NOT w col:v (unbalanced ^caret')
    assert terms == (
        "quoted",
        "pre",
        "near",
        "a",
        "b",
        "x",
        "or",
        "y",
        "z",
        "and",
        "not",
        "w",
        "col",
        "v",
        "unbalanced",
        "caret",
    )
    assert all('"' not in t and "*" not in t and "(" not in t for t in terms)


def test_empty_and_punctuation_only_queries_have_no_terms() -> None:
    assert query_terms("") == ()
    assert query_terms("   \n\t") == ()
    assert query_terms('"*()-:^') == ()


def test_at_most_32_terms_and_a_huge_query_is_cheap() -> None:
    words = [f"w{i}" for i in range(100)]
    assert query_terms(" ".join(words)) == tuple(words[:MAX_QUERY_TERMS])
    assert MAX_QUERY_TERMS == 32
    huge = "alpha beta " * 100_000 + " ".join(words)  # about 1 MB
    assert query_terms(huge)[:2] == ("alpha", "beta")
    assert len(query_terms(huge)) == MAX_QUERY_TERMS


def test_unicode_words_are_terms() -> None:
    assert query_terms("Café ÜBER テスト") == ("café", "über", "テスト")


# -- make_excerpt ----------------------------------------------------------------------------------


def test_text_that_fits_is_complete_and_whole() -> None:
    text = "Short text. Not cut at all."
    excerpt = make_excerpt(REF, OWNER, text, ("cut",), size(text))
    assert excerpt.text == text
    assert excerpt.completeness is Completeness.COMPLETE
    assert excerpt.omitted == frozenset()
    assert excerpt.ref == REF and excerpt.owner == OWNER


def test_window_is_whole_sentences_around_the_best_match() -> None:
    text = "Alpha one. Bravo two. Charlie deploy target. Delta four. Echo five."
    excerpt = make_excerpt(REF, OWNER, text, ("deploy", "target"), 45)
    assert excerpt.completeness is Completeness.PARTIAL
    assert "Charlie deploy target." in excerpt.text
    assert size(excerpt.text) <= 45
    # Whole sentences only: it starts at a sentence start and ends at a sentence end.
    assert excerpt.text in text
    assert excerpt.text.endswith(".")
    assert excerpt.text[0].isupper()
    assert OmittedContext.SOURCE in excerpt.omitted


def test_window_grows_forward_first() -> None:
    text = "Aaaa aaaa. Bbbb key. Cccc cccc. Dddd dddd."
    excerpt = make_excerpt(REF, OWNER, text, ("key",), len("Bbbb key. Cccc cccc."))
    assert excerpt.text == "Bbbb key. Cccc cccc."


def test_correction_and_negation_cues_in_left_out_text_are_flagged() -> None:
    text = "The meeting is on Monday. Filler sentence here. Actually it moved, it is not Monday."
    excerpt = make_excerpt(REF, OWNER, text, ("meeting",), 30)
    assert excerpt.text == "The meeting is on Monday."
    assert excerpt.omitted == {OmittedContext.SOURCE, OmittedContext.CORRECTION, OmittedContext.NEGATION}


def test_no_cue_in_left_out_text_means_source_only() -> None:
    text = "The meeting is on Monday. Bring the slides. Lunch is provided."
    excerpt = make_excerpt(REF, OWNER, text, ("meeting",), 30)
    assert excerpt.omitted == {OmittedContext.SOURCE}


def test_cues_inside_the_excerpt_are_not_flagged() -> None:
    text = "Actually the build is not green. Other words follow here and there."
    excerpt = make_excerpt(REF, OWNER, text, ("build",), 35)
    assert excerpt.text == "Actually the build is not green."
    assert excerpt.omitted == {OmittedContext.SOURCE}


def test_contraction_negation_is_a_cue() -> None:
    text = "Ship it today. We don't ship on Fridays."
    excerpt = make_excerpt(REF, OWNER, text, ("ship", "today"), 15)
    assert excerpt.text == "Ship it today."
    assert OmittedContext.NEGATION in excerpt.omitted


def test_a_sentence_too_long_is_truncated_at_a_character_boundary() -> None:
    text = "ééééééééééééé is one long sentence with no end in sight. Never mind."
    excerpt = make_excerpt(REF, OWNER, text, ("sentence",), 5)
    assert excerpt.completeness is Completeness.TRUNCATED
    assert excerpt.text == "éé"  # 4 bytes; a fifth byte would split the third é
    assert OmittedContext.SOURCE in excerpt.omitted
    assert OmittedContext.NEGATION in excerpt.omitted  # "Never" was left out


def test_zero_bytes_gives_an_empty_truncated_excerpt() -> None:
    excerpt = make_excerpt(REF, OWNER, "Some text.", (), 0)
    assert excerpt.text == ""
    assert excerpt.completeness is Completeness.TRUNCATED


def test_lines_are_sentences() -> None:
    text = "user: where is the config\nassistant: it is in settings.toml\nuser: thanks"
    excerpt = make_excerpt(REF, OWNER, text, ("settings",), 40)
    assert excerpt.text == "assistant: it is in settings.toml"


@given(
    st.text(alphabet=st.sampled_from("ab é.!?\n😀"), max_size=200),
    st.lists(st.sampled_from(["a", "b", "é", "ab"]), max_size=3),
    st.integers(min_value=0, max_value=120),
)
def test_every_excerpt_fits_and_is_honest(text: str, terms: list[str], limit: int) -> None:
    excerpt = make_excerpt(REF, OWNER, text, tuple(terms), limit)
    assert size(excerpt.text) <= limit
    assert excerpt.text in text
    if excerpt.completeness is Completeness.COMPLETE:
        assert excerpt.text == text and excerpt.omitted == frozenset()
    else:
        assert size(text) > limit
        assert OmittedContext.SOURCE in excerpt.omitted
