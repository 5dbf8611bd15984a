"""A decision's output_contract text is appended to the system prompt."""

from serve_app.outputs import apply_output_contract

CONTRACT = "Answer in at most three bullet points."


def test_appended_to_the_existing_system_message():
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"}]
    out = apply_output_contract(messages, CONTRACT)
    assert out[0] == {"role": "system", "content": f"You are terse.\n\n{CONTRACT}"}
    assert out[1:] == messages[1:]
    assert messages[0]["content"] == "You are terse."  # the caller's list is untouched


def test_a_system_message_is_added_when_there_is_none():
    messages = [{"role": "user", "content": "hi"}]
    assert apply_output_contract(messages, CONTRACT) == [
        {"role": "system", "content": CONTRACT}, {"role": "user", "content": "hi"}]


def test_developer_role_and_part_lists_are_kept():
    messages = [{"role": "developer", "content": [{"type": "text", "text": "Be exact."}]},
                {"role": "user", "content": "hi"}]
    out = apply_output_contract(messages, CONTRACT)
    assert out[0]["role"] == "developer"
    assert out[0]["content"] == [{"type": "text", "text": "Be exact."}, {"type": "text", "text": CONTRACT}]


def test_applying_twice_does_not_duplicate():
    # A fallback hop or a retry goes through the same path again.
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"}]
    once = apply_output_contract(messages, CONTRACT)
    assert apply_output_contract(once, CONTRACT) == once


def test_no_contract_leaves_messages_as_they_are():
    messages = [{"role": "user", "content": "hi"}]
    assert apply_output_contract(messages, None) == messages
    assert apply_output_contract(messages, "   ") == messages
