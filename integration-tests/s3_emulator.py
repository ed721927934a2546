"""moto's S3 emulator, served as `moto_server -H <host> -p <port>` serves it, one request at a time.

moto checks a conditional write (`If-None-Match: *`) and then stores the object, in two steps: two
writers at once can both pass the check, where S3 lets one. Serving one request at a time makes the
check and the write one step, as on S3; LogFilesObjectStoreSuite relies on it. Run it with the
virtualenv's Python, which has moto.
"""

from __future__ import annotations

import argparse
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import run_simple

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def one_request_at_a_time(app: WsgiApp) -> WsgiApp:
    lock = threading.Lock()

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with lock:
            return list(app(environ, start_response))  # the whole response, inside the lock

    return serve


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args()
    os.environ.setdefault("MOTO_PORT", str(args.port))
    app = one_request_at_a_time(DomainDispatcherApplication(create_backend_app))
    run_simple(args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
