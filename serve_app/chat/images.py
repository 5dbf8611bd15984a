"""Checks on the images of a chat request, run at the ingress before any model call.

OpenAI ``image_url`` content parts carry either an inline ``data:image/<fmt>;base64,...`` URL or
an http(s) URL. Inline images are decoded and opened with Pillow, so format and dimensions are
the image's real ones, not what the client declared; remote URLs are refused unless the profile
allows the engine to fetch them (they are then passed on unchecked: vLLM applies its own fetch
limits). Every failure is an :class:`InvalidRequest` (HTTP 400) whose ``param`` points at the
offending part and whose message says what is wrong (seed §5.1: a vision model given a bad
image returns nothing useful, so bad images are stopped before it).
"""

from __future__ import annotations

import base64
import binascii
import io
import re
from typing import Any, Iterator

from PIL import Image, UnidentifiedImageError

from serve_app.config.gateway import VisionSettings
from serve_app.errors import InvalidRequest
from serve_app.messages.view import image_parts

# Pillow's format names for the formats a profile may allow.
_PIL_FORMATS = {"PNG": "png", "JPEG": "jpeg", "WEBP": "webp", "GIF": "gif"}
_MIME_ALIASES = {"jpg": "jpeg", "pjpeg": "jpeg"}
_DATA_URL = re.compile(r"^data:(?P<mime>[^;,]*)(?P<params>(?:;[^;,]*)*),(?P<data>.*)$", re.S)


def _image_parts(request: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(param path, image_url value) of every image part, in message order."""
    for path, part in image_parts(request.get("messages")):
        yield f"{path}.image_url", part.get("image_url")


def _url_of(value: Any, param: str) -> str:
    # OpenAI sends {"url": ..., "detail": ...}; some clients send the URL string itself.
    url = value.get("url") if isinstance(value, dict) else value
    if not isinstance(url, str) or not url.strip():
        raise InvalidRequest("image_url part has no url", param=param)
    return url.strip()


def _check_remote(url: str, param: str, settings: VisionSettings) -> None:
    scheme = url.split(":", 1)[0].lower()
    if scheme not in ("http", "https"):
        raise InvalidRequest(f"image URL scheme {scheme!r} is not supported; send a base64 data: URL",
                             param=param)
    if not settings.allow_remote_urls:
        raise InvalidRequest("remote image URLs are not allowed; send the image inline as a base64 "
                             "data: URL (data:image/png;base64,...)", param=param)


def _decode(url: str, param: str, settings: VisionSettings) -> tuple[str, bytes]:
    match = _DATA_URL.match(url)
    if match is None:
        raise InvalidRequest("malformed data: URL; expected data:image/<format>;base64,<data>", param=param)
    mime = match.group("mime").strip().lower()
    if not mime.startswith("image/"):
        raise InvalidRequest(f"data: URL media type {mime or 'missing'!r} is not an image", param=param)
    declared = _MIME_ALIASES.get(mime[len("image/"):], mime[len("image/"):])
    if declared not in settings.allowed_formats:
        raise InvalidRequest(f"image format {declared!r} is not allowed; use one of "
                             f"{', '.join(settings.allowed_formats)}", param=param)
    if "base64" not in [p.strip().lower() for p in match.group("params").split(";")]:
        raise InvalidRequest("image data: URL must be base64-encoded (;base64,)", param=param)
    data = re.sub(r"\s+", "", match.group("data"))
    # Refuse oversized payloads before spending memory on decoding them (exact for valid base64).
    decoded_size = len(data) * 3 // 4 - len(data[-2:]) + len(data[-2:].rstrip("="))
    if decoded_size > settings.max_decoded_bytes:
        raise InvalidRequest(f"image is {decoded_size} bytes decoded; the limit is "
                             f"{settings.max_decoded_bytes} bytes", param=param)
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest("image data is not valid base64", param=param) from None
    if not raw:
        raise InvalidRequest("image data is empty", param=param)
    if len(raw) > settings.max_decoded_bytes:
        raise InvalidRequest(f"image is {len(raw)} bytes decoded; the limit is "
                             f"{settings.max_decoded_bytes} bytes", param=param)
    return declared, raw


def _check_image(declared: str, raw: bytes, param: str, settings: VisionSettings) -> None:
    try:
        with Image.open(io.BytesIO(raw)) as image:
            actual = _PIL_FORMATS.get(image.format or "")
            width, height = image.size
            if actual is None:
                raise InvalidRequest(f"image format {image.format!r} is not allowed; use one of "
                                     f"{', '.join(settings.allowed_formats)}", param=param)
            if actual != declared:
                raise InvalidRequest(f"image is declared as {declared} but its data is {actual}", param=param)
            if width > settings.max_width or height > settings.max_height:
                raise InvalidRequest(f"image is {width}x{height} pixels; the maximum is "
                                     f"{settings.max_width}x{settings.max_height}", param=param)
            if width < settings.min_width or height < settings.min_height:
                raise InvalidRequest(f"image is {width}x{height} pixels; the minimum is "
                                     f"{settings.min_width}x{settings.min_height}", param=param)
            # Structural check (chunk CRCs, truncation) without decoding every pixel.
            image.verify()
    except InvalidRequest:
        raise
    except UnidentifiedImageError:
        raise InvalidRequest("image data is not a readable image", param=param) from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise InvalidRequest(f"image data is corrupt ({exc})", param=param) from None


def validate_images(request: dict[str, Any], settings: VisionSettings) -> int:
    """Check every image part of an OpenAI chat request; return how many there are."""
    count = 0
    for param, value in _image_parts(request):
        count += 1
        if count > settings.max_images_per_request:
            raise InvalidRequest(f"too many images: at most {settings.max_images_per_request} per request",
                                 param=param)
        url = _url_of(value, param)
        if not url.lower().startswith("data:"):
            _check_remote(url, param, settings)
            continue
        declared, raw = _decode(url, param, settings)
        _check_image(declared, raw, param, settings)
    return count
