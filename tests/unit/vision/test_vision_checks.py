"""Image checks at the ingress: real decoded format and size, limits from VisionSettings."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from serve_app.config.gateway import VisionSettings
from serve_app.errors import InvalidRequest
from serve_app.chat.images import validate_images

PARAM = "messages[0].content[1].image_url"


def image_bytes(fmt: str, size=(96, 64), mode="RGB") -> bytes:
    buf = io.BytesIO()
    Image.new(mode, size, (200, 30, 30) if mode == "RGB" else 3).save(buf, fmt)
    return buf.getvalue()


def data_url(raw: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(raw).decode()}"


def request(*urls, as_string=False) -> dict:
    parts = [{"type": "text", "text": "what is in this picture?"}]
    parts += [{"type": "image_url", "image_url": url if as_string else {"url": url, "detail": "auto"}}
              for url in urls]
    return {"messages": [{"role": "user", "content": parts}]}


def refused(req: dict, settings: VisionSettings | None = None) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        validate_images(req, settings or VisionSettings())
    assert info.value.status == 400 and info.value.type == "invalid_request_error"
    return info.value


@pytest.mark.parametrize("fmt,mime", [("PNG", "image/png"), ("JPEG", "image/jpeg"),
                                      ("WEBP", "image/webp"), ("GIF", "image/gif")])
def test_each_allowed_format_passes(fmt, mime):
    mode = "P" if fmt == "GIF" else "RGB"
    assert validate_images(request(data_url(image_bytes(fmt, mode=mode), mime)), VisionSettings()) == 1


def test_jpg_alias_and_string_image_url_are_accepted():
    url = data_url(image_bytes("JPEG"), "image/jpg")
    assert validate_images(request(url, as_string=True), VisionSettings()) == 1


def test_text_only_requests_have_no_images():
    assert validate_images({"messages": [{"role": "user", "content": "hello"}]}, VisionSettings()) == 0
    assert validate_images({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]},
                           VisionSettings()) == 0


def test_several_images_are_counted_across_messages():
    png = data_url(image_bytes("PNG"), "image/png")
    req = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": png}}]},
                        {"role": "assistant", "content": "ok"},
                        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": png}}]}]}
    assert validate_images(req, VisionSettings()) == 2


def test_format_not_allowed_by_the_profile():
    err = refused(request(data_url(image_bytes("GIF", mode="P"), "image/gif")),
                  VisionSettings(allowed_formats=["png", "jpeg"]))
    assert err.param == PARAM and "'gif' is not allowed" in err.message and "png, jpeg" in err.message


def test_declared_format_must_match_the_data():
    err = refused(request(data_url(image_bytes("PNG"), "image/jpeg")))
    assert err.message == "image is declared as jpeg but its data is png"


def test_unsupported_real_format_is_refused():
    err = refused(request(data_url(image_bytes("BMP"), "image/png")))
    assert "'BMP' is not allowed" in err.message


def test_invalid_base64():
    err = refused(request("data:image/png;base64,iVBORw0KGgo***not-base64***"))
    assert err.param == PARAM and err.message == "image data is not valid base64"


def test_data_url_without_base64_marker():
    err = refused(request("data:image/png,rawbytes"))
    assert "must be base64-encoded" in err.message


def test_non_image_media_type():
    err = refused(request(data_url(b"hello", "text/plain")))
    assert "'text/plain' is not an image" in err.message


def test_bytes_that_are_not_an_image():
    err = refused(request(data_url(b"\x00" * 200, "image/png")))
    assert err.message == "image data is not a readable image"


def test_truncated_png_is_corrupt():
    raw = image_bytes("PNG", size=(200, 200))
    err = refused(request(data_url(raw[: len(raw) // 2], "image/png")))
    assert err.message.startswith("image data is corrupt")


def test_decoded_size_limit():
    raw = image_bytes("PNG", size=(300, 300))
    err = refused(request(data_url(raw, "image/png")), VisionSettings(max_decoded_bytes=len(raw) - 1))
    assert f"{len(raw)} bytes decoded; the limit is {len(raw) - 1} bytes" in err.message


def test_huge_payload_is_refused_before_decoding():
    err = refused(request("data:image/png;base64," + "A" * 4000), VisionSettings(max_decoded_bytes=1000))
    assert "image is 3000 bytes decoded" in err.message


def test_dimensions_above_the_maximum():
    err = refused(request(data_url(image_bytes("PNG", size=(600, 100)), "image/png")),
                  VisionSettings(max_width=512, max_height=512))
    assert err.message == "image is 600x100 pixels; the maximum is 512x512"


def test_dimensions_below_the_minimum():
    err = refused(request(data_url(image_bytes("JPEG", size=(40, 200)), "image/jpeg")),
                  VisionSettings(min_width=64, min_height=64))
    assert err.message == "image is 40x200 pixels; the minimum is 64x64"


def test_too_many_images_points_at_the_first_extra_one():
    png = data_url(image_bytes("PNG"), "image/png")
    err = refused(request(png, png, png), VisionSettings(max_images_per_request=2))
    assert err.param == "messages[0].content[3].image_url"
    assert "at most 2 per request" in err.message


def test_remote_urls_refused_unless_allowed():
    err = refused(request("https://example.com/cat.png"))
    assert err.param == PARAM and "remote image URLs are not allowed" in err.message
    assert validate_images(request("https://example.com/cat.png"), VisionSettings(allow_remote_urls=True)) == 1


def test_other_url_schemes_are_never_fetched():
    err = refused(request("file:///etc/passwd"), VisionSettings(allow_remote_urls=True))
    assert "scheme 'file' is not supported" in err.message


def test_missing_url():
    err = refused({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})
    assert err.param == "messages[0].content[0].image_url" and err.message == "image_url part has no url"


def test_error_body_is_openai_shaped():
    err = refused(request("https://example.com/x.png"))
    body = err.body()["error"]
    assert body["type"] == "invalid_request_error" and body["param"] == PARAM
