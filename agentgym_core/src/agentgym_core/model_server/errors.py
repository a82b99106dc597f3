"""The error both model-server route sets answer with, in OpenAI's JSON shape."""

from __future__ import annotations

from fastapi.responses import JSONResponse

__all__ = ["OpenAIError"]


class OpenAIError(Exception):
    """An error answered in OpenAI's JSON shape."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 error_type: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = error_type or ("invalid_request_error" if status < 500 else "server_error")

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status)
