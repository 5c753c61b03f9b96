"""An HTTP client for AppWorld's environment server (`appworld.serve.environment`), standard library only.

The kit never imports `appworld` (it pins pydantic<2, the kit pydantic 2); AppWorld runs in its own venv and process
(`server.py`, in a sandbox without network) and the kit speaks HTTP to it over a Unix socket. The server's contract,
measured on AppWorld 0.1.3.post1: every body is JSON, every answer is `{"output": ...}`, and it holds ONE task at a
time (a request naming another task is refused).

Every failure of the server itself raises `AppWorldServerError` (down, timed out, refused, unreadable answer); whose
fault it is, the environment's or the policy's code's, the caller decides from when it arose (`episode.py`). What the
policy's code does (an exception, a blocked call, a syntax error) is a normal result: `execute` returns AppWorld's own
text for it. The server answers every refusal with a bare HTTP 500 "Internal Server Error" (it passes its message as
`HTTPException`'s status code), so the client says what went wrong from what it knows: which task it initialized,
whether the server still answers, and the end of the server's log when the server manager gave one.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SERVER_ERROR_KINDS = ("down", "timeout", "refused", "bad_response")


class AppWorldServerError(RuntimeError):
    """The AppWorld server failed: an environment error to count apart (and to retry after a restart), unless it
    failed while it held the policy's code (`episode.CODE_FAULTS`).

    `kind` is one of SERVER_ERROR_KINDS: "down" (no answer: not started, killed, connection reset), "timeout" (no
    answer within the request's timeout), "refused" (HTTP error: task not initialized, another task active, unknown
    task), "bad_response" (an answer that is not AppWorld's JSON)."""

    def __init__(self, message: str, kind: str):
        assert kind in SERVER_ERROR_KINDS, kind
        super().__init__(message)
        self.kind = kind


@dataclass
class AppWorldClient:
    """One AppWorld environment server, at `socket_path` (the server manager's) or `base_url` (e.g. a test's fake)."""

    base_url: str
    """Where the server listens over TCP (e.g. a test's server on 127.0.0.1); unused when `socket_path` is set."""
    socket_path: str | None = None
    """The Unix socket the server listens on (the server manager's sandboxed servers have no network: the kit
    reaches them only through this socket in their scratch folder)."""
    timeout_s: float = 120.0
    """Seconds to wait for one answer. Above AppWorld's own limit on one code execution (100 s by default), so that a
    slow execution comes back as AppWorld's "Execution timed out" text, and only a hung server as a timeout."""
    log_tail: Callable[[], str] | None = None
    """Returns the end of the server's log (given by the server manager); added to refusal messages, since the HTTP
    answer itself carries no detail."""
    active_task: str | None = field(default=None, init=False)
    """The task this client last initialized and did not close: the server holds one task, so this explains refusals."""

    def initialize(self, task_id: str, **options: Any) -> dict:
        """Load `task_id` into the server (replacing any task it held) and return `{task_id, instruction, supervisor,
        datetime}`. `options` are AppWorld's own initialize fields (`experiment_name`, `timeout_seconds`,
        `max_interactions`, `random_seed`, ...)."""
        self.active_task = None
        output = self._post("/initialize", {"task_id": task_id, **options}, task_id)
        self.active_task = task_id
        return output

    def execute(self, task_id: str, code: str, max_chars: int | None = None, timeout_s: float | None = None) -> str:
        """Run `code` in the task's shell (AppWorld's IPython shell with `apis`, inside the server's sandbox) and
        return what it printed, or AppWorld's own error text ("Execution failed. Traceback: ...") for code that raised
        or was refused.
        `max_chars`: read at most what holds that many characters of output (JSON escapes take up to 6 bytes each)
        and return only a prefix of a longer output, a little over `max_chars` long, so that a code block printing
        hundreds of megabytes costs the kit no more than its observation budget (the caller then cuts it there).
        `timeout_s`: this request's wait, instead of `timeout_s`."""
        return self._post("/execute", {"task_id": task_id, "code": code}, task_id,
                          max_bytes=None if max_chars is None else 6 * max_chars + 1024, timeout_s=timeout_s)

    def task_completed(self, task_id: str) -> bool:
        """Whether the agent marked the task complete (`apis.supervisor.complete_task`)."""
        return bool(self._post("/task_completed", {"task_id": task_id}, task_id))

    def grade(self, task_id: str) -> dict:
        """AppWorld's grade of the task's current state (its evaluator, the server's `/evaluate`): `{success,
        difficulty, num_tests, passes: [{requirement, label}], failures: [{requirement, trace, label}]}`."""
        return self._post("/evaluate", {"task_id": task_id, "suppress_errors": True, "report": False}, task_id)

    def close(self, task_id: str) -> None:
        """Release the task's in-memory databases on the server."""
        self._post("/close", {"task_id": task_id}, task_id)
        self.active_task = None

    def api_docs(self) -> dict:
        """Every app's API docs: `{app: {api: doc}}` (AppWorld's standard format; the admin app left out)."""
        return self._request("GET", "/api_docs", None, None)

    def task(self, task_id: str) -> dict:
        """A task's `{task_id, instruction, supervisor, datetime}` without loading it (GET /tasks/{task_id})."""
        return self._request("GET", f"/tasks/{task_id}", None, task_id)["output"]

    @property
    def address(self) -> str:
        """Where the server is, for messages."""
        return f"unix:{self.socket_path}" if self.socket_path else self.base_url

    def healthy(self) -> bool:
        """Whether the server answers its index page (GET /) within 5 s."""
        connection = self._connection(5)
        try:
            connection.request("GET", "/")
            return connection.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            connection.close()

    def _connection(self, timeout_s: float) -> http.client.HTTPConnection:
        if self.socket_path:
            return _UnixConnection(self.socket_path, timeout_s)
        url = urllib.parse.urlsplit(self.base_url)
        return http.client.HTTPConnection(url.hostname, url.port, timeout=timeout_s)

    def _post(self, path: str, body: dict, task_id: str, max_bytes: int | None = None,
              timeout_s: float | None = None) -> Any:
        return self._request("POST", path, body, task_id, max_bytes, timeout_s)["output"]

    def _request(self, method: str, path: str, body: dict | None, task_id: str | None,
                 max_bytes: int | None = None, timeout_s: float | None = None) -> Any:
        """The server's JSON answer; given `max_bytes`, an answer longer than that is read no further and comes back
        as `{"output": <the prefix of its output string>}` (`_output_prefix`)."""
        data = None if body is None else json.dumps(body).encode()
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        connection = self._connection(timeout_s)
        try:
            connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            if response.status >= 400:
                raise AppWorldServerError(self._refusal(path, task_id, response.status), "refused")
            raw = response.read() if max_bytes is None else response.read(max_bytes + 1)
            if max_bytes is not None and len(raw) > max_bytes:
                return {"output": _output_prefix(raw[:max_bytes])}
        except TimeoutError:
            raise AppWorldServerError(f"AppWorld server at {self.address} gave no answer to {path} within "
                                      f"{timeout_s:g} s (hung or overloaded)", "timeout") from None
        except (OSError, http.client.HTTPException) as error:
            raise AppWorldServerError(f"AppWorld server at {self.address} is not reachable on {path} (dead or not "
                                      f"started: {type(error).__name__}: {error})", "down") from None
        finally:
            connection.close()
        try:
            return json.loads(raw)
        except ValueError:
            raise AppWorldServerError(f"AppWorld server at {self.address} answered {path} with non-JSON: "
                                      f"{raw[:200]!r}", "bad_response") from None

    def _refusal(self, path: str, task_id: str | None, status: int) -> str:
        """What most likely went wrong behind the server's bare HTTP error, from what the client knows."""
        if path == "/initialize" or path.startswith("/tasks/"):
            why = (f"could not load task {task_id!r}: unknown task id, or its files under APPWORLD_ROOT/data/tasks/ "
                   "are missing or incomplete")
        elif self.active_task is None:
            why = (f"task {task_id!r} is not initialized on this server (call initialize first; a restarted server "
                   "holds no task)")
        elif self.active_task != task_id:
            why = (f"the server holds task {self.active_task!r}, not {task_id!r} (one task per server: run one server "
                   "per worker)")
        else:
            why = (f"the server failed on task {task_id!r} although this client initialized it (restarted by someone "
                   "else, or an error inside AppWorld)")
        message = f"AppWorld server at {self.address} refused {path} with HTTP {status}: {why}"
        if not self.healthy():
            message += "; the server no longer answers (dead)"
        if self.log_tail is not None:  # the server's own exception is the log's last line
            tail = self.log_tail()
            last_line = next((line for line in reversed(tail.splitlines()) if line.strip()), "")
            message += f"\nthe server logged: {last_line.strip()}\n--- end of the server log ---\n{tail}"
        return message


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket (no proxy is ever consulted: http.client reads no proxy settings)."""

    def __init__(self, path: str, timeout_s: float):
        super().__init__("localhost", timeout=timeout_s)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


def _output_prefix(raw: bytes) -> str:
    """The text of the `output` string at the start of a cut answer (`{"output": "...`), up to its last whole
    character (a cut escape, `\\uXXXX` at most, is dropped). Another shape gives "": nothing to keep."""
    text = raw.decode("utf-8", "ignore")
    key = text.find('"output"')
    opening = text.find('"', text.find(":", key) + 1) if key >= 0 else -1
    if opening < 0:
        return ""
    body = text[opening + 1:]
    for cut in range(7):  # the longest JSON escape is 6 characters
        try:
            value = json.loads(f'"{body[:len(body) - cut]}"')
        except ValueError:
            continue
        return value if isinstance(value, str) else ""
    return ""
