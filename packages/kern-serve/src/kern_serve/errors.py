"""OpenAI's error object, the only shape a failed request gets:
``{"error": {"message", "type", "param", "code"}}`` with the HTTP status it goes with."""

from __future__ import annotations

from typing import Any

INVALID = "invalid_request_error"
SERVER = "server_error"


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, type_: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type_ or (SERVER if status >= 500 else INVALID)
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


def bad(message: str, param: str | None, code: str | None = "invalid_value") -> APIError:
    """A 400 naming the offending parameter."""
    return APIError(400, message, param, code)


def unavailable(message: str, retry_after: int = 1) -> APIError:
    return APIError(503, message, None, "unavailable",
                    headers={"Retry-After": str(retry_after)})
