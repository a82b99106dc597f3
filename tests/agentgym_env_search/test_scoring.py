from agentgym_env_search.scoring import best_f1, exact_match, f1_score, normalize_answer


def test_normalisation_drops_case_punctuation_and_articles():
    assert normalize_answer("  The  Eiffel-Tower! ") == "eiffeltower"
    assert normalize_answer("A cat and an apple") == "cat and apple"


def test_exact_match_accepts_any_golden_answer_after_normalisation():
    assert exact_match("the Asia", ["Asia"])
    assert exact_match("van rossum", ["Guido van Rossum", "Van Rossum."])
    assert not exact_match("Asia Minor", ["Asia"])
    assert not exact_match("", ["Asia"])


def test_f1_gives_partial_credit():
    assert f1_score("Redmond", "Redmond, Washington") == 2 * (1 * 0.5) / 1.5
    assert f1_score("Paris", "Berlin") == 0.0
    assert best_f1("Redmond Washington", ["Seattle", "Redmond, Washington"]) == 1.0
