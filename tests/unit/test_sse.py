"""SSE framing: complete events come out whole, byte-faithful, whatever the piece boundaries."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.sse import SseEvent, SseSplitter, parse_event
from tests.support.lanes import examples


def feed_all(pieces: list[bytes]) -> tuple[list[SseEvent], bytes]:
    splitter = SseSplitter()
    events: list[SseEvent] = []
    for piece in pieces:
        events.extend(splitter.feed(piece))
    return events, splitter.rest()


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(max(c, 0), len(data)) for c in cuts})
    out, start = [], 0
    for p in points:
        out.append(data[start:p])
        start = p
    out.append(data[start:])
    return out


# -- fixed cases ----------------------------------------------------------------------------------


def test_lf_boundaries() -> None:
    stream = b'data: {"a":1}\n\ndata: {"b":2}\n\ndata: [DONE]\n\n'
    events, rest = feed_all([stream])
    assert [e.raw for e in events] == [b'data: {"a":1}\n\n', b'data: {"b":2}\n\n', b"data: [DONE]\n\n"]
    assert [e.data for e in events] == ['{"a":1}', '{"b":2}', "[DONE]"]
    assert [e.event for e in events] == [None, None, None]
    assert rest == b""


def test_crlf_boundaries() -> None:
    stream = b"event: message_start\r\ndata: {}\r\n\r\ndata: x\r\n\r\n"
    events, rest = feed_all([stream])
    assert [e.raw for e in events] == [b"event: message_start\r\ndata: {}\r\n\r\n", b"data: x\r\n\r\n"]
    assert events[0].event == "message_start"
    assert events[0].data == "{}"
    assert events[1].data == "x"
    assert rest == b""


def test_cr_boundaries() -> None:
    events, rest = feed_all([b"data: a\r\rdata: b\r\r"])
    assert [e.data for e in events] == ["a", "b"]
    assert [e.raw for e in events] == [b"data: a\r\r", b"data: b\r\r"]
    assert rest == b""


def test_crlf_split_inside_terminator() -> None:
    stream = b"data: a\r\n\r\ndata: b\r\n\r\n"
    for cut in range(len(stream) + 1):
        events, rest = feed_all([stream[:cut], stream[cut:]])
        assert [e.raw for e in events] == [b"data: a\r\n\r\n", b"data: b\r\n\r\n"], cut
        assert rest == b""


def test_comment_only_event() -> None:
    events, _ = feed_all([b": keep-alive\n\ndata: x\n\n"])
    assert events[0] == SseEvent(b": keep-alive\n\n", None, None)
    assert events[1].data == "x"


def test_comment_lines_inside_event_are_ignored() -> None:
    (event,), _ = feed_all([b": ping\ndata: x\n: another\n\n"])
    assert event.data == "x"
    assert event.raw == b": ping\ndata: x\n: another\n\n"


def test_multi_line_data_joined_with_newline() -> None:
    (event,), _ = feed_all([b"data: first\ndata: second\ndata:third\n\n"])
    assert event.data == "first\nsecond\nthird"


def test_only_one_leading_space_is_removed() -> None:
    (event,), _ = feed_all([b"data:  two spaces\n\n"])
    assert event.data == " two spaces"


def test_empty_data_line_is_empty_string_not_none() -> None:
    (event,), _ = feed_all([b"data\n\n"])
    assert event.data == ""


def test_event_name_and_unknown_fields() -> None:
    (event,), _ = feed_all([b"event: ping\nid: 7\nretry: 100\ndata: {}\n\n"])
    assert (event.event, event.data) == ("ping", "{}")


def test_rest_returns_unterminated_event() -> None:
    splitter = SseSplitter()
    assert splitter.feed(b'data: a\n\ndata: {"partial"') == [parse_event(b"data: a\n\n")]
    assert splitter.rest() == b'data: {"partial"'
    assert splitter.feed(b": 1}\n") == []
    assert splitter.rest() == b'data: {"partial": 1}\n'
    (event,) = splitter.feed(b"\n")
    assert event.data == '{"partial": 1}'
    assert splitter.rest() == b""


def test_event_complete_as_soon_as_terminated() -> None:
    # Never waits for more: the event is returned by the feed that completes it.
    splitter = SseSplitter()
    assert splitter.feed(b"data: a\n") == []
    assert [e.data for e in splitter.feed(b"\n")] == ["a"]


def test_utf8_split_across_pieces() -> None:
    data = "data: héllo ✓\n\n".encode()
    cut = data.index("✓".encode()) + 1  # in the middle of the multi-byte character
    (event,), _ = feed_all([data[:cut], data[cut:]])
    assert event.data == "héllo ✓"
    assert event.raw == data


def test_unicode_line_separators_inside_data_are_not_line_breaks() -> None:
    # SSE lines end only at CR, LF or CRLF. JSON allows U+2028/U+2029/U+0085 unescaped inside strings
    # (serde_json and json.dumps(ensure_ascii=False) emit them raw); the data must come back whole, or
    # the chunk fails to parse and its content is missing from the recorded response.
    payload = '{"choices":[{"index":0,"delta":{"content":"a\u2028b\u2029c\x85d"}}]}'
    (event,), _ = feed_all([f"data: {payload}\n\n".encode()])
    assert event.data == payload
    for char in "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029":
        (event,), _ = feed_all([f"data: x{char}y\n\n".encode()])
        assert event.data == f"x{char}y", repr(char)


# -- arbitrary splits -----------------------------------------------------------------------------

# Characters str.splitlines() treats as line breaks are covered by the dedicated test above.
_text = st.text(
    alphabet=st.characters(
        blacklist_categories=["Cs"], blacklist_characters="\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
    ),
    max_size=12,
)
_line = st.one_of(
    st.builds(lambda v: "data: " + v, _text),
    st.builds(lambda v: "data:" + v, _text),
    st.builds(lambda v: "event: " + v, _text),
    st.builds(lambda v: ": " + v, _text),
    st.just("data"),
    st.builds(lambda v: "id: " + v, _text),
)
_event_lines = st.lists(_line, min_size=1, max_size=4)


@settings(max_examples=examples(300), deadline=None)
@given(
    events=st.lists(_event_lines, min_size=0, max_size=6),
    newline=st.sampled_from(["\n", "\r\n", "\r"]),
    tail=st.one_of(st.just(""), st.builds(lambda v: "data: " + v, _text)),
    cuts=st.lists(st.integers(0, 400), max_size=12),
)
def test_arbitrary_splits_yield_same_events(events: list[list[str]], newline: str, tail: str, cuts: list[int]) -> None:
    raws = [(newline.join(lines) + newline + newline).encode() for lines in events]
    stream = b"".join(raws) + tail.encode()

    whole, whole_rest = feed_all([stream])
    pieces, pieces_rest = feed_all(split_at(stream, cuts))
    one_by_one, obo_rest = feed_all([stream[i : i + 1] for i in range(len(stream))])

    assert [e.raw for e in whole] == raws
    assert whole_rest == tail.encode()
    assert pieces == whole
    assert one_by_one == whole
    assert pieces_rest == whole_rest == obo_rest
    # Byte-faithful: relaying every event plus the rest reproduces the input exactly.
    assert b"".join(e.raw for e in pieces) + pieces_rest == stream
    for lines, event in zip(events, whole, strict=True):
        data = [
            "" if line == "data" else line[5:].removeprefix(" ")
            for line in lines
            if line == "data" or line.startswith("data:")
        ]
        names = [line[6:].removeprefix(" ") for line in lines if line.startswith("event:")]
        assert event.data == ("\n".join(data) if data else None)
        assert event.event == (names[-1] if names else None)
