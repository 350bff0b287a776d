"""The API's OpenAPI schema as a file (`docs/openapi.json`, `make openapi`): what a running
controller serves at `/openapi.json`, for clients generated or checked without one running.

`python -m controller.service.openapi [FILE]` writes it (default: print it). The schema
depends only on the routes and models of `controller.service.api`, not on a session, so the
app is built here without one; tests/test_openapi_file.py checks the committed file against
what a daemon serves.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from controller.service.jobs import JobService


def schema() -> dict[str, Any]:
    from controller.service.api import build_app

    # No handler runs to make the schema, so the app needs no job service behind it.
    return build_app(cast("JobService", None), None).openapi()


def text() -> str:
    return json.dumps(schema(), indent=2) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print("usage: python -m controller.service.openapi [FILE]", file=sys.stderr)
        return 2
    if not argv:
        sys.stdout.write(text())
        return 0
    try:
        with open(argv[0], "w", encoding="utf-8") as out:
            out.write(text())
    except OSError as exc:
        print(f"error: {argv[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
