

def test_session_ids_are_scoped_by_api_key_name():
    from serve_app.sessions.ids import scoped_session_id

    assert scoped_session_id("s1", None) == "s1"          # auth off: the client's id as is
    assert scoped_session_id(None, "team-a") is None      # no session: stateless
    assert scoped_session_id("s1", "team-a") == "team-a/s1"
    assert scoped_session_id("s1", "team-a") != scoped_session_id("s1", "team-b")
